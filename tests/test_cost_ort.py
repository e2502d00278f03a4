"""The ort backend: each kernel's ONNX form is what export_onnx writes and computes what the registry says;
measurements and cache."""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx
import pytest

from taso_tvm.cost import CostModel, Partitioner, load_cost_config
from taso_tvm.cost.config import CACHE_ENV
from taso_tvm.cost.kernel import rebuild
from taso_tvm import export_onnx
from taso_tvm.cost.onnx_kernel import UnsupportedOp, kernel_onnx
from taso_tvm.graph import NodeStore, TensorGraph, TensorType

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)


def _session(model):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _cases():
    S = NodeStore()
    x = S.input("x", TensorType((1, 4, 9, 9)))
    w = S.weight(np.zeros((8, 4, 3, 3), np.float32))
    m = S.input("m", TensorType((2, 6, 8)))
    v8 = [S.weight(np.zeros(8, np.float32)) for _ in range(4)]
    c = S.add("conv2d", [x, w], padding=(0, 1, 2, 1), strides=(2, 1), activation="relu")[0]  # asymmetric pads
    yield "conv_asym_pads_relu", TensorGraph(S, [S.add("add", [c, S.weight(np.zeros((1, 8, 1, 1), np.float32))])[0]])
    g = S.add("conv2d", [x, S.weight(np.zeros((8, 2, 3, 3), np.float32))], groups=2, dilation=(2, 2), padding=2)
    yield "conv_grouped_dilated", TensorGraph(S, g)
    yield "maxpool_ceil", TensorGraph(S, S.add("maxpool2d", [x], kernel=(3, 3), strides=(2, 2), padding=(1, 0, 1, 0),
                                               ceil_mode=True))
    for cip in (True, False):
        yield f"avgpool_pad_{cip}", TensorGraph(S, S.add("avgpool2d", [x], kernel=(3, 3), strides=(2, 2), padding=1,
                                                         count_include_pad=cip))
    yield "batchnorm_relu", TensorGraph(S, S.add("relu", S.add("batchnorm", [c] + v8)))
    p = S.add("split", [x], axis=1, sizes=(1, 3))
    yield "split_concat", TensorGraph(S, S.add("concat", [S.add("sigmoid", [p[1]])[0], p[0]], axis=1))
    t = S.add("transpose", [S.add("reshape", [x], shape=(4, 81))[0]], perm=(1, 0))
    yield "reshape_transpose", TensorGraph(S, t)
    mm = S.add("matmul", [m, S.weight(np.zeros((8, 5), np.float32))])[0]
    yield "matmul_gelu_softmax", TensorGraph(S, S.add("softmax", S.add("gelu", [mm]), axis=1))
    yield "layernorm", TensorGraph(S, S.add("layernorm", [m, S.weight(np.zeros(8, np.float32)),
                                                          S.weight(np.zeros(8, np.float32))], axes=(-1,)))
    yield "mean_keep", TensorGraph(S, S.add("mean", [x], axes=(2, 3), keepdims=True))
    yield "enlarge", TensorGraph(S, S.add("enlarge", [S.input("k", TensorType((8, 4, 1, 1)))], kernel=(3, 3)))
    yield "avgpool_dilated", TensorGraph(S, S.add("avgpool2d", [x], kernel=(2, 2), dilation=(2, 2)))  # opset 19
    yield "merge_gconv", TensorGraph(S, S.add("merge_gconv", [S.input("g", TensorType((8, 2, 3, 3)))], count=2,
                                              groups=4))
    yield "matmul_tanh", TensorGraph(S, S.add("matmul", [m, S.weight(np.zeros((8, 3), np.float32))],
                                              activation="tanh"))
    e = S.add("sqrt", S.add("exp", S.add("neg", S.add("tanh", S.add("erf", [m])))))[0]
    yield "elementwise", TensorGraph(S, S.add("div", [S.add("sub", [e, m])[0], S.add("mul", [m, m])[0]]))


