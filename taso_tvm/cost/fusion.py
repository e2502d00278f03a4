"""Partition a TensorGraph into kernels the way TVM Relax's FuseOps groups its calls.

The fusion rule is TVM's own (`relax/transform/fuse_ops.cc` + `relax/analysis/graph_partitioner.cc`), replayed
on the graph's *sub-nodes* (see `patterns.expand`: one per legalized `call_tir`, one per `TupleGetItem`):

1. Weight-only subgraphs are folded by FoldConstant before FuseOps: they become constants and form no kernel.
2. Post-dominator tree over the dataflow graph: a sub-node whose tensor is a graph output (an external reference)
   has no post-dominator; otherwise its immediate post-dominator is the LCA of its consumers, and the path
   pattern is the max of the consumer (edge) patterns met on the way.
3. Three passes in topological order, each fusing a sub-node's group into its post-dominator's group when:
   - phase 0, OUT_EWISE_FUSABLE anchor (conv2d, matmul, pooling, mean, softmax, layer_norm): the path pattern is
     ELEMWISE and every group on the way is at most BROADCAST (so conv2d + bias add + relu is one kernel,
     while conv2d -> batch_norm is not: batch_norm is INJECTIVE);
   - phases 0-1, ELEMWISE/BROADCAST: path pattern at most INJECTIVE (or COMM_REDUCE), groups on the way at
     most INJECTIVE, the post-dominator's group anything but OPAQUE (element-wise ops join the kernel after
     them, including an anchor's);
   - phase 1, INJECTIVE (batch_norm, concat, transpose, reshape, split): every group on the way and the
     post-dominator's group at most INJECTIVE;
   - at most 256 sub-nodes per group (relax.FuseOps.max_depth).
   The group pattern becomes the anchor's when an anchor's group merges in (union-find, as in TVM).
4. A group with at least one call is one kernel (a group of TupleGetItems alone is free). A kernel that is a
   lone reshape is what RewriteDataflowReshape later turns into a view; it stays a kernel here and is measured
   as such (its measured cost is the view's real cost).

Kernels are memoized per node store: the per-node expansion by node id, the signature of a group by its node
set, and whole partitions by the graph's node set and outputs, so re-costing a graph costs a dict lookup.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Optional

from ..graph.tensor_graph import NodeStore, TensorGraph
from .graph_partitioner import MAX_FUSE_DEPTH, fuse
from .kernel import Kernel, KernelSig, freeze_attrs
from .patterns import INJECTIVE, expand



class _StoreMemo:
    __slots__ = ("info", "weight_only", "attrs", "sigs", "graphs")

    def __init__(self) -> None:
        self.info: dict[int, Optional[tuple]] = {}
        self.weight_only: dict[int, bool] = {}
        self.attrs: dict[int, tuple] = {}  # id(attrs dict) -> frozen attrs (remade nodes share their dict)
        self.sigs: dict[tuple, KernelSig] = {}
        self.graphs: OrderedDict = OrderedDict()


class Partitioner:
    """Kernel partitioning with memoization; one instance serves any number of graphs and stores."""

    def __init__(self, max_fuse_depth: int = MAX_FUSE_DEPTH, graph_memo_size: int = 8192):
        self.max_fuse_depth = max_fuse_depth
        self.graph_memo_size = graph_memo_size
        self._memos: "weakref.WeakKeyDictionary[NodeStore, _StoreMemo]" = weakref.WeakKeyDictionary()

    def _memo(self, store: NodeStore) -> _StoreMemo:
        m = self._memos.get(store)
        if m is None:
            m = self._memos[store] = _StoreMemo()
        return m

    def kernels(self, graph: TensorGraph) -> tuple[Kernel, ...]:
        """The graph's kernels in topological order of their roots."""
        memo = self._memo(graph.store)
        gkey = (graph.node_ids, graph.outputs)
        hit = memo.graphs.get(gkey)
        if hit is not None:
            memo.graphs.move_to_end(gkey)
            return hit
        result = tuple(self._partition(graph, memo))
        memo.graphs[gkey] = result
        if len(memo.graphs) > self.graph_memo_size:
            memo.graphs.popitem(last=False)
        return result

    # ------------------------------------------------------------------ per node
    def _weight_only(self, graph: TensorGraph, memo: _StoreMemo, nid: int) -> bool:
        wo = memo.weight_only.get(nid)
        if wo is None:
            wo = graph.is_weight_only((nid, 0), memo.weight_only)
        return wo

    def _info(self, graph: TensorGraph, memo: _StoreMemo, node) -> Optional[tuple]:
        """(sub-node patterns, TupleGetItem count), or None for sources and weight-only nodes. Nodes come in
        topological order, so the inputs' weight-only flags are known."""
        if node.id in memo.info:
            return memo.info[node.id]
        wmemo = memo.weight_only
        op = node.op
        if op == "weight":
            wo = True
        elif op in ("input", "opaque") or not node.inputs:
            wo = False
        else:
            wo = all(wmemo[i] if i in wmemo else self._weight_only(graph, memo, i) for i, _ in node.inputs)
        wmemo[node.id] = wo
        if op in ("input", "weight") or wo:
            inf = None
        else:
            in_types = [graph.type(r) for r in node.inputs]
            inf = expand(node.op, node.attrs, in_types, node.types)
        memo.info[node.id] = inf
        return inf

    # ------------------------------------------------------------------ partition
    def _partition(self, graph: TensorGraph, memo: _StoreMemo) -> list[Kernel]:
        pats: list[int] = []
        owner: list[int] = []
        is_tgi: list[bool] = []
        outs: list[list] = []
        tensor_sub: dict[tuple, int] = {}
        for node in graph.topo_order():
            inf = self._info(graph, memo, node)
            if inf is None:
                continue
            chain, ntgi = inf
            base = len(pats)
            p0 = chain[0]
            for ref in node.inputs:
                s = tensor_sub.get(ref)
                if s is not None:
                    outs[s].append((base, p0))
            nid = node.id
            for k, p in enumerate(chain):
                pats.append(p)
                owner.append(nid)
                is_tgi.append(False)
                outs.append([])
                if k:
                    outs[base + k - 1].append((base + k, p))
            last = len(pats) - 1
            if ntgi:
                for t in range(ntgi):
                    s = len(pats)
                    pats.append(INJECTIVE)
                    owner.append(nid)
                    is_tgi.append(True)
                    outs.append([])
                    outs[last].append((s, INJECTIVE))
                    tensor_sub[(nid, t)] = s
            else:
                for t in range(len(node.types)):
                    tensor_sub[(nid, t)] = last
        n = len(pats)
        if n == 0:
            return []
        extern = [False] * n
        for ref in graph.outputs:
            s = tensor_sub.get(ref)
            if s is not None:
                extern[s] = True
        root = fuse(pats, outs, extern, self.max_fuse_depth)
        groups: dict[int, list[int]] = {}
        for i in range(n):
            groups.setdefault(root[i], []).append(i)
        kernels = []
        consumers = None
        for r, members in groups.items():
            nodes = []
            for s in members:
                if not is_tgi[s] and (not nodes or nodes[-1] != owner[s]):
                    nodes.append(owner[s])
            if not nodes:
                continue  # TupleGetItems only: no kernel
            if consumers is None:
                consumers = graph.consumers()
            kernels.append(self._kernel(graph, memo, nodes, owner[r], consumers))
        kernels.sort(key=lambda k: k.nodes[-1] if k.nodes else -1)
        return kernels

    def _kernel(self, graph: TensorGraph, memo: _StoreMemo, nodes: list[int], root: int, consumers) -> Kernel:
        members = set(nodes)
        out_refs = []
        for nid in nodes:
            for t in range(len(graph.node(nid).types)):
                for c, _ in consumers.get((nid, t), ()):
                    if c == -1 or c not in members:
                        out_refs.append((nid, t))
                        break
        key = (frozenset(members), tuple(out_refs))
        sig = memo.sigs.get(key)
        if root not in members:
            root = nodes[-1]
        if sig is None:
            sig, order = self._signature(graph, memo, members, nodes, root, out_refs)
            memo.sigs[key] = sig
        return Kernel(sig, tuple(nodes), root)

    def _signature(self, graph: TensorGraph, memo: _StoreMemo, members: set, nodes: list[int], root: int,
                   out_refs: list) -> tuple[KernelSig, list[int]]:
        store_nodes = graph.store.nodes
        order: list[int] = []
        seen: set[int] = set()
        for start in [root] + nodes:
            if start in seen:
                continue
            stack = [(start, 0)]
            seen.add(start)
            while stack:
                nid, k = stack[-1]
                ins = store_nodes[nid].inputs
                if k < len(ins):
                    stack[-1] = (nid, k + 1)
                    child = ins[k][0]
                    if child in members and child not in seen:
                        seen.add(child)
                        stack.append((child, 0))
                else:
                    stack.pop()
                    order.append(nid)
        local = {nid: i for i, nid in enumerate(order)}
        ext: dict[tuple, int] = {}
        inputs = []
        specs = []
        frozen = memo.attrs
        for nid in order:
            node = store_nodes[nid]
            refs = []
            for ref in node.inputs:
                if ref[0] in local:
                    refs.append((local[ref[0]], ref[1]))
                    continue
                k = ext.get(ref)
                if k is None:
                    k = ext[ref] = len(inputs)
                    ty = graph.type(ref)
                    inputs.append((tuple(ty.shape), ty.dtype, self._weight_only(graph, memo, ref[0])))
                refs.append((-1 - k, 0))
            if node.op == "opaque":  # its signature carries its output types (it cannot be re-inferred)
                attrs = (("key", node.attrs["key"]), ("types", tuple((tuple(t.shape), t.dtype) for t in node.types)))
            else:
                attrs = frozen.get(id(node.attrs))
                if attrs is None:
                    attrs = frozen[id(node.attrs)] = freeze_attrs(node.attrs)
            specs.append((node.op, attrs, tuple(refs)))
        if out_refs:
            outputs = tuple(sorted((local[i], t) for i, t in out_refs))
        else:
            outputs = tuple((local[root], t) for t in range(len(graph.node(root).types)))
        return KernelSig.make(tuple(specs), tuple(inputs), outputs), order
