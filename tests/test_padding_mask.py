"""Attention biases that are a padding mask handed to ONNX Runtime's attention as the 2-D mask
(onnx_opt/padding_mask.py): transformers 5's eager form (the mask's nonzero bits expanded over the queries by
shape arithmetic, then Where(bits, 0, finfo.min)) becomes the mask itself and its chain goes; a bias that is not
a padding mask for every integer mask, or that reads another input's values, stays. Equal in ONNX Runtime at
bindings and masks the pass never saw."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.onnx_opt.padding_mask import fuse_padding_masks

RNG = np.random.default_rng(5)
H, HEADS = 8, 2
MS = "com.microsoft"
MIN = float(np.finfo(np.float32).min)


def _model(form: str, op: str = "Attention") -> onnx.ModelProto:
    """x [B, S, H] -> Attention (or MultiHeadAttention on x) with an additive bias computed from `attention_mask`:
    `where` (transformers 5: the nonzero bits expanded to [B, 1, S, S] with the length read from x's shape),
    `legacy` ((1 - mask) * c: a padding mask for 0/1 only), `reads_x` (the bias also reads x's values)."""
    n: list = []

    def node(op_type: str, *inputs: str, **attrs) -> str:
        out = f"t{len(n)}"
        n.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    bits = node("Unsqueeze", node("Cast", "attention_mask", to=TensorProto.BOOL), "axes12")
    if form == "legacy":
        f = node("Cast", node("Unsqueeze", "attention_mask", "axes12"), to=TensorProto.FLOAT)
        bias = node("Mul", node("Sub", "one", f), "fill")
    else:
        shape = node("Shape", "x")
        seq = node("Gather", shape, "one_i", axis=0)
        full = node("Concat", node("Slice", shape, "zero1", "one1"), "ones2", node("Unsqueeze", seq, "axis0"),
                    node("Slice", shape, "one1", "two1"), axis=0)
        keep = node("Expand", bits, full)
        if form == "reads_x":
            keep = node("And", keep, node("Unsqueeze", node("Greater", node("ReduceMax", "x", "axes2", keepdims=0),
                                                                  "zero_f"), "axes12"))
        bias = node("Where", keep, "zero_f", "fill")
    if op == "Attention":
        n.append(helper.make_node("Attention", ["x", "w", "b", "", "", bias], ["y"], domain=MS, num_heads=HEADS))
    else:
        n.append(helper.make_node("MultiHeadAttention", ["x", "x", "x", "", "", bias], ["y"], domain=MS,
                                  num_heads=HEADS))
    c = lambda name, v, t=np.int64: numpy_helper.from_array(np.asarray(v, t), name)  # noqa: E731
    inits = [c("axes12", [1, 2]), c("axes2", [2]), c("one_i", 1), c("axis0", [0]), c("zero1", [0]), c("one1", [1]),
             c("two1", [2]), c("ones2", [1]), c("one", 1.0, np.float32), c("zero_f", 0.0, np.float32),
             c("fill", MIN, np.float32), c("w", RNG.standard_normal((H, 3 * H)) * 0.3, np.float32),
             c("b", RNG.standard_normal(3 * H) * 0.1, np.float32)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", H]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])]
    g = helper.make_graph(n, "masked", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", H])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _feeds(b: int, s: int) -> dict:
    mask = (RNG.random((b, s)) < 0.7).astype(np.int64)
    mask[0] = 0  # a fully masked row
    return {"x": RNG.standard_normal((b, s, H)).astype(np.float32), "attention_mask": mask}


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("op", ["Attention", "MultiHeadAttention"])
def test_a_padding_mask_bias_becomes_the_mask(op):
    model = _model("where", op)
    out, n = fuse_padding_masks(model, [_feeds(1, 6), _feeds(3, 12)])
    assert n == 1
    att = next(x for x in out.graph.node if x.op_type == op)
    assert len(att.input) == (4 if op == "Attention" else 5) and att.input[-1].startswith("taso_mask/")
    assert {x.op_type for x in out.graph.node} == {"Cast", op}  # the chain is gone
    onnx.checker.check_model(out)
    for b, s in ((2, 5), (4, 9)):  # bindings and masks the pass never saw
        feeds = _feeds(b, s)
        feeds["attention_mask"][1, :2] = [2, -1]  # nonzero is kept, as in the original's Cast to bool
        np.testing.assert_array_equal(_run(out, feeds), _run(model, feeds))


@pytest.mark.parametrize("form", ["legacy", "reads_x"])
def test_a_bias_that_is_not_a_padding_mask_stays(form):
    model = _model(form)
    out, n = fuse_padding_masks(model, [_feeds(1, 6), _feeds(3, 12)])
    assert n == 0 and out is model


def test_optimize_hands_the_mask_to_the_fused_attention():
    """A tiny BERT with transformers 5's mask form, through `optimize`: its attention reads the 2-D mask, the
    bias chain is gone, and the result equals the original at another binding."""
    from test_embed_ort import tiny_bert

    from taso_tvm.onnx_opt import optimize_onnx

    model = tiny_bert("where")
    sample = {"input_ids": RNG.integers(0, 40, (2, 8)), "token_type_ids": RNG.integers(0, 2, (2, 8)),
              "attention_mask": np.ones((2, 8), np.int64)}
    out, report = optimize_onnx(model, time_check=False, inputs=sample)
    ops = [x.op_type for x in out.graph.node]
    att = [x for x in out.graph.node if x.op_type in ("Attention", "MultiHeadAttention")]
    assert att and all(any(i.startswith("taso_mask/") for i in x.input) for x in att), (ops, report.decision)
    assert "Where" not in ops and "Expand" not in ops
    for b, s in ((3, 7), (1, 11)):
        feeds = {"input_ids": RNG.integers(0, 40, (b, s)), "token_type_ids": RNG.integers(0, 2, (b, s)),
                 "attention_mask": (RNG.random((b, s)) < 0.7).astype(np.int64)}
        np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-3, atol=1e-4)
