"""CostModel with the analytic roofline backend: sums, monotonicity, views, speed, progress output."""
from __future__ import annotations

import io
import logging
import math
import time

import numpy as np
import pytest

from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.cost.flops import kernel_flops_bytes
from taso_tvm.progress import Progress
from taso_tvm.graph import NodeStore, TensorGraph, TensorType


def _model() -> CostModel:
    return CostModel(load_cost_config(backend="analytic", cache=""))


def _conv_graph(cout: int, cin: int = 16, hw: int = 28):
    S = NodeStore()
    x = S.input("x", TensorType((1, cin, hw, hw)))
    w = S.weight(np.zeros((cout, cin, 3, 3), np.float32))
    return TensorGraph(S, S.add("conv2d", [x, w], padding=(1, 1, 1, 1)))


def test_graph_cost_is_the_sum_of_kernel_costs():
    S = NodeStore()
    x = S.input("x", TensorType((1, 8, 16, 16)))
    y = S.add("relu", S.add("conv2d", [x, S.weight(np.zeros((8, 8, 3, 3), np.float32))], padding=1))[0]
    z = S.add("transpose", [S.add("maxpool2d", [y], kernel=(2, 2), strides=(2, 2))[0]], perm=(0, 2, 3, 1))
    g = TensorGraph(S, z)
    with _model() as cm:
        kc = cm.kernel_costs(g)
        assert len(kc) == 3
        assert cm.graph_cost(g) == pytest.approx(sum(c for _, c in kc))


def test_bigger_kernels_cost_more_and_flops_are_right():
    with _model() as cm:
        small, big = cm.graph_cost(_conv_graph(16)), cm.graph_cost(_conv_graph(32))
        assert big > small
        sig = cm.kernels(_conv_graph(16))[0].sig
    flops, nbytes = kernel_flops_bytes(sig)
    assert flops == 2 * 16 * 28 * 28 * 16 * 9
    assert nbytes == 4 * (16 * 28 * 28 + 16 * 16 * 9 + 16 * 28 * 28)


def test_lone_reshape_is_a_view():
    S = NodeStore()
    x = S.input("x", TensorType((64, 64)))
    g = TensorGraph(S, S.add("reshape", [x], shape=(4096,)))
    with _model() as cm:
        k = cm.kernels(g)[0]
        assert k.sig.is_view_only
        assert cm.graph_cost(g) == pytest.approx(cm.config.peaks()["launch_us"] * 1e-3)


def test_weight_only_graph_costs_nothing():
    S = NodeStore()
    w = S.weight(np.ones((4, 4), np.float32))
    g = TensorGraph(S, S.add("transpose", [w], perm=(1, 0)))
    with _model() as cm:
        assert cm.kernels(g) == () and cm.graph_cost(g) == 0.0


def test_opaque_nodes_cost_by_bytes():
    from tvm import relax

    S = NodeStore()
    x = S.input("x", TensorType((256, 256)))
    v = relax.Var("x", relax.TensorType([256, 256], "float32"))
    node = S.opaque(relax.op.cumsum(v, axis=0), [x], [TensorType((256, 256))], key="op1")
    g = TensorGraph(S, node.outputs)
    with _model() as cm:
        assert [k.sig.ops for k in cm.kernels(g)] == [("opaque",)]
        assert math.isfinite(cm.graph_cost(g)) and cm.graph_cost(g) > 0


def test_cached_graph_costs_fast():
    S = NodeStore()
    y = S.input("x", TensorType((1, 8, 8, 8)))
    for i in range(100):  # 300 ops: conv + add + relu blocks
        y = S.add("conv2d", [y, S.weight(np.full((8, 8, 1, 1), i, np.float32))])[0]
        y = S.add("relu", [S.add("add", [y, S.weight(np.full((1, 8, 1, 1), i, np.float32))])[0]])[0]
    g = TensorGraph(S, [y])
    with _model() as cm:
        total = cm.graph_cost(g)
        t0 = time.perf_counter()
        for _ in range(100):
            assert cm.graph_cost(g) == total
        per_call_ms = (time.perf_counter() - t0) / 100 * 1e3
    assert per_call_ms < 1.0, per_call_ms


def test_progress_bar_on_a_terminal_and_log_line_otherwise(caplog):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    with Progress(4, "measuring", stream=tty) as p:
        for _ in range(4):
            p.update(note="conv2d")
    assert "\rmeasuring [" in tty.getvalue() and "4/4" in tty.getvalue()
    plain = io.StringIO()
    with caplog.at_level(logging.INFO, logger="taso_tvm.progress"):
        with Progress(2, "measuring", stream=plain) as p:
            p.update()
            p.update()
    assert plain.getvalue() == ""
    assert any("measuring: 2/2 kernels" in r.getMessage() for r in caplog.records)


def test_an_operator_without_a_cost_facet_is_a_clear_error():
    from taso_tvm.cost.flops import node_flops
    from taso_tvm.graph.ops import FacetMissing

    with pytest.raises(FacetMissing, match="operator 'opaque' has no 'cost.flops' facet"):
        node_flops("opaque", {}, [], [(4,)])
