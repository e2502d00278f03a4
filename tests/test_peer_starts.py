"""ONNX Runtime's transformer optimizer as a candidate of the never-slower guard (issue 33): its output for a
transformer is checked and timed with the search's result, so `optimize` never writes something slower than it;
a model that is not a transformer gets no such candidate."""
from __future__ import annotations

from pathlib import Path

import onnx

from taso_tvm import zoo
from taso_tvm.onnx_opt.driver import feeds_at, optimize_onnx
from taso_tvm.onnx_opt.peer_starts import looks_like_a_transformer, ort_optimizer_output
from taso_tvm.onnx_opt.prepare import make_binding

DATA = Path(__file__).parent / "data" / "classifiers"


def test_the_guard_times_ort_optimizers_output_for_a_transformer():
    """Its file and the search run on it are candidates; what is written is the original or the fastest."""
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_op17.onnx"))
    out, report = optimize_onnx(m, {"cost": "analytic", "budget": 10}, time_cap=3.0)
    names = [lat.name for lat in report.timing.latencies]
    assert "ort-optimizer" in names and "ort-optimizer+search" in names, names  # its file, and searched again
    fastest = min(report.timing.latencies[1:], key=lambda lat: lat.median).name
    assert report.decision.split(":")[0] in ("original", fastest), (fastest, report.decision)


def test_its_output_is_checked_and_fused():
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_dynamo.onnx"))
    feeds = [feeds_at(m, make_binding(m, {k: [2, 16] for k in ("input_ids", "attention_mask", "token_type_ids")}),
                      None, 0)]
    out = ort_optimizer_output(m, feeds, rtol=1e-3, atol=1e-4)
    assert out is not None and any(n.domain == "com.microsoft" for n in out.graph.node)


def test_no_candidate_for_a_model_that_is_not_a_transformer():
    m = zoo.get_model("squeezenet")
    assert not looks_like_a_transformer(m)
    assert ort_optimizer_output(m, [], rtol=1e-3, atol=1e-4) is None