@pytest.mark.parametrize("name,graph", list(_cases()), ids=[n for n, _ in _cases()])
def test_kernel_onnx_matches_the_registry(name, graph):
    rng = np.random.default_rng(1)
    for k in Partitioner().kernels(graph):
        sig = k.sig
        arrays = {i: rng.standard_normal(s).astype(d) for i, (s, d, _) in enumerate(sig.inputs)}
        if name in ("elementwise", "batchnorm_relu"):
            arrays = {i: np.abs(a) + 0.5 for i, a in arrays.items()}
        store, ins, nodes = rebuild(sig)
        ref = TensorGraph(store, [nodes[i].outputs[j] for i, j in sig.outputs])
        want = ref.evaluate({f"p{i}": a for i, a in arrays.items()})
        model = kernel_onnx(sig, weights={i: a for i, a in arrays.items() if sig.inputs[i][2]})
        got = _session(model).run(None, {f"p{i}": a for i, a in arrays.items() if not sig.inputs[i][2]})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name}: {sig.label()}")


def test_ort_costs_cache_and_unsupported_ops(tmp_path, caplog):
    S = NodeStore()
    x = S.input("x", TensorType((1, 16, 28, 28)))
    small = S.add("conv2d", [x, S.weight(np.zeros((16, 16, 3, 3), np.float32))], padding=1)
    big = S.add("conv2d", [x, S.weight(np.zeros((64, 16, 3, 3), np.float32))], padding=1)
    odd = S.add("matmul", [S.input("q", TensorType((4, 8), "int8")), S.weight(np.ones((8, 4), np.int8))])
    g = TensorGraph(S, small + big + odd)  # ONNX MatMul takes no int8: the exporter cannot write that kernel
    cfg = load_cost_config(backend="ort", threads=2, cache=str(tmp_path / "c.sqlite"), repeat=5, progress=False)
    with caplog.at_level(logging.INFO, logger="taso_tvm.cost"):
        with CostModel(cfg) as cm:
            costs = {k.sig.label(): c for k, c in cm.kernel_costs(g)}
            assert cm.scope[0] == "ort" and cm.scope[3].startswith("onnxruntime=")
            assert cm.backend.counters.measurements == 2
            status = {k.sig.ops: cm.details[k.sig].status for k in cm.kernels(g)}
    assert all(math.isfinite(c) and c > 0 for c in costs.values())
    assert costs["conv2d f32[1,16,28,28]->[1,64,28,28]"] > costs["conv2d f32[1,16,28,28]->[1,16,28,28]"]
    assert status[("matmul",)] == "analytic"
    assert any("no ONNX form" in r.getMessage() for r in caplog.records)
    with CostModel(cfg) as warm:
        assert warm.graph_cost(g) == pytest.approx(sum(costs.values()))
        assert warm.backend.counters.measurements == 0


def _kernel_graph(sig, arrays: dict) -> TensorGraph:
    """The kernel as a graph of its own, weights as weight nodes: what export_onnx would get of it."""
    S = NodeStore()
    ins = [S.weight(arrays[k]) if w else S.input(f"p{k}", TensorType(tuple(s), d))
           for k, (s, d, w) in enumerate(sig.inputs)]
    nodes = []
    for op, attrs, refs in sig.nodes:
        nodes.append(S.make(op, [ins[-1 - i] if i < 0 else nodes[i].outputs[j] for i, j in refs], dict(attrs)))
    return TensorGraph(S, [nodes[i].outputs[j] for i, j in sig.outputs])


def _nodes(model) -> list:
    return [(n.op_type, n.domain, sorted((a.name, str(onnx.helper.get_attribute_value(a))) for a in n.attribute))
            for n in model.graph.node]


@pytest.mark.parametrize("name,graph", list(_cases()), ids=[n for n, _ in _cases()])
def test_kernel_onnx_is_what_export_onnx_writes(name, graph):
    rng = np.random.default_rng(2)
    for k in Partitioner().kernels(graph):
        sig = k.sig
        weights = {i: rng.standard_normal(s).astype(d) for i, (s, d, w) in enumerate(sig.inputs) if w}
        ours = kernel_onnx(sig, weights=weights)
        written = export_onnx(_kernel_graph(sig, weights))
        assert _nodes(ours) == _nodes(written), f"{name}: {sig.label()}"
        assert ours.opset_import == written.opset_import
        assert sorted(onnx.numpy_helper.to_array(t).tobytes() for t in ours.graph.initializer) == \
            sorted(onnx.numpy_helper.to_array(t).tobytes() for t in written.graph.initializer)


