"""The TVM backend groups a graph's fused registry operators as the build does: on their decompositions."""
from __future__ import annotations

import numpy as np

from taso_tvm.cost import Partitioner
from taso_tvm.cost.decomposed import DecomposedGrouping
from taso_tvm.graph import TensorGraph
from taso_tvm.graph.ops.decompose import decomposition
from taso_tvm.graph.tensor_graph import NodeStore
from taso_tvm.graph.types import TensorType


def _matmul_bias_gelu() -> tuple[TensorGraph, int, int]:
    s = NodeStore()
    x = s.input("x", TensorType((4, 16)))
    w = s.weight(np.ones((16, 32), "float32"))
    b = s.weight(np.ones((32,), "float32"))
    (mm,) = s.add("matmul", [x, w])
    (y,) = s.add("bias_gelu", [mm, b])
    return TensorGraph(s, [y]), mm[0], y[0]


def test_a_fused_operator_joins_its_neighbours_kernel():
    g, mm, gelu = _matmul_bias_gelu()
    assert len(Partitioner().kernels(g)) == 2  # matmul | bias_gelu, opaque
    grouping = DecomposedGrouping(Partitioner())
    (k,) = grouping.kernels(g)  # matmul + add + gelu: one FuseOps group, as the build makes it
    assert "bias_gelu" not in k.sig.ops and "matmul" in k.sig.ops
    assert set(k.nodes) == {mm, gelu} and k.root == gelu  # the original graph's node ids
    assert grouping.kernels(g) is grouping.kernels(g)  # memoized


def test_a_graph_without_fused_operators_is_partitioned_as_is():
    s = NodeStore()
    x = s.input("x", TensorType((4, 16)))
    (y,) = s.add("relu", [x])
    g = TensorGraph(s, [y])
    p = Partitioner()
    assert DecomposedGrouping(p).kernels(g) == p.kernels(g)


def test_the_lowering_mode_decides_what_is_expanded():
    assert decomposition("mha", "decompose") is not None
    assert decomposition("mha", "relax_attention") is None  # R.nn.attention: one kernel
    assert decomposition("skip_layernorm", "relax_attention") is not None
    assert decomposition("bias_gelu", "composite") is None and decomposition("matmul", "decompose") is None


def test_kernels_name_the_nodes_of_their_own_graph():
    """A graph of the same store that spells a decomposition out shares its shadow nodes with the fused graph: its
    kernels still name its own nodes (the settle step measures their union whole)."""
    g, mm, _ = _matmul_bias_gelu()
    s = g.store
    b = next(n for n in g.topo_order() if n.op == "weight" and n.types[0].shape == (32,)).outputs[0]
    (a,) = s.add("add", [(mm, 0), b])
    (y,) = s.add("gelu", [a])
    spelled = TensorGraph(s, [y])
    grouping = DecomposedGrouping(Partitioner())
    for graph in (g, spelled):
        ks = grouping.kernels(graph)
        assert len(ks) == 1 and set(ks[0].nodes) <= graph.node_ids and ks[0].root in graph.node_ids
    assert grouping.kernels(g)[0].sig is grouping.kernels(spelled)[0].sig
