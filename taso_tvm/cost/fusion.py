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

Partitioning is incremental. Fusion never crosses a *barrier edge*, an edge into an anchor or an opaque node
(the path pattern through it is at least OUT_EWISE_FUSABLE, which fails every fusion test; an injective
op's path check fails on the anchor's group). So the graph splits into *components*, the nodes joined by
non-barrier edges, and FuseOps run on one component alone, with the tensors used outside it marked external,
groups it exactly as FuseOps on the whole graph does (`tests/test_incremental.py` checks this on rewritten
zoo graphs).
Each component is keyed by its content (operator, attributes and types of each node in topological order, the
wiring inside it, and which tensors leave it) and its kernels are memoized under that key. A rewrite changes
a few components; the rest, including the nodes a rewrite re-creates downstream (same content, new ids), are
memo hits. Whole partitions are memoized by the graph's node set too.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from ..graph.tensor_graph import NodeStore, TensorGraph, weight_value
from .graph_partitioner import MAX_FUSE_DEPTH, find_root, fuse
from .kernel import Kernel, KernelSig
from .patterns import INJECTIVE, OUT_EWISE_FUSABLE, expand


class _StoreMemo:
    """Per-store facts about nodes: weight-only flags, content ids, whole partitions."""

    __slots__ = ("weight_only", "content", "graphs")

    def __init__(self) -> None:
        self.weight_only: dict[int, bool] = {}
        self.content: dict[int, Optional[int]] = {}  # node id -> content id (None: source or weight-only)
        self.graphs: OrderedDict = OrderedDict()