def test_a_kernel_the_exporter_cannot_write_is_unsupported():
    S = NodeStore()
    q = S.input("q", TensorType((4, 8), "int8"))
    g = TensorGraph(S, S.add("matmul", [q, S.weight(np.ones((8, 4), np.int8))]))
    (k,) = Partitioner().kernels(g)
    with pytest.raises(UnsupportedOp, match="MatMul"):
        kernel_onnx(k.sig)


def test_a_whole_graph_as_export_onnx_writes_it_matches_the_registry():
    """The benchmark times whole graphs in ONNX Runtime as export_onnx writes them."""
    S = NodeStore()
    x = S.input("x", TensorType((1, 4, 9, 9)))
    rng = np.random.default_rng(3)
    w = S.weight(rng.standard_normal((8, 4, 1, 1)).astype(np.float32))
    w3 = S.add("enlarge", [w], kernel=(3, 3))[0]  # weight-only: folded into an initializer
    y = S.add("conv2d", [x, w3], padding=1, activation="relu")[0]
    a, b = S.add("split", [y], axis=1, sizes=(3, 5))
    g = TensorGraph(S, [S.add("concat", [b, a], axis=1)[0], a])
    feeds = {"x": rng.standard_normal((1, 4, 9, 9)).astype(np.float32)}
    for got, want in zip(_session(export_onnx(g)).run(None, feeds), g.evaluate(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_whole_graph_holding_an_opaque_node_is_measured_without_it(tmp_path):
    """`settle` measures a region whole; an opaque node (a Relax expression no runtime can be handed alone, the same
    in every candidate) stays out of the unit, its input among the unit's outputs and its output among its inputs,
    so the unit is measured by ONNX Runtime rather than estimated by the analytic model (which would give every
    candidate within the noise the same number)."""
    from tvm import relax

    S = NodeStore()
    x = S.input("x", TensorType((64, 64)))
    a = S.add("matmul", [x, S.weight(np.ones((64, 64), np.float32))])[0]
    v = relax.Var("a", relax.TensorType([64, 64], "float32"))
    op = S.opaque(relax.op.cumsum(v, axis=0), [a], [TensorType((64, 64))], key="cumsum")
    b = S.add("relu", [S.add("matmul", [op.outputs[0], S.weight(np.ones((64, 64), np.float32))])[0]])[0]
    g = TensorGraph(S, [S.add("add", [b, a])[0]])
    cfg = load_cost_config(backend="ort", threads=1, cache=str(tmp_path / "c.sqlite"), repeat=3, progress=False)
    with CostModel(cfg) as cm:
        sig = cm._whole_sig(g)
        assert "opaque" not in sig.ops and sig.ops.count("matmul") == 2
        cm.whole_cost(g)
        assert cm.details[sig].status == "ok", cm.details[sig]  # measured (the analytic model: "analytic")


def test_a_whole_graph_with_too_many_weights_keeps_its_opaque_node(tmp_path, monkeypatch):
    """Beyond WHOLE_WEIGHT_BYTES of weights the unit keeps its opaque node (the analytic estimate): every candidate
    measured whole is a session holding all of them."""
    from tvm import relax

    import taso_tvm.cost.model as model

    monkeypatch.setattr(model, "WHOLE_WEIGHT_BYTES", 64 * 64 * 4)  # one of the two weights
    S = NodeStore()
    x = S.input("x", TensorType((64, 64)))
    a = S.add("matmul", [x, S.weight(np.ones((64, 64), np.float32))])[0]
    v = relax.Var("a", relax.TensorType([64, 64], "float32"))
    op = S.opaque(relax.op.cumsum(v, axis=0), [a], [TensorType((64, 64))], key="cumsum")
    g = TensorGraph(S, [S.add("matmul", [op.outputs[0], S.weight(np.full((64, 64), 2.0, np.float32))])[0]])
    cfg = load_cost_config(backend="ort", threads=1, cache=str(tmp_path / "c.sqlite"), repeat=3, progress=False)
    with CostModel(cfg) as cm:
        assert "opaque" in cm._whole_sig(g).ops
