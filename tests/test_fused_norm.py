"""Fused layer norms with extra outputs (graph/ops/fused_norm.py): a pre-norm block's residual sum becomes
SkipLayerNormalization's sum output, equal in ONNX Runtime to the decomposition."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.graph.ops.decompose import lowering
from taso_tvm.onnx_io.export import export_relax
from taso_tvm.relay_pass.lower import lower_to_module
from taso_tvm.rules import apply_match, find_matches, load_rules

F32 = "float32"
RNG = np.random.default_rng(11)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _export(graph: TensorGraph, inputs: list) -> onnx.ModelProto:
    with lowering("composite"):
        return export_relax(lower_to_module(graph, params=inputs))


def _fused(model: onnx.ModelProto) -> list:
    return [n for n in model.graph.node if n.domain == "com.microsoft"]


def _pre_norm_block(bias: bool) -> TensorGraph:
    """s = x (+ b) + k; y = layernorm(s) w + s: the sum is read by the norm and by the residual add after it."""
    st = NodeStore()
    x = st.input("x", TensorType((2, 3, 8), F32))
    k = st.input("k", TensorType((2, 3, 8), F32))
    if bias:
        (x,) = st.add("add", [x, st.weight(_rand(8))])
    (s,) = st.add("add", [x, k])
    (n,) = st.add("layernorm", [s, st.weight(_rand(8)), st.weight(_rand(8))], axes=(-1,), epsilon=1e-5)
    (h,) = st.add("matmul", [n, st.weight(_rand(8, 8))])
    (y,) = st.add("add", [h, s])
    return TensorGraph(st, [y])


def test_pre_norm_residual_sum_is_skip_layernorm_output_3():
    feeds = {"x": _rand(2, 3, 8), "k": _rand(2, 3, 8)}
    for bias, rule_name in ((False, "fuse_skip_layernorm_sum"), (True, "fuse_skip_layernorm_sum_bias")):
        g = _pre_norm_block(bias)
        rule = load_rules()[rule_name]
        assert not find_matches(load_rules()["fuse_skip_layernorm"], g)  # the sum is read later: blocked
        m = find_matches(rule, g)[0]  # x + k and k + x
        fused = apply_match(rule, g, m)
        assert fused is not None
        model = _export(fused, ["x", "k"])
        (node,) = _fused(model)
        assert node.op_type == "SkipLayerNormalization" and len(node.input) == 4 + bias
        assert node.output[1] == node.output[2] == "" and node.output[3]
        np.testing.assert_allclose(_ort(model, feeds)[0], g.evaluate(feeds)[0], rtol=1e-4, atol=1e-5)


def _embeddings(segment: bool, ids_dtype: str = "int64") -> tuple[TensorGraph, dict]:
    """word[ids] + position[arange] (+ segment[segment_ids]), layer-normalized: BERT's embeddings, as lifted."""
    st = NodeStore()
    b, s, h = 2, 5, 8
    ids = st.input("ids", TensorType((b, s), ids_dtype))
    (e,) = st.add("take", [st.weight(_rand(11, h)), ids])
    pos = st.weight(np.arange(s, dtype=ids_dtype)[None])
    (p,) = st.add("take", [st.weight(_rand(7, h)), pos])
    if segment:
        seg = st.input("seg", TensorType((b, s), ids_dtype))
        (t,) = st.add("take", [st.weight(_rand(2, h)), seg])
        (e,) = st.add("add", [e, t])  # segment before position (HF's BertEmbeddings)
    (e,) = st.add("add", [e, p])
    (y,) = st.add("layernorm", [e, st.weight(_rand(h)), st.weight(_rand(h))], axes=(-1,), epsilon=1e-12)
    feeds = {"ids": RNG.integers(0, 11, (b, s)).astype(ids_dtype)}
    if segment:
        feeds["seg"] = RNG.integers(0, 2, (b, s)).astype(ids_dtype)
    return TensorGraph(st, [y]), feeds


def test_embeddings_become_embed_layernormalization_equal_in_ort():
    rules = load_rules()
    for segment, ids_dtype in ((True, "int64"), (False, "int64"), (True, "int32")):
        g, feeds = _embeddings(segment, ids_dtype)
        rule = rules["fuse_embed_layernorm_segment_first" if segment else "fuse_embed_layernorm"]
        m = find_matches(rule, g)[0]
        fused = apply_match(rule, g, m)
        assert fused is not None and "embed_layernorm" in {n.op for n in fused.topo_order()}
        model = _export(fused, list(feeds))
        (node,) = _fused(model)
        assert node.op_type == "EmbedLayerNormalization"
        casts = [n for n in model.graph.node if n.op_type == "Cast"]
        assert len(casts) == (0 if ids_dtype == "int32" else 2 + segment)  # ids, positions (, segments) to int32
        np.testing.assert_allclose(_ort(model, feeds)[0], g.evaluate(feeds)[0], rtol=1e-4, atol=1e-4)
