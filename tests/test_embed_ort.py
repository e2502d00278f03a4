"""EmbedLayerNormalization in models ONNX Runtime optimized: expanded into Gathers, Adds and LayerNormalization
(onnx_opt/expand_fused.py), equal in ONNX Runtime, and searched again; on the output of ONNX Runtime's transformer
optimizer for a tiny BERT written as HuggingFace's TorchScript export writes it."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.onnx_opt.expand_fused import expand_fused

RNG = np.random.default_rng(11)
B, S, H, HEADS, VOCAB, MAX_POS = 2, 8, 16, 2, 40, 32
MS = "com.microsoft"


def _w(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]


def _embed_node_model(segment: bool, position_ids: bool, mask: bool) -> onnx.ModelProto:
    """One EmbedLayerNormalization as ONNX Runtime's optimizer writes it (int32 ids, a dummy mask_index output)."""
    ins = ["ids", "seg_ids" if segment else "", "word", "pos", "seg" if segment else "", "gamma", "beta"]
    ins += ["mask" if mask else ""] + (["pos_ids"] if position_ids else [])
    node = helper.make_node("EmbedLayerNormalization", ins, ["y", "dummy_mask_index"], domain=MS, epsilon=1e-12)
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT32, [B, S])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT32, [B, S]) for n in ["seg_ids"] * segment
               + ["mask"] * mask]
    if position_ids:
        inputs.append(helper.make_tensor_value_info("pos_ids", TensorProto.INT32, [1, S]))
    inits = [_w("word", VOCAB, H), _w("pos", MAX_POS, H), _w("seg", 2, H), _w("gamma", H), _w("beta", H)]
    g = helper.make_graph([node], "embed", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])],
                          [t for t in inits if t.name in ins])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _feeds(dtype=np.int32) -> dict:
    return {"ids": RNG.integers(0, VOCAB, (B, S)).astype(dtype), "seg_ids": RNG.integers(0, 2, (B, S)).astype(dtype),
            "pos_ids": RNG.permutation(S)[None].astype(dtype), "mask": np.ones((B, S), dtype)}


@pytest.mark.parametrize("segment,position_ids,mask", [(True, False, False), (False, True, False), (True, True, True)])
def test_embed_layernorm_expansion_equals_the_fused_node_in_ort(segment, position_ids, mask):
    model = _embed_node_model(segment, position_ids, mask)
    expanded, n = expand_fused(model)
    assert n == 1 and not any(x.domain for x in expanded.graph.node)
    assert [x.op_type for x in expanded.graph.node].count("Gather") == 1 + segment + position_ids
    onnx.checker.check_model(expanded)
    feeds = _feeds()
    np.testing.assert_allclose(_run(expanded, feeds), _run(model, feeds), rtol=1e-5, atol=1e-5)


