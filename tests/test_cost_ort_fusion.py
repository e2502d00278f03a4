"""The ort backend's kernels are the units ONNX Runtime's own session makes (`cost.ort_fusion`), learned from its
optimized graph: a rewrite that breaks one of its fusions costs more, and the grouping agrees with ONNX Runtime
on a whole model."""
from __future__ import annotations

import math

import numpy as np
import pytest

from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.cost.cache import CostCache
from taso_tvm.cost.config import CACHE_ENV
from taso_tvm.cost.ort_fusion import OrtGrouping, learn_groups, optimized_graph, window_onnx
from taso_tvm.graph import NodeStore, TensorGraph, TensorType

ort = pytest.importorskip("onnxruntime")

HIDDEN = 256


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)


@pytest.fixture(scope="module")
def cm():
    with CostModel(load_cost_config(backend="ort", cache="", repeat=20)) as m:
        yield m


def _w(S, *shape, value=None):
    rng = np.random.default_rng(len(S.nodes))
    arr = np.full(shape, value, np.float32) if value is not None else (rng.standard_normal(shape) * 0.1).astype(
        np.float32)
    return S.weight(arr)


def _gelu(S, h, form: str):
    """erf GELU as exporters write it: x * (erf(x / sqrt(2)) + 1) * 0.5; `mul1`: the Div turned into a Mul by a
    [1]-shaped 1/sqrt(2) (what `div_by_constant` made of it)."""
    if form == "div":
        d = S.add("div", [h, S.weight(np.array(math.sqrt(2), np.float32))])[0]
    else:
        d = S.add("mul", [h, S.weight(np.array([1 / math.sqrt(2)], np.float32))])[0]
    a = S.add("add", [S.add("erf", [d])[0], S.weight(np.array(1.0, np.float32))])[0]
    return S.add("mul", [S.add("mul", [h, a])[0], S.weight(np.array(0.5, np.float32))])[0]


def _gelu_graph(form: str) -> TensorGraph:
    S = NodeStore()
    return TensorGraph(S, [_gelu(S, S.input("x", TensorType((1, 128, 4 * HIDDEN))), form)])


def _layernorm(S, x):
    return S.add("layernorm", [x, _w(S, HIDDEN, value=1.0), _w(S, HIDDEN, value=0.0)], axes=(-1,))[0]


def _linear(S, x, n):
    return S.add("add", [S.add("matmul", [x, _w(S, x_dim(S, x), n)])[0], _w(S, n)])[0]


def x_dim(S, ref):
    return S.type(ref).shape[-1]


def _encoder_layer(seq: int = 16, heads: int = 4) -> TensorGraph:
    """One BERT layer (attention, residual + LayerNormalization, GELU FFN) as an exporter writes it."""
    S = NodeStore()
    x = S.input("x", TensorType((1, seq, HIDDEN)))
    dh = HIDDEN // heads

    def heads_of(t, perm):
        return S.add("transpose", [S.add("reshape", [t], shape=(1, seq, heads, dh))[0]], perm=perm)[0]

    q = heads_of(_linear(S, x, HIDDEN), (0, 2, 1, 3))
    k = heads_of(_linear(S, x, HIDDEN), (0, 2, 3, 1))
    v = heads_of(_linear(S, x, HIDDEN), (0, 2, 1, 3))
    s = S.add("div", [S.add("matmul", [q, k])[0], S.weight(np.array(math.sqrt(dh), np.float32))])[0]
    ctx = S.add("matmul", [S.add("softmax", [s], axis=-1)[0], v])[0]
    ctx = S.add("reshape", [S.add("transpose", [ctx], perm=(0, 2, 1, 3))[0]], shape=(1, seq, HIDDEN))[0]
    h = _layernorm(S, S.add("add", [_linear(S, ctx, HIDDEN), x])[0])
    f = _linear(S, _gelu(S, _linear(S, h, 4 * HIDDEN), "div"), HIDDEN)
    return TensorGraph(S, [_layernorm(S, S.add("add", [f, h])[0])])


def _units(grouping, graph):
    return {frozenset(k.nodes) for k in grouping.kernels(graph)}


def test_gelu_is_one_unit_and_the_form_that_breaks_it_costs_more(cm):
    div, mul1 = _gelu_graph("div"), _gelu_graph("mul1")
    (unit,) = cm.kernels(div)  # ONNX Runtime's Gelu: one unit of five operators
    assert len(unit.nodes) == 5
    assert len(cm.kernels(mul1)) == 5  # the [1]-shaped Mul does not match ONNX Runtime's Gelu fusion
    ops = [n.op_type for n in optimized_graph(window_onnx(unit.sig)[0], cm.backend.session_options(),
                                              cm.backend.providers).node]
    assert ops == ["Gelu"]
    assert cm.graph_cost(mul1) > 1.3 * cm.graph_cost(div)


def test_residual_add_and_layernorm_are_one_unit(cm):
    S = NodeStore()
    x, r = S.input("x", TensorType((1, 128, HIDDEN))), S.input("r", TensorType((1, 128, HIDDEN)))
    s = S.add("add", [x, r])[0]
    g = TensorGraph(S, [_layernorm(S, s)])
    (unit,) = cm.kernels(g)  # FuseOps would make two kernels (layer_norm is an anchor)
    assert len(cm.partitioner.kernels(g)) == 2
    ops = [n.op_type for n in optimized_graph(window_onnx(unit.sig)[0], cm.backend.session_options(),
                                              cm.backend.providers).node]
    assert ops == ["SkipLayerNormalization"]


def test_grouping_agrees_with_ort_on_a_whole_layer(cm):
    g = _encoder_layer()
    runtime = {i for k in cm.partitioner.kernels(g) for i in k.nodes}  # (weight-only nodes fold away)
    whole, order = cm.partitioner.signature(g, [n.id for n in g.topo_order() if n.id in runtime], {})
    # ONNX Runtime on the whole layer, as one model: which nodes each of its optimized nodes runs
    want = {frozenset(order[i] for i in grp) for grp in learn_groups(whole, cm.backend.session_options(),
                                                                     cm.backend.providers)}
    got = {u for u in _units(cm.grouping, g) if len(u) > 1}
    assert got == want
    ops = {n.op_type for n in optimized_graph(window_onnx(whole)[0], cm.backend.session_options(),
                                              cm.backend.providers).node}
    assert {"Gelu", "SkipLayerNormalization"} <= ops or {"BiasGelu", "SkipLayerNormalization"} <= ops, ops


def test_groupings_are_kept_in_the_cost_cache(cm, tmp_path):
    g = _encoder_layer()
    cache = CostCache(tmp_path / "c.sqlite")
    first = OrtGrouping(cm.partitioner, cm.backend.session_options(), cm.backend.providers, cache, cm.scope)
    units = _units(first, g)
    assert first.sessions > 0
    again = OrtGrouping(cm.partitioner, cm.backend.session_options(), cm.backend.providers, cache, cm.scope)
    assert _units(again, g) == units and again.sessions == 0
    cache.close()
