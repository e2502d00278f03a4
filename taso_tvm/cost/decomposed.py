"""TVM's kernels of a graph with fused registry operators: FuseOps on their decompositions.

A fused registry operator (attention, skip_layernorm, erf_gelu, ...; `graph.ops.decompose`) is no TVM operator: a
TVM build lowers it to its decomposition, inline, and FuseOps groups those primitive operators with their
neighbours. `DecomposedGrouping` does the same before partitioning: each fused node is replaced by its
decomposition (run with `GraphEvaluator`, which makes registry nodes), in a shadow store kept per graph store, and
the `Partitioner` groups the result. The expansion is memoized per node of the original store (nodes are interned,
so a node id is a structure), and so are whole partitions; a graph without fused operators is partitioned as is.

A kernel's `nodes` are the original graph's node ids it covers (a fused node whose decomposition spans several
kernels is in each of them), its `root` the original node of its root; the shadow store is shared by every graph of
the original store, so which original node a shadow node stands for is decided per graph.
"""
from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from ..graph.ops.base import OpDef
from ..graph.ops.decompose import Evaluator, decomposition
from ..graph.tensor_graph import NodeStore, TensorGraph
from ..graph.types import GraphError, TensorType
from .fusion import Partitioner
from .kernel import Kernel

log = logging.getLogger(__name__)

TensorRef = tuple  # (node id, output index)


class GraphEvaluator(Evaluator):
    """Values are tensors of a `NodeStore`: running a decomposition adds its registry nodes to the store."""

    def __init__(self, store: NodeStore):
        self.store = store

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        return list(self.store.make(opdef.name, args, attrs).outputs)

    def const(self, value: float, like: TensorRef) -> TensorRef:
        dtype = self.store.type(like).dtype
        arr = np.asarray(value, dtype=dtype)
        return self.store.weight(arr, TensorType((), dtype), key=f"decomposed_const:{dtype}:{arr.item()!r}")

    def shape(self, v: TensorRef) -> tuple:
        return self.store.type(v).shape

    def type_of(self, v: TensorRef) -> TensorType:
        return self.store.type(v)


class _Shadow:
    """The expanded copy of one graph store: original node id -> its tensors there, and back."""

    __slots__ = ("store", "refs", "made", "fused", "graphs")

    def __init__(self) -> None:
        self.store = NodeStore()
        self.refs: dict[int, tuple] = {}  # original node id -> its output tensors in `store`
        self.made: dict[int, tuple] = {}  # original node id -> the shadow nodes that compute it (interned: shared)
        self.fused: dict[int, bool] = {}  # original node id -> whether it is expanded
        self.graphs: OrderedDict = OrderedDict()  # (node ids, outputs) -> kernels


class DecomposedGrouping:
    """FuseOps' kernels of a graph whose fused operators are lowered to their decompositions, as a TVM build does.

    mode: the fused lowering the build uses (``decompose``, or ``relax_attention`` on targets with an attention
    kernel, which keeps attention whole); ``None``: the one current at each call."""

    def __init__(self, partitioner: Partitioner, mode: Optional[str] = "decompose", graph_memo_size: int = 8192):
        self.partitioner = partitioner
        self.mode = mode
        self.graph_memo_size = graph_memo_size
        self._shadows: "weakref.WeakKeyDictionary[NodeStore, dict[Optional[str], _Shadow]]" = \
            weakref.WeakKeyDictionary()

    def _shadow(self, store: NodeStore, mode: Optional[str]) -> _Shadow:
        per = self._shadows.get(store)
        if per is None:
            per = self._shadows[store] = {}
        sh = per.get(mode)
        if sh is None:
            sh = per[mode] = _Shadow()
        return sh

    def kernels(self, graph: TensorGraph) -> tuple[Kernel, ...]:
        """The graph's kernels in topological order of their roots (original node ids)."""
        mode = self.mode
        if mode is None:
            from ..graph.ops.decompose import fused_lowering
            mode = fused_lowering()
        sh = self._shadow(graph.store, mode)
        if not any(self._is_fused(sh, n, mode) for n in graph.topo_order()):
            return self.partitioner.kernels(graph)
        gkey = (graph.node_ids, graph.outputs)
        hit = sh.graphs.get(gkey)
        if hit is not None:
            sh.graphs.move_to_end(gkey)
            return hit
        for node in graph.topo_order():
            if node.id not in sh.refs:
                self._copy(graph, sh, node, mode)
        outs = [sh.refs[i][j] for i, j in graph.outputs]
        expanded = TensorGraph(sh.store, outs)
        origin: dict[int, int] = {}  # shadow node id -> the first node of this graph it computes
        for node in graph.topo_order():
            for i in sh.made[node.id]:
                origin.setdefault(i, node.id)
        result = []
        for k in self.partitioner.kernels(expanded):
            nodes = tuple(dict.fromkeys(origin[i] for i in k.nodes))
            result.append(Kernel(k.sig, nodes, origin[k.root]))
        res = tuple(result)
        sh.graphs[gkey] = res
        if len(sh.graphs) > self.graph_memo_size:
            sh.graphs.popitem(last=False)
        return res

    def _is_fused(self, sh: _Shadow, node: Any, mode: str) -> bool:
        f = sh.fused.get(node.id)
        if f is None:
            f = sh.fused[node.id] = decomposition(node.op, mode) is not None
        return f

    def _copy(self, graph: TensorGraph, sh: _Shadow, node: Any, mode: str) -> None:
        """Add `node` (its inputs already copied) to the shadow store, expanded if it is a fused operator."""
        store = sh.store
        ins = tuple(sh.refs[i][j] for i, j in node.inputs)
        outs: Optional[tuple] = None
        if node.op == "input":
            outs = (store.input(node.attrs["name"], node.types[0]),)
        elif node.op == "weight":
            outs = (store.weight(node.value, node.types[0], key=node.attrs["key"]),)
        elif node.op == "opaque":
            outs = tuple(store.remake(node, ins).outputs)
        else:
            program = decomposition(node.op, mode)
            if program is not None:
                try:
                    got = program(GraphEvaluator(store), list(ins), dict(node.attrs))
                    if tuple(store.type(r) for r in got) == tuple(node.types):
                        outs = tuple(got)
                    else:
                        log.debug("%s: decomposition types %s differ from %s; kept whole", node.op,
                                  [store.type(r) for r in got], node.types)
                except GraphError as err:
                    log.debug("%s: decomposition failed (%s); kept whole", node.op, err)
            if outs is None:
                outs = tuple(store.make(node.op, ins, node.attrs).outputs)
        sh.refs[node.id] = outs
        stop = {i for i, _ in ins}  # the nodes between its inputs and its outputs (made now or interned earlier)
        made: list[int] = []
        stack = [i for i, _ in outs]
        seen = set(stack)
        while stack:
            nid = stack.pop()
            made.append(nid)
            for i, _ in store.nodes[nid].inputs:
                if i not in seen and i not in stop:
                    seen.add(i)
                    stack.append(i)
        sh.made[node.id] = tuple(made)


__all__ = ["DecomposedGrouping", "GraphEvaluator"]
