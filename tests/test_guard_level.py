"""The never-slower guard where no candidate is measurably faster than the original: a candidate level with it that
runs more layers as ONNX Runtime's fused operators is written (fusion's gain at a wide prefill is inside the noise
of its large products); one that is more fused but slower never is. Real ONNX Runtime sessions, real timing."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.onnx_opt.driver import OnnxReport, _guard
from taso_tvm.onnx_opt.fused_census import fused_census
from taso_tvm.runtime.check import run_onnx

RNG = np.random.default_rng(0)
W = RNG.standard_normal((1024, 1024)).astype(np.float32) / 32
R = RNG.standard_normal((1024, 1024)).astype(np.float32) / 32


def _model(fused_gelu: bool, split_product: bool) -> onnx.ModelProto:
    """y = x @ W (10 ms of work), g = GELU(s) on 8 values: in erf pieces or as com.microsoft's Gelu; with
    `split_product` the product is x @ (W - R) + x @ R (twice the work, the same values within rounding)."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("half", 0.5), ("one", 1.0), ("rsqrt2", 1 / math.sqrt(2)))]
    if split_product:
        inits += [numpy_helper.from_array(W - R, "w1"), numpy_helper.from_array(R, "w2")]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["x", "w2"], ["b"]),
                 helper.make_node("Add", ["a", "b"], ["y"])]
    else:
        inits.append(numpy_helper.from_array(W, "w"))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    if fused_gelu:
        nodes.append(helper.make_node("Gelu", ["s"], ["g"], domain="com.microsoft"))
    else:
        nodes += [helper.make_node("Mul", ["s", "rsqrt2"], ["t"]), helper.make_node("Erf", ["t"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["s", "e1"], ["se"]),
                  helper.make_node("Mul", ["se", "half"], ["g"])]
    g = helper.make_graph(nodes, "product_and_gelu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 1024]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 1024]),
                           helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_a_candidate_level_with_the_original_and_more_fused_is_written():
    original, fused, slower = _model(False, False), _model(True, False), _model(True, True)
    feeds = {"x": RNG.standard_normal((512, 1024)).astype(np.float32),
             "s": RNG.standard_normal((1, 8)).astype(np.float32)}
    for m in (fused, slower):  # the same function
        want, got = run_onnx(original, feeds), run_onnx(m, feeds)
        for k in ("y", "g"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4)
    assert fused_census(original)["GELU"] == (0, 1) and fused_census(fused)["GELU"] == (1, 1)

    report = OnnxReport()
    out = _guard(report, original, None, [("fused", fused), ("slower", slower)], feeds, 1, 4.0)
    t = report.timing
    names = [lat.name for lat in t.latencies]
    assert out is fused, (report.decision, str(t))
    if t.ratios[names.index("fused") - 1].verdict != "faster":  # the case this guard rule is for
        assert report.decision.startswith("fused: level with the original"), report.decision
        assert "1 more layer(s) fused" in report.decision
    # more fused but twice the product's work: measured slower, never written
    report = OnnxReport()
    assert _guard(report, original, None, [("slower", slower)], feeds, 1, 4.0) is None
    assert report.decision.startswith("original: the slower model is not faster"), report.decision
