"""Issue 33's export matrix in miniature (tests/data/matrix, made by `benchmarks/peers/make_peer_models.py --set
matrix-tiny`): BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA, DeBERTa-v2 and ViT, eager and sdpa attention, torch's
TorchScript exporter at opsets 14 and 17 and its dynamo exporter, with and without a classification head.

For each distinct file: the search from the model as given (no peer's output to start from, the cost cache cold)
runs every kind of layer (attention, layer norm, GELU) fused at least as often as ONNX Runtime's transformer
optimizer and onnxscript's ORT fusions do on the same file, counted per layer; and what it writes equals the
original in ONNX Runtime at a batch and sequence length the search never saw.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from taso_tvm.onnx_opt.driver import feeds_at, optimize_onnx
from taso_tvm.onnx_opt.fused_census import fused_census
from taso_tvm.onnx_opt.peer_starts import onnxscript_output, ort_optimizer_output
from taso_tvm.onnx_opt.prepare import make_binding
from taso_tvm.runtime.check import run_onnx

MATRIX = Path(__file__).parent / "data" / "matrix"


def _distinct() -> list[dict]:
    """The manifest's entries, one per distinct file (XLM-R's tiny export is RoBERTa's, ELECTRA's encoder BERT's)."""
    seen, out = set(), []
    for e in json.loads((MATRIX / "manifest.json").read_text())["models"]:
        if e["sha256"] not in seen:
            seen.add(e["sha256"])
            out.append(e)
    return out


ENTRIES = {e["name"]: e for e in _distinct()}
# every row is `slow` (`-m slow`, 6 minutes; the opset-14 row, about 7 s, left the default suite for its 6-minute
# margin; classification heads: tests/test_dead_rows.py, whose default tests fuse a BERT classifier's attentions)
DEFAULT: set = set()


def _feeds(model: onnx.ModelProto, entry: dict, batch: int, seq: int) -> dict:
    shapes = {i["name"]: [batch, 3, *i["shape"][2:]] if i["name"] == "pixel_values" else [batch, seq]
              for i in entry["inputs"]}
    feeds = feeds_at(model, make_binding(model, shapes), None, 1)
    for i in entry["inputs"]:  # token ids in the vocabulary, a padded mask
        if i.get("range"):
            feeds[i["name"]] = np.random.default_rng(2).integers(*i["range"], (batch, seq)).astype(np.int64)
        if i.get("pattern") == "padding_mask":
            feeds[i["name"]][:, seq - seq // 3:] = 0
    return feeds


@pytest.mark.parametrize("name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in sorted(ENTRIES)])
def test_every_layer_a_peer_fuses_is_fused_and_equal(name, tmp_path, monkeypatch):
    entry = ENTRIES[name]
    model = onnx.load(str(MATRIX / entry["file"]))
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(tmp_path / "costs.sqlite"))  # cold: kernels measured afresh
    out, report = optimize_onnx(model, time_check=False, peer_starts=False)
    mine = fused_census(out)
    feeds = [_feeds(model, entry, 2, 16)]
    for peer in (ort_optimizer_output, onnxscript_output):
        theirs = peer(model, feeds, rtol=1e-3, atol=1e-4)
        for kind, (done, total) in (fused_census(theirs).items() if theirs is not None else ()):
            assert mine.get(kind, (0, total))[0] >= done, (peer.__name__, kind, mine, report.decision)
    at = _feeds(model, entry, 3, 11)  # a binding the search never saw
    want, got = run_onnx(model, at), run_onnx(out, at)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4)
