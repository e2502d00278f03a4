"""Grouped-query attention (issue 35): the registry's gqa equals attention with every kv head repeated for its group
of query heads (numpy.repeat, as transformers' repeat_kv), and is written as ONNX 23's Attention that ONNX Runtime
runs to the same numbers, the NaN guard kept; below opset 23 it is the decomposition; a model's opset is raised only
where none of its operators changed meaning."""
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
    assert not can_raise_opset(_model("GroupNormalization", 20), 23)  # 21: scale and bias per channel
    assert not can_raise_opset(_model("Relu", 17), 23)  # older opsets changed attributes into inputs