class Partitioner:
    """Kernel partitioning with memoization; one instance serves any number of graphs and stores.

    `split_components=False` runs FuseOps on the whole graph at once (the reference the split is tested
    against)."""

    def __init__(self, max_fuse_depth: int = MAX_FUSE_DEPTH, graph_memo_size: int = 8192,
                 component_memo_size: int = 1 << 18, split_components: bool = True):
        self.max_fuse_depth = max_fuse_depth
        self.graph_memo_size = graph_memo_size
        self.component_memo_size = component_memo_size
        self.split_components = split_components
        self._memos: "weakref.WeakKeyDictionary[NodeStore, _StoreMemo]" = weakref.WeakKeyDictionary()
        self._content_ids: dict[tuple, int] = {}
        self._content_info: list[tuple] = []  # content id -> (sub-node patterns, TupleGetItem count, barrier)
        self._components: OrderedDict = OrderedDict()
        self.component_misses = 0

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

    def _weight_spec(self, graph: TensorGraph, memo: _StoreMemo, ref: tuple, ty) -> Any:
        """An input's weight flag in a signature: False, True, or for a one-element constant ("value", v): its
        value decides the kernel (a fused attention's NaN guard with fill 0 is the runtime's node, another fill is
        its decomposition)."""
        if not self._weight_only(graph, memo, ref[0]):
            return False
        if ty.size == 1:  # a weight, or an expression of weights (div_by_constant's 1 / sqrt 2 in a GELU): its
            try:  # value, so the kernel is built with it and written as the runtime's fused node (Gelu)
                return ("value", float(weight_value(graph, ref).reshape(-1)[0]))
            except (TypeError, ValueError, KeyError, IndexError):
                return True
        return True

    def _content(self, graph: TensorGraph, memo: _StoreMemo, node) -> Optional[int]:
        """The node's content id (equal for nodes that compute the same operator on the same types), or None
        for sources and weight-only nodes."""
        nid = node.id
        if nid in memo.content:
            return memo.content[nid]
        op = node.op
        wo = self._weight_only(graph, memo, nid)
        cid = None
        if op not in ("input", "weight") and not wo:
            in_types = tuple(graph.type(r) for r in node.inputs)
            attrs = ("key", node.attrs["key"]) if op == "opaque" else graph.store.attr_items(node)
            ckey = (op, attrs, in_types, node.types)
            cid = self._content_ids.get(ckey)
            if cid is None:
                cid = self._content_ids[ckey] = len(self._content_info)
                chain, ntgi = expand(op, node.attrs, in_types, node.types)
                barrier = self.split_components and chain[0] >= OUT_EWISE_FUSABLE
                self._content_info.append((chain, ntgi, barrier))
        memo.content[nid] = cid
        return cid

    # ------------------------------------------------------------------ partition
    def _partition(self, graph: TensorGraph, memo: _StoreMemo) -> list[Kernel]:
        content = memo.content
        info = self._content_info
        uf: dict[int, int] = {}

        def find(x: int) -> int:
            return find_root(uf, x)

        order = []
        for node in graph.topo_order():
            cid = content[node.id] if node.id in content else self._content(graph, memo, node)
            if cid is None:
                continue
            nid = node.id
            order.append(node)
            uf[nid] = nid
            if not info[cid][2]:  # edges into a barrier do not join components
                for i, _ in node.inputs:
                    if i in uf:
                        a, b = find(i), find(nid)
                        if a != b:
                            uf[b] = a
        # components in topological order, each member described by its content and its inputs' origins:
        # (local index, output) inside the component, -1 for a runtime tensor from outside, -2 for a weight
        wmemo = memo.weight_only
        comps: dict[int, list] = {}
        descs: dict[int, list] = {}
        pos: dict[int, int] = {}
        rootof: dict[int, int] = {}
        leaving: set = set()  # tensors used outside their component (or by the graph's caller)
        exits: dict[int, int] = {}  # node id -> bit mask of its outputs in `leaving`
        for node in order:
            nid = node.id
            r = rootof[nid] = find(nid)
            members = comps.get(r)
            if members is None:
                members = comps[r] = []
                descs[r] = []
            pos[nid] = len(members)
            members.append(node)
            ins = []
            for ref in node.inputs:
                p = ref[0]
                rp = rootof.get(p)
                if rp is None:
                    ins.append(-2 if wmemo[p] else -1)
                elif rp == r:
                    ins.append((pos[p], ref[1]))
                else:
                    ins.append(-1)
                    leaving.add(ref)
                    exits[p] = exits.get(p, 0) | (1 << ref[1])
            descs[r].append((content[nid], tuple(ins)))
        for ref in graph.outputs:
            if ref[0] in uf:
                leaving.add(ref)
                exits[ref[0]] = exits.get(ref[0], 0) | (1 << ref[1])
        kernels = []
        cmemo = self._components
        for r, members in comps.items():
            key = tuple((c, ins, exits.get(n.id, 0)) for (c, ins), n in zip(descs[r], members))
            comp = cmemo.get(key)
            if comp is None:
                comp = self._fuse_component(graph, memo, members, leaving)
                cmemo[key] = comp
                self.component_misses += 1
                if len(cmemo) > self.component_memo_size:
                    cmemo.popitem(last=False)
            for idx, root, sig in comp:
                kernels.append(Kernel(sig, tuple(members[k].id for k in idx), members[root].id))
        kernels.sort(key=lambda k: k.nodes[-1])
        return kernels

    def _fuse_component(self, graph: TensorGraph, memo: _StoreMemo, members: list, leaving: set) -> tuple:
        """FuseOps on one component (nodes in topological order); tensors in `leaving` are external uses.
        Returns its kernels in local node indices: ((member indices, root index, signature), ...)."""
        info = self._content_info
        content = memo.content
        pats: list[int] = []
        owner: list[int] = []
        is_tgi: list[bool] = []
        outs: list[list] = []
        tensor_sub: dict[tuple, int] = {}
        for node in members:
            chain, ntgi, _ = info[content[node.id]]
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
        extern = [False] * n
        for ref in leaving:
            s = tensor_sub.get(ref)
            if s is not None:
                extern[s] = True
        root = fuse(pats, outs, extern, self.max_fuse_depth)
        groups: dict[int, list[int]] = {}
        for i in range(n):
            groups.setdefault(root[i], []).append(i)
        local = {node.id: k for k, node in enumerate(members)}
        users: dict[tuple, set] = {}  # tensor -> member ids reading it
        for node in members:
            for ref in node.inputs:
                if ref[0] in local:
                    users.setdefault(ref, set()).add(node.id)
        result = []
        for r, subs in groups.items():
            nodes = []
            for s in subs:
                if not is_tgi[s] and (not nodes or nodes[-1] != owner[s]):
                    nodes.append(owner[s])
            if not nodes:
                continue  # TupleGetItems only: no kernel
            kroot = owner[r]
            mset = set(nodes)
            if kroot not in mset:
                kroot = nodes[-1]
            out_refs = [(nid, t) for nid in nodes for t in range(len(graph.node(nid).types))
                        if (nid, t) in leaving or not users.get((nid, t), mset) <= mset]
            sig, _ = self._signature(graph, memo, mset, nodes, kroot, out_refs)
            result.append((tuple(local[i] for i in nodes), local[kroot], sig))
        return tuple(result)

    def signature(self, graph: TensorGraph, nodes: list[int], users: dict) -> tuple[KernelSig, list[int]]:
        """The signature of any set of runtime nodes of `graph` (listed in topological order) as one kernel, and
        the graph node id of each signature node. `users`: tensor -> ids of the nodes reading it (a tensor read
        outside the set, or a graph output, is one of the kernel's outputs)."""
        memo = self._memo(graph.store)
        mset = set(nodes)
        outs = set(graph.outputs)
        out_refs = [(nid, t) for nid in nodes for t in range(len(graph.node(nid).types))
                    if (nid, t) in outs or not users.get((nid, t), mset) <= mset]
        return self._signature(graph, memo, mset, list(nodes), nodes[-1], out_refs)

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
                    inputs.append((tuple(ty.shape), ty.dtype, self._weight_spec(graph, memo, ref, ty)))
                refs.append((-1 - k, 0))
            if node.op == "opaque":  # its signature carries its output types (it cannot be re-inferred)
                attrs = (("key", node.attrs["key"]), ("types", tuple((tuple(t.shape), t.dtype) for t in node.types)))
            else:
                attrs = graph.store.attr_items(node)
            specs.append((node.op, attrs, tuple(refs)))
        if out_refs:
            outputs = tuple(sorted((local[i], t) for i, t in out_refs))
        else:
            outputs = tuple((local[root], t) for t in range(len(graph.node(root).types)))
        return KernelSig.make(tuple(specs), tuple(inputs), outputs), order
