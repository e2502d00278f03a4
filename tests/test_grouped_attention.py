"""Grouped-query attention (issue 35): the registry's gqa equals attention with every kv head repeated for its group
of query heads (numpy.repeat, as transformers' repeat_kv), and is written as ONNX 23's Attention that ONNX Runtime
runs to the same numbers, the NaN guard kept; below opset 23 it is the decomposition; a model's opset is raised only
where none of its operators changed meaning. Its 3-D forms (gqa_heads, and gqa_heads_cache with the KV cache's past
and present) and the rotary of a 3-D projection (rotary_heads) run in ONNX Runtime to their decomposition's numbers,
in ONNX Runtime's and in the standard forms."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from taso_tvm.graph import GraphError, NodeStore, TensorGraph, TensorType
from taso_tvm.graph.ops.decompose import lowering
from taso_tvm.onnx_io.export import export_relax
from taso_tvm.onnx_opt.onnx_graph import can_raise_opset
from taso_tvm.relay_pass.lower import lower_to_module
from util import tvm_run

RNG = np.random.default_rng(11)
F32 = "float32"


def _gqa_graph(shapes: dict, scale: float, mask: np.ndarray, fill: bool = False) -> tuple[TensorGraph, dict]:
    st = NodeStore()
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    refs = [st.input(k, TensorType(s, F32)) for k, s in shapes.items()]
    refs += [st.weight(np.asarray(scale, np.float32)), st.weight(mask)]
    if fill:
        refs.append(st.weight(np.asarray(0.0, np.float32)))
    (out,) = st.add("gqa", refs)
    return TensorGraph(st, [out]), feeds


def _reference(q, k, v, scale, mask):
    group = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ kr.transpose(0, 1, 3, 2) * scale + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.where(np.isnan(p), 0, p) @ vr


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _export(graph: TensorGraph, feeds: dict, **kw) -> onnx.ModelProto:
    with lowering("composite"):
        mod = lower_to_module(graph, params=list(feeds))
    return export_relax(mod, **kw)


PAD = np.zeros((2, 1, 1, 7), np.float32)
PAD[0, ..., :3] = np.finfo(np.float32).min  # row 0 left-padded (a decode step's mask)
CAUSAL = np.triu(np.full((5, 5), -np.inf, np.float32), 1)[None, None]  # a prefill's mask
LOWEST = np.float32(np.finfo(np.float32).min)
PADDED = np.broadcast_to(np.triu(np.full((5, 5), LOWEST), 1), (2, 1, 5, 5)).copy()  # torch's causal mask (finfo.min)
PADDED[0, ..., :2] = LOWEST  # row 0 left-padded: its first two queries see no key (softmax of equal scores: the mean)


@pytest.mark.parametrize("shapes,mask,fill", [
    ({"q": (2, 6, 1, 8), "k": (2, 2, 7, 8), "v": (2, 2, 7, 4)}, PAD, True),  # decode step, 3 query heads per kv head
    ({"q": (1, 4, 5, 8), "k": (1, 1, 5, 8), "v": (1, 1, 5, 8)}, CAUSAL, False),  # prefill, one kv head (MQA)
    ({"q": (2, 4, 5, 8), "k": (2, 2, 5, 8), "v": (2, 2, 5, 8)}, PADDED, True),  # a left-padded prefill batch
])
def test_gqa_is_repeat_kv_attention_and_onnx_attention_runs_it(shapes, mask, fill):
    graph, feeds = _gqa_graph(shapes, 0.3, mask, fill)
    want = _reference(feeds["q"], feeds["k"], feeds["v"], 0.3, mask)
    np.testing.assert_allclose(graph.evaluate(feeds)[0], want, rtol=1e-5, atol=1e-6)
    model = _export(graph, feeds)  # the opset the nodes need: 23 for Attention
    assert [n.op_type for n in model.graph.node if n.op_type in ("Attention", "Softmax")] == ["Attention"]
    np.testing.assert_allclose(_run(model, feeds), want, rtol=1e-4, atol=1e-5)
    below = _export(graph, feeds, opset=20)  # a model at 20 that may not be raised: the decomposition
    kinds = {n.op_type for n in below.graph.node}
    assert "Attention" not in kinds and "Softmax" in kinds
    np.testing.assert_allclose(_run(below, feeds), want, rtol=1e-4, atol=1e-5)


def test_gqa_checks_its_heads():
    with pytest.raises(GraphError, match="not a multiple"):
        _gqa_graph({"q": (1, 3, 1, 8), "k": (1, 2, 4, 8), "v": (1, 2, 4, 8)}, 0.5,
                   np.zeros((1, 1, 1, 4), np.float32))


def _model(op: str, opset: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    inputs = ["x", "s", "b"] if op == "GroupNormalization" else ["x"]
    node = helper.make_node(op, inputs, ["y"], **({"num_groups": 2} if op == "GroupNormalization" else {}))
    g = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_an_opset_is_raised_only_where_no_operator_changed_meaning():
    assert can_raise_opset(_model("Relu", 20), 23) and can_raise_opset(_model("Relu", 23), 23)
    assert can_raise_opset(_model("Relu", 18), 23)  # torch's TorchScript exporter's opset (optimum's exports)
    assert not can_raise_opset(_model("GroupNormalization", 20), 23)  # 21: scale and bias per channel
    assert not can_raise_opset(_model("DFT", 18), 23) and not can_raise_opset(_model("GridSample", 19), 23)  # 20
    assert not can_raise_opset(_model("Relu", 17), 23)  # older opsets changed attributes into inputs


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    b, s, w = x.shape
    return x.reshape(b, s, n, w // n).transpose(0, 2, 1, 3)


def _graph(op: str, shapes: dict, weights: list, **attrs) -> tuple[TensorGraph, dict]:
    st = NodeStore()
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    refs = [st.input(k, TensorType(s, F32)) for k, s in shapes.items()] + [st.weight(w) for w in weights]
    outs = st.add(op, refs, **attrs)
    return TensorGraph(st, list(outs)), feeds


@pytest.mark.parametrize("past", [0, 6])
def test_gqa_heads_on_projections_appends_to_the_cache_as_onnx_attention_does(past):
    """A decode step (past 6: the cache grows by the new keys, a row left-padded) or a prefill (past 0: no cache)
    on [B, S, heads * D] projections, 6 query heads on 2 kv heads: ONNX 23's Attention with q_num_heads and
    kv_num_heads, past in and present out, equals the decomposition and numpy's repeat_kv attention."""
    b, s, d, t = 2, 3, 4, past + 3
    mask = np.zeros((b, 1, s, t), np.float32)
    mask[0, ..., :2] = LOWEST
    shapes = {"q": (b, s, 6 * d), "k": (b, s, 2 * d), "v": (b, s, 2 * d)}
    if past:
        shapes.update(pk=(b, 2, past, d), pv=(b, 2, past, d))
    op = "gqa_heads_cache" if past else "gqa_heads"
    graph, feeds = _graph(op, shapes, [np.asarray(0.4, np.float32), mask, np.asarray(0.0, np.float32)],
                          num_heads=6, kv_num_heads=2)
    k, v = _heads(feeds["k"], 2), _heads(feeds["v"], 2)
    if past:
        k, v = np.concatenate([feeds["pk"], k], 2), np.concatenate([feeds["pv"], v], 2)
    o = _reference(_heads(feeds["q"], 6), k, v, 0.4, mask)
    want = [o.transpose(0, 2, 1, 3).reshape(b, s, 6 * d)] + ([k, v] if past else [])
    for got, w in zip(graph.evaluate(feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    model = _export(graph, feeds)
    nodes = [n for n in model.graph.node if n.op_type in ("Attention", "Softmax", "Transpose", "Concat")]
    assert [n.op_type for n in nodes] == ["Attention"] and len(nodes[0].input) == (6 if past else 4)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    if past:  # TVM builds the decomposition (the default lowering): the same three outputs
        for got, w in zip(tvm_run(lower_to_module(graph, params=list(feeds)), feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("standard_ops", [False, True])
def test_rotary_heads_rotates_each_head_of_a_projection(standard_ops):
    """rotary_heads on [B, S, 3 heads * 8], one table for the batch: ONNX Runtime's RotaryEmbedding (3-D input,
    num_heads) or ONNX 23's (batch tables), equal to the rotary of the split heads."""
    half = RNG.standard_normal((1, 5, 4)).astype(np.float32), RNG.standard_normal((1, 5, 4)).astype(np.float32)
    graph, feeds = _graph("rotary_heads", {"x": (2, 5, 24)}, list(half), num_heads=3)
    x = feeds["x"].reshape(2, 5, 3, 8)
    c, sn = (np.concatenate([t, t], -1)[:, :, None] for t in half)
    want = (x * c + np.concatenate([-x[..., 4:], x[..., :4]], -1) * sn).reshape(2, 5, 24)
    np.testing.assert_allclose(graph.evaluate(feeds)[0], want, rtol=1e-5, atol=1e-6)
    model = _export(graph, feeds, standard_ops=standard_ops)
    (rot,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert rot.domain == ("" if standard_ops else "com.microsoft")
    np.testing.assert_allclose(_run(model, feeds), want, rtol=1e-4, atol=1e-5)


def _interleaved(x: np.ndarray, c: np.ndarray, sn: np.ndarray) -> np.ndarray:
    """The pairs (x[2i], x[2i + 1]) rotated by the angle of entry i of the half tables (GPT-J's, Cohere's)."""
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * sn
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * sn
    return out


@pytest.mark.parametrize("op", ["rotary", "rotary_heads"])
@pytest.mark.parametrize("standard_ops", [False, True])
def test_interleaved_rotary_rotates_pairs(op, standard_ops):
    """The interleaved rotary (Cohere's, GPT-J's rotate_every_two): its decomposition (strided slices, the tables
    repeated in place) equals the pairwise rotation, and ONNX Runtime's RotaryEmbedding (interleaved=1; ONNX 23's
    with standard_ops) and TVM's build of the decomposition run it to the same numbers."""
    if op == "rotary":
        half = [RNG.standard_normal((1, 1, 5, 4)).astype(np.float32) for _ in range(2)]
        graph, feeds = _graph(op, {"x": (2, 3, 5, 8)}, half, interleaved=1)
        want = _interleaved(feeds["x"], *half)
    else:
        half = [RNG.standard_normal((1, 5, 4)).astype(np.float32) for _ in range(2)]
        graph, feeds = _graph(op, {"x": (2, 5, 24)}, half, num_heads=3, interleaved=1)
        want = _interleaved(feeds["x"].reshape(2, 5, 3, 8), *(t[:, :, None] for t in half)).reshape(2, 5, 24)
    _rotary_equals(graph, feeds, want, standard_ops, interleaved=1)


def _rotary_equals(graph: TensorGraph, feeds: dict, want: np.ndarray, standard_ops: bool, **attr) -> None:
    """The graph's one rotary equals `want` evaluated, in ONNX Runtime as the RotaryEmbedding it is written as
    (with `attr`'s attribute), and (the decomposition) in TVM's build."""
    np.testing.assert_allclose(graph.evaluate(feeds)[0], want, rtol=1e-5, atol=1e-6)
    model = _export(graph, feeds, standard_ops=standard_ops)
    (rot,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    for k, v in attr.items():
        assert helper.get_node_attr_value(rot, k) == v, k
    np.testing.assert_allclose(_run(model, feeds), want, rtol=1e-4, atol=1e-5)
    if not standard_ops:
        (got,) = tvm_run(lower_to_module(graph, params=list(feeds)), feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("standard_ops", [False, True])
def test_partial_rotary_rotates_the_first_entries_of_each_head(interleaved, standard_ops):
    """rotary_heads with rotary_dim (GPT-J's partial rotary: 4 of each head's 8 entries): the first 4 rotated (pairs
    or halves), the last 4 kept; ONNX Runtime's RotaryEmbedding with rotary_embedding_dim (ONNX 23's with
    standard_ops) and TVM's build of the decomposition equal it."""
    half = [RNG.standard_normal((1, 5, 2)).astype(np.float32) for _ in range(2)]
    graph, feeds = _graph("rotary_heads", {"x": (2, 5, 24)}, half, num_heads=3, interleaved=interleaved,
                          rotary_dim=4)
    x = feeds["x"].reshape(2, 5, 3, 8)
    c, sn = (t[:, :, None] for t in half)
    r = x[..., :4]
    rotated = _interleaved(r, c, sn) if interleaved else \
        r * np.concatenate([c, c], -1) + np.concatenate([-r[..., 2:], r[..., :2]], -1) * np.concatenate([sn, sn], -1)
    want = np.concatenate([rotated, x[..., 4:]], -1).reshape(2, 5, 24)
    _rotary_equals(graph, feeds, want, standard_ops, rotary_embedding_dim=4)


@pytest.mark.parametrize("masked", [np.finfo(np.float32).min, -np.inf])
def test_the_nan_guard_is_written_only_where_the_mask_may_be_infinite(masked):
    """A decode step whose mask the model computes as the exporters do, where(seen, 0, masked) from a boolean input,
    with row 0 left-padded and row 1 masked entirely: with float32's lowest the mask is finite, no row's softmax is
    NaN, and the attention is written without the IsNaN / Where guard (the lowest rewritten in the Where's constants
    themselves); with -inf the guard stays (row 1 is then 0). Either equals the decomposition in ONNX Runtime."""
    b, s, d, past = 2, 1, 4, 5
    st = NodeStore()
    shapes = {"q": (b, s, 6 * d), "k": (b, s, 2 * d), "v": (b, s, 2 * d), "pk": (b, 2, past, d),
              "pv": (b, 2, past, d)}
    feeds = {k: RNG.standard_normal(sh).astype(np.float32) for k, sh in shapes.items()}
    refs = [st.input(k, TensorType(sh, F32)) for k, sh in shapes.items()]
    seen = np.ones((b, 1, s, past + s), bool)
    seen[0, ..., :3], seen[1] = False, False
    feeds["seen"] = seen
    mask = st.add("where", [st.input("seen", TensorType(seen.shape, "bool")), st.weight(np.float32(0.0)),
                            st.weight(np.float32(masked))])[0]
    outs = st.add("gqa_heads_cache", refs + [st.weight(np.float32(0.4)), mask, st.weight(np.float32(0.0))],
                  num_heads=6, kv_num_heads=2)
    graph = TensorGraph(st, list(outs))
    want = graph.evaluate(feeds)
    model = _export(graph, feeds)
    kinds = [n.op_type for n in model.graph.node]
    assert kinds.count("Attention") == 1 and ("IsNaN" in kinds) == (masked == -np.inf) and "Equal" not in kinds, kinds
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
