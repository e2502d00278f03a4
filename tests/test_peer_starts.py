"""ONNX Runtime's transformer optimizer and onnxscript's ORT fusions as candidates of the never-slower guard (issue
33): their outputs for a transformer are checked and timed with the search's result, so `optimize` never writes
something slower than them; an output that differs from the model is not a candidate; a model that is not a
transformer gets no such candidate."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from taso_tvm import zoo
from taso_tvm.onnx_opt.driver import GUARD_SESSIONS, feeds_at, optimize_onnx
from taso_tvm.onnx_opt.peer_starts import (heads_and_hidden, looks_like_a_transformer, onnxscript_output,
                                          ort_optimizer_output)
from taso_tvm.onnx_opt.fused_census import fused_census
from taso_tvm.runtime.check import reference_outputs, run_onnx
from taso_tvm.runtime.timing import ort_session
from taso_tvm.onnx_opt.prepare import make_binding

DATA = Path(__file__).parent / "data" / "classifiers"


def test_the_guard_times_ort_optimizers_output_for_a_transformer():
    """Its file and the search run on it are candidates; what is written is the original or the fastest."""
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_op17.onnx"))
    out, report = optimize_onnx(m, {"cost": "analytic", "budget": 10}, time_cap=3.0)
    names = [lat.name for lat in report.timing.latencies]
    assert "ort-optimizer" in names and "onnxscript" in names, names
    # the analytic costs leave layers unfused that ORT's optimizer fuses: its output is searched again
    assert "ort-optimizer+search" in names, names
    t = report.timing
    assert t.sessions == GUARD_SESSIONS  # each model in several sessions in turn: no session's placement decides
    fastest = min(range(1, len(names)), key=lambda i: t.latencies[i].median)
    written = report.decision.split(":")[0]
    if written != "original":  # the fastest, or a more fused one level with it, both faster than the original;
        # where none is faster, one level with the original that runs more layers fused
        w = names.index(written if written in names else "optimized")
        if t.ratios[w - 1].verdict == "faster":
            assert w == fastest or t.between(fastest, w).verdict != "slower", report.decision
        else:
            assert t.ratios[w - 1].verdict == "not different" and "level with the original" in report.decision
            assert report.fused and sum(d for d, _ in report.fused.values()) > \
                sum(d for d, _ in fused_census(m).values()), report.decision
    # from the original only: no peer's file, nor the search from it
    out, report = optimize_onnx(m, {"cost": "analytic", "budget": 10}, time_cap=2.0, peer_starts=False)
    names = [lat.name for lat in report.timing.latencies] if report.timing else []
    assert not {"ort-optimizer", "ort-optimizer+search", "onnxscript", "onnxscript+search"} & set(names), names


def test_its_output_is_checked_and_fused():
    m = onnx.load(str(DATA / "bert_tiny_cls_eager_dynamo.onnx"))
    feeds = [feeds_at(m, make_binding(m, {k: [2, 16] for k in ("input_ids", "attention_mask", "token_type_ids")}),
                      None, 0)]
    for make in (ort_optimizer_output, onnxscript_output):
        out = make(m, feeds, rtol=1e-3, atol=1e-4)
        assert out is not None and any(n.domain == "com.microsoft" for n in out.graph.node), make.__name__
        onnx.checker.check_model(out)  # a file the tool may write: valid, its opsets imported
        # checked against the model's outputs: an output that differs from them is never a candidate
        wrong = [{k: 2.0 * w + 1.0 for k, w in ws.items()} for ws in reference_outputs(ort_session(m), feeds)]
        assert make(m, feeds, rtol=1e-3, atol=1e-4, wants=wrong) is None, make.__name__


def test_no_candidate_for_a_model_that_is_not_a_transformer():
    m = zoo.get_model("squeezenet")
    assert not looks_like_a_transformer(m)
    assert ort_optimizer_output(m, [], rtol=1e-3, atol=1e-4) is None
    assert onnxscript_output(m, [], rtol=1e-3, atol=1e-4) is None


def test_heads_and_hidden_are_read_from_the_graph():
    """What a user passes to ORT's optimizer: TorchScript's and dynamo's exports (the head size a constant piece of a
    computed Reshape target), BERT and ViT; (0, 0) where the graph has no attention projections."""
    for name in ("bert_eager_op14_tiny", "bert_dynamo_tiny", "vit_sdpa_op17_tiny", "distilbert_mini_cls_dynamo_tiny"):
        m = onnx.load(str(Path(__file__).parent / "data" / "matrix" / f"{name}.onnx"))
        assert heads_and_hidden(m) == (4, 32), name
    assert heads_and_hidden(zoo.get_model("squeezenet")) == (0, 0)


def test_the_search_from_each_peers_output_fuses_every_layer():
    """From onnxscript's output of an opset-14 export (its layer norms in pieces, torch's epsilon dropped) and from
    ORT's optimizer's output of the sdpa export (SkipLayerNormalization expanded for the search, no attention):
    every attention, layer norm and GELU fused, equal to the user's model."""
    for name, make in (("bert_eager_op14_tiny", onnxscript_output), ("bert_sdpa_op17_tiny", ort_optimizer_output)):
        m = onnx.load(str(Path(__file__).parent / "data" / "matrix" / f"{name}.onnx"))
        shapes = {k: [2, 16] for k in ("input_ids", "attention_mask", "token_type_ids")}
        feeds = [feeds_at(m, make_binding(m, shapes), None, 0)]
        start = make(m, feeds, rtol=1e-3, atol=1e-4)
        assert start is not None, name
        out, report = optimize_onnx(start, {"budget": 10}, time_check=False, peer_starts=False)
        assert all(done == total for done, total in fused_census(out).values()), (make.__name__, report.fused_line)
        want, got = run_onnx(m, feeds[0]), run_onnx(out, feeds[0])
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4)
