"""Dead rows (issue 34): a sequence classifier reads its logits from the [CLS] row of the last hidden state; the
rules of family `dead_rows` (rules/library/rows.yaml) move that row's slice up through the last layer, so its
projections, feed-forward and norms compute one row and its attention one query over every key. Proven on the
committed tiny exports of `benchmarks/peers/make_peer_models.py --set classifiers` (TorchScript and dynamo, eager
attention, a padding mask): the written graph's shapes, ONNX Runtime and a TVM build against the original."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.onnx_opt.driver import optimize_onnx
from taso_tvm.rules import load_rules, read_rule_files
from taso_tvm.rules.ruleset import library_files
from taso_tvm.search.backtrack import normalize

DATA = Path(__file__).parent / "data" / "classifiers"
FORMS = ["bert_tiny_cls_eager_op17", "bert_tiny_cls_eager_dynamo"]
HIDDEN, INTER, VOCAB = 32, 64, 128  # BERT_TINY of make_peer_models.py
SETTINGS = {"cost": "analytic", "budget": 10}
DEAD_ROWS = {r.name for r in read_rule_files([f for f in library_files() if f.name == "rows.yaml"])}


def feeds(batch: int, seq: int, seed: int = 0) -> dict:
    """Token ids, a padding mask (the second row padded) and segment ids."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2:] = 0
    return {"input_ids": rng.integers(0, VOCAB, (batch, seq)), "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (batch, seq))}


def run(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, inputs)[0]


@pytest.fixture(scope="module", params=FORMS)
def classifier(request) -> tuple:
    """(name, original, written, report): optimized as `taso-tvm optimize` does, symbolic dims kept."""
    m = onnx.load(str(DATA / f"{request.param}.onnx"))
    out, report = optimize_onnx(m, SETTINGS, time_check=False)
    return request.param, m, out, report


def test_the_cls_row_moves_up_the_last_layer(classifier):
    name, _, out, report = classifier
    applied = set(report.rules_applied)
    assert {"pick_as_slice", "slice_layernorm", "slice_matmul_rows", "slice_softmax", "slice_reshape",
            "slice_transpose"} <= applied, (name, sorted(applied & DEAD_ROWS))
    ops = [n.op_type for n in out.graph.node]
    assert "Slice" in ops and ops.count("MultiHeadAttention") + ops.count("Attention") == 2, ops


@pytest.mark.parametrize("batch, seq", [(2, 16), (3, 9)])
def test_equal_to_the_original_in_onnx_runtime(classifier, batch, seq):
    """At the binding it was searched at and at one it never saw, with padded rows."""
    _, m, out, _ = classifier
    x = feeds(batch, seq, seed=seq)
    want, got = run(m, x), run(out, x)
    assert got.shape == want.shape == (batch, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_last_layer_computes_one_row(classifier):
    """Of the two feed-forward down-projections, the first layer's computes every row and the last layer's one row
    per sequence (read in ONNX Runtime, the projections' outputs made graph outputs)."""
    _, _, out, _ = classifier
    assert one_row_down_projections(out) == [(2, 1, HIDDEN), (2, 16, HIDDEN)]


def test_standard_ops_compute_one_row_too():
    """`--standard-ops` (default-domain ONNX only): the same rows, equal to the original."""
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_op17.onnx"))
    out, report = optimize_onnx(m, SETTINGS, time_check=False, standard_ops=True)
    assert "pick_as_slice" in report.rules_applied
    assert all(n.domain in ("", "ai.onnx") for n in out.graph.node)
    assert one_row_down_projections(out) == [(2, 1, HIDDEN), (2, 16, HIDDEN)]
    x = feeds(2, 16)
    np.testing.assert_allclose(run(out, x), run(m, x), rtol=1e-4, atol=1e-5)


def one_row_down_projections(model: onnx.ModelProto) -> list:
    """The shapes (sorted) of the MatMuls by an [INTER, HIDDEN] weight at batch 2, sequence 16."""
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    names = [n.output[0] for n in model.graph.node
             if n.op_type == "MatMul" and weights.get(n.input[1]) == (INTER, HIDDEN)]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([onnx.ValueInfoProto(name=x) for x in names])
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return sorted(tuple(a.shape) for a in sess.run(names, feeds(2, 16)))


def test_a_model_that_reads_every_row_is_left_alone():
    """The same encoder without its head (the last hidden state out): no dead-row rule applies."""
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_op17.onnx"))
    last = next(n for n in reversed(m.graph.node) if n.op_type == "Gather" and "pooler" in n.name).input[0]
    needed, keep = {last}, []
    for n in reversed(m.graph.node):  # the nodes the last hidden state needs, in their order
        if set(n.output) & needed:
            keep.append(n)
            needed.update(n.input)
    encoder = onnx.ModelProto()
    encoder.CopyFrom(m)
    del encoder.graph.node[:], encoder.graph.output[:]
    encoder.graph.node.extend(reversed(keep))
    encoder.graph.output.append(onnx.helper.make_tensor_value_info(last, onnx.TensorProto.FLOAT,
                                                                   ["batch", "sequence", HIDDEN]))
    _, report = optimize_onnx(encoder, SETTINGS, time_check=False)
    assert report.rules_applied and not set(report.rules_applied) & DEAD_ROWS, report.rules_applied


@pytest.mark.slow  # 4.5 s: room in the default suite
def test_the_tvm_build_computes_one_row_and_equals_onnx_runtime():
    """`taso_tvm.compile` (the TVM path) builds the sliced graph; its logits equal ONNX Runtime's original's."""
    import taso_tvm

    path = DATA / "bert_tiny_cls_eager_op17.onnx"
    model = taso_tvm.load(str(path), shapes={k: [2, 16] for k in ("input_ids", "attention_mask", "token_type_ids")})
    package = taso_tvm.compile(model, "llvm", settings={"cost": "analytic"}, time_check=False)
    applied = package.report.search.total.rules_applied
    assert {"pick_as_slice", "slice_matmul_rows", "slice_softmax"} <= set(applied), applied
    x = feeds(2, 16, seed=3)
    got = taso_tvm.run(package, x).outputs["logits"]
    np.testing.assert_allclose(got, run(onnx.load(str(path)), x), rtol=1e-4, atol=1e-5)


def test_a_last_token_read_moves_up_too():
    """A decoder's `hidden[:, -1]` (a pick of index -1): the slice keeps reading the last row at any length."""
    s = NodeStore()
    x = s.input("x", TensorType((2, 8, 4), "float32"))
    w = s.weight(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))
    h = s.add("relu", s.add("matmul", [x, w]))  # one output each: a list of one tensor
    y = s.add("pick", h, axis=1, index=-1)
    g, path = normalize(TensorGraph(s, y), load_rules(), 16)
    assert path == ("pick_last_as_slice", "slice_relu", "slice_matmul_rows"), path
    sl = next(n for n in g.topo_order() if n.op == "slice")
    assert (sl.attrs["begin"], sl.attrs["end"], g.type(sl.outputs[0]).shape) == (-1, 2 ** 63 - 1, (2, 1, 4))
    feed = {"x": np.random.default_rng(1).standard_normal((2, 8, 4)).astype(np.float32)}
    np.testing.assert_allclose(g.evaluate(feed)[0], TensorGraph(s, y).evaluate(feed)[0], rtol=1e-6)


def test_slice_and_pick_semantics():
    """ONNX Slice's bounds (negative from the end, clamped, INT64_MAX to the end) and Gather's scalar index."""
    from taso_tvm.graph.ops import get_op

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    sl = get_op("slice").numpy
    assert sl([a], {"axis": 1, "begin": -1, "end": 2 ** 63 - 1})[0].tolist() == a[:, 2:].tolist()
    assert sl([a], {"axis": 2, "begin": 1, "end": 100})[0].tolist() == a[:, :, 1:].tolist()
    assert get_op("pick").numpy([a], {"axis": 1, "index": -1})[0].tolist() == a[:, -1].tolist()
    s = NodeStore()
    x = s.input("x", TensorType((2, 3, 4), "float32"))
    with pytest.raises(Exception, match="empty"):
        s.add("slice", [x], axis=1, begin=2, end=1)


def test_a_last_token_read_is_written_for_every_length():
    """An ONNX graph reading `hidden[:, -1]` with a symbolic sequence: the slice is written as [-1:], so the
    optimized file reads the last row at lengths it was never searched at."""
    from onnx import TensorProto, helper, numpy_helper

    rng, W = np.random.default_rng(2), 128  # wide enough that the rows saved pay for the slice
    inits = [numpy_helper.from_array(rng.standard_normal((W, W)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(W).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((W, 5)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.asarray(-1, np.int64), "last")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Gather", ["r", "last"], ["t"], axis=1),
             helper.make_node("MatMul", ["t", "w2"], ["logits"])]
    g = helper.make_graph(nodes, "last_token", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["batch", "sequence", W])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out, report = optimize_onnx(m, SETTINGS, time_check=False)
    assert "pick_last_as_slice" in report.rules_applied and "slice_matmul_rows" in report.rules_applied
    consts = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    starts = [consts[n.input[1]].tolist() for n in out.graph.node if n.op_type == "Slice"]
    assert starts == [[-1]], starts
    for batch, seq in ((1, 4), (3, 11)):
        x = {"x": rng.standard_normal((batch, seq, W)).astype(np.float32)}
        np.testing.assert_allclose(run(out, x), run(m, x), rtol=1e-4, atol=1e-3)


def test_the_summary_counts_what_is_fused(classifier):
    """The report's census (issue 33's `fused` line): of the written model, every attention, layer norm and GELU
    fused; of the export itself, none."""
    from taso_tvm.onnx_opt.fused_census import fused_census

    _, m, out, report = classifier
    norms = sum(n.op_type in ("SkipLayerNormalization", "EmbedLayerNormalization") for n in out.graph.node)
    assert report.fused == {"attention": (2, 2), "layer norm": (norms, 5), "GELU": (2, 2)}, report.fused
    assert report.fused_line == f"attention 2 of 2, layer norm {norms} of 5, GELU 2 of 2"
    assert fused_census(m) == {"attention": (0, 2), "layer norm": (0, 5), "GELU": (0, 2)}