def test_mask_index_is_each_rows_count_of_ones_in_ort():
    for mask in (False, True):  # the mask-less one first: the checks below read the last
        model = _embed_node_model(True, False, mask)
        model.graph.output.append(helper.make_tensor_value_info("dummy_mask_index", TensorProto.INT32, [B]))
        expanded, n = expand_fused(model)
        assert n == mask  # without a mask the node writes zeros: kept as it is
    feeds = _feeds()
    feeds["mask"][0, 5:] = 0
    sess = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, expanded)]
    want, got = (s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()}) for s in sess)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def tiny_bert(mask_form: str = "legacy") -> onnx.ModelProto:
    """HuggingFace BERT's embeddings (positions sliced from a buffer by the ids' length) and one encoder layer with
    a padding mask, as the TorchScript exporter writes them: the form ONNX Runtime's optimizer fuses. `mask_form`:
    `legacy` (transformers 4: (1 - mask) * c on [B, 1, 1, S]) or `where` (transformers 5's eager form: the mask's
    nonzero bits expanded to [B, 1, S, S] by the ids' run-time length, then Where(bits, 0, finfo.min))."""
    d = H // HEADS
    n: list = []

    def op(op_type: str, *inputs: str, **attrs) -> str:
        out = f"t{len(n)}"
        n.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    length = op("Unsqueeze", op("Gather", op("Shape", "input_ids"), "one"), "zero_axis")
    pos_ids = op("Slice", "position_ids_buffer", "zero1", length, "one1", "one1")
    emb = op("Add", op("Add", op("Gather", "word", "input_ids"), op("Gather", "seg", "token_type_ids")),
             op("Gather", "pos", pos_ids))
    x = op("LayerNormalization", emb, "g0", "b0", axis=-1, epsilon=1e-12)

    def heads(t: str, perm: list) -> str:
        return op("Transpose", op("Reshape", t, "split_shape"), perm=perm)

    q, k, v = (heads(op("Add", op("MatMul", x, f"w{c}"), f"b{c}"), [0, 2, 1, 3]) for c in "qkv")
    if mask_form == "legacy":
        mask = op("Mul", op("Sub", "one_f", op("Cast", op("Unsqueeze", op("Unsqueeze", "attention_mask", "one_axis"),
                                                          "two_axis"), to=TensorProto.FLOAT)), "filler")
    else:
        bits = op("Unsqueeze", op("Unsqueeze", op("Cast", "attention_mask", to=TensorProto.BOOL), "one_axis"),
                  "two_axis")
        ids_shape = op("Shape", "input_ids")
        full = op("Concat", op("Slice", ids_shape, "zero1", "one1"), "one1", op("Slice", ids_shape, "one1", "two1"),
                  op("Slice", ids_shape, "one1", "two1"), axis=0)
        mask = op("Where", op("Expand", bits, full), "zero_f", "min_f")
    scores = op("Add", op("Div", op("MatMul", q, op("Transpose", k, perm=[0, 1, 3, 2])), "sqrt_d"), mask)
    ctx = op("MatMul", op("Softmax", scores, axis=-1), v)
    ctx = op("Reshape", op("Transpose", ctx, perm=[0, 2, 1, 3]), "merge_shape")
    y = op("LayerNormalization", op("Add", op("Add", op("MatMul", ctx, "wo"), "bo"), x), "g1", "b1", axis=-1,
           epsilon=1e-12)
    f = op("MatMul", y, "w1")
    f = op("Add", f, "bf1")
    gelu = op("Mul", op("Mul", f, op("Add", op("Erf", op("Div", f, "sqrt2")), "one_f")), "half")
    n.append(helper.make_node("LayerNormalization", [op("Add", op("Add", op("MatMul", gelu, "w2"), "bf2"), y),
                                                      "g2", "b2"], ["last_hidden_state"], axis=-1, epsilon=1e-12))
    scalar = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    inits = [_w("word", VOCAB, H), _w("seg", 2, H), _w("pos", MAX_POS, H), _i64("one", 1), _i64("zero_axis", [0]),
             _i64("position_ids_buffer", np.arange(MAX_POS)[None]), _i64("zero1", [0]), _i64("one1", [1]),
             _i64("one_axis", [1]), _i64("two_axis", [2]), _i64("split_shape", [0, 0, HEADS, d]),
             _i64("merge_shape", [0, 0, H]), scalar("one_f", 1.0), scalar("filler", -10000.0),
             scalar("zero_f", 0.0), scalar("min_f", np.finfo(np.float32).min), _i64("two1", [2]),
             scalar("sqrt_d", np.sqrt(d)), scalar("sqrt2", np.sqrt(2.0)), scalar("half", 0.5),
             _w("wo", H, H), _w("bo", H), _w("w1", H, 2 * H), _w("bf1", 2 * H), _w("w2", 2 * H, H), _w("bf2", H)]
    inits += [_w(f"w{c}", H, H) for c in "qkv"] + [_w(f"b{c}", H) for c in "qkv"]
    inits += [t for i in range(3) for t in (_w(f"g{i}", H, scale=1.0), _w(f"b{i}", H))]
    inputs = [helper.make_tensor_value_info(x, TensorProto.INT64, ["batch", "sequence"])
              for x in ("input_ids", "token_type_ids", "attention_mask")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H])
    return helper.make_model(helper.make_graph(n, "tiny_bert", inputs, [out], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_ort_optimized_tiny_bert_is_searched_again(tmp_path):
    from onnxruntime.transformers.optimizer import optimize_model

    from taso_tvm.onnx_opt import optimize_onnx

    path = tmp_path / "bert.onnx"
    onnx.save(tiny_bert(), str(path))
    optimized = optimize_model(str(path), model_type="bert", num_heads=HEADS, hidden_size=H, opt_level=0).model
    fused = [x.op_type for x in optimized.graph.node if x.domain == MS]
    assert "EmbedLayerNormalization" in fused, fused
    mask = np.ones((B, S), np.int64)
    mask[1, 5:] = 0
    feeds = {"input_ids": RNG.integers(0, VOCAB, (B, S)), "token_type_ids": RNG.integers(0, 2, (B, S)),
             "attention_mask": mask}
    out, report = optimize_onnx(optimized, time_check=False, inputs=feeds)
    assert report.expanded >= 1 and sum(report.rules_applied.values()) >= 1, report.decision
    np.testing.assert_allclose(_run(out, feeds), _run(optimized, feeds), rtol=1e-3, atol=1e-4)


def test_attention_with_end_positions_expands_equal_in_ort():
    """Attention reading a [batch] mask_index (ONNX Runtime's default mask format for BERT: keys at or after each
    row's end are masked)."""
    from test_expand_fused import _encoder_block, _run as run_block

    model = _encoder_block(17, mask=True)
    vi = next(i for i in model.graph.input if i.name == "mask")
    del vi.type.tensor_type.shape.dim[1]  # [1]: one end position per row
    expanded, n = expand_fused(model)
    assert n == 7 and not any(x.domain for x in expanded.graph.node)
    x = RNG.standard_normal((1, 6, 16)).astype(np.float32)
    for end in (6, 4, 1):
        feeds = {"x": x, "mask": np.array([end], np.int32)}
        np.testing.assert_allclose(run_block(expanded, feeds), run_block(model, feeds), rtol=1e-4, atol=1e-4)
