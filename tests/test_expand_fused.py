"""Models already optimized by ONNX Runtime (com.microsoft nodes) go through the search: each fused node of a registry
operator is expanded into its decomposition (onnx_opt/expand_fused.py), exactly (equal in ONNX Runtime), and the
search re-forms fused operators from it."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.onnx_opt.expand_fused import expand_fused

RNG = np.random.default_rng(5)
H, HEADS, S = 16, 2, 6


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _encoder_block(opset: int = 17, mask: bool = False) -> onnx.ModelProto:
    """One BERT layer as ONNX Runtime's transformer optimizer writes it: Attention, SkipLayerNormalization, MatMul,
    BiasGelu, MatMul, SkipLayerNormalization (with bias), FastGelu, QuickGelu and FusedMatMul on the side."""
    ms = "com.microsoft"
    nodes = [
        helper.make_node("Attention", ["x", "wqkv", "bqkv"] + (["mask"] if mask else []), ["a"], domain=ms,
                         num_heads=HEADS),
        helper.make_node("SkipLayerNormalization", ["a", "x", "g1", "b1"], ["n1"], domain=ms, epsilon=1e-12),
        helper.make_node("MatMul", ["n1", "w1"], ["h1"]),
        helper.make_node("BiasGelu", ["h1", "bi"], ["h2"], domain=ms),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("SkipLayerNormalization", ["h3", "n1", "g2", "b2", "bo"], ["n2", "", "", "sum"], domain=ms,
                         epsilon=1e-12),
        helper.make_node("FastGelu", ["n2", "bo"], ["f"], domain=ms),
        helper.make_node("QuickGelu", ["f"], ["q"], domain=ms, alpha=1.702),
        helper.make_node("FusedMatMul", ["q", "sum"], ["y"], domain=ms, transB=1, alpha=0.5),
    ]
    inits = [_w("wqkv", H, 3 * H), _w("bqkv", 3 * H), _w("g1", H), _w("b1", H), _w("w1", H, 2 * H), _w("bi", 2 * H),
             _w("w2", 2 * H, H), _w("g2", H), _w("b2", H), _w("bo", H)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H])]
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, [1, S]))
    graph = helper.make_graph(nodes, "block", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, S])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ms, 1)])


def _feeds(mask: bool) -> dict:
    feeds = {"x": RNG.standard_normal((1, S, H)).astype(np.float32)}
    if mask:
        feeds["mask"] = np.array([[1, 1, 1, 1, 0, 0]], np.int32)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("opset,mask", [(17, False), (17, True), (14, True)])
def test_expansion_equals_the_fused_nodes_in_ort(opset, mask):
    model = _encoder_block(opset, mask)
    expanded, n = expand_fused(model)
    assert n == 7 and not any(x.domain for x in expanded.graph.node)
    onnx.checker.check_model(expanded)
    feeds = _feeds(mask)
    np.testing.assert_allclose(_run(expanded, feeds), _run(model, feeds), rtol=1e-4, atol=1e-4)


def test_a_model_optimized_by_ort_is_searched_and_fused_again():
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.runtime.check import check_onnx

    model = _encoder_block(17, mask=True)
    out, report = optimize_onnx(model, time_check=False)
    assert report.expanded == 7
    assert sum(report.rules_applied.values()) > 0, report.decision
    fused = {n.op_type for n in out.graph.node if n.domain == "com.microsoft"}
    assert {"Attention", "SkipLayerNormalization"} <= fused, (fused, report.decision)
    check_onnx(model, out, [_feeds(True)])
