"""Decoder LLMs (issue 35): tiny exports of each family (tests/data/decoders, written by
benchmarks/peers/make_decoder_models.py --set tiny), prefill and one decode step over a KV cache, searched from the
model as given without sample inputs (a decode step's mask is `past_sequence + 1` long: the dims related as the
exporter wrote them), and equal to the original in ONNX Runtime at bindings the search never saw, with left-padded
rows. Every RMS norm, rotary embedding (Cohere's interleaved one, Phi-2's partial one, GPT-J's partial interleaved
one on tables gathered by position too) and attention is fused (the attention as ONNX 23's Attention on the 3-D
projections, with the KV cache's past and present in a decode step: the model's opset is raised from 20)."""
import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from taso_tvm.onnx_opt import optimize_onnx
from taso_tvm.onnx_opt.expand_fused import expand_fused
from taso_tvm.onnx_opt.fused_census import fused_census
from taso_tvm.runtime.check import random_feeds, run_onnx

DATA = Path(__file__).parent / "data" / "decoders"
ENTRIES = {e["name"]: e for e in json.loads((DATA / "manifest.json").read_text())["models"]} \
    if (DATA / "manifest.json").exists() else {}
EXPORTS = sorted(n for n, e in ENTRIES.items() if "prefill" in e["form"] or "decode" in e["form"])
DEFAULT = {"llama_decode_tiny"}  # the others: `-m slow` (about 15 s each)
LAYER_NORMED = ("cohere", "gptj", "phi2")  # families whose norms are layer norms (the others: RMS norms)


def _feeds(model: onnx.ModelProto, batch: int, length: int, seed: int) -> dict:
    """Inputs at `batch` and `length` (the sequence of a prefill, the past of a decode step), the first row padded
    on the left (its first three positions masked), as a batch of prompts of different lengths is."""
    names = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim}
    dims = {k: v for k, v in (("batch", batch), ("sequence", length), ("past_sequence", length)) if k in names}
    feeds = random_feeds(model, dims=dims, seed=seed)
    mask = feeds["attention_mask"]
    mask[:] = 1
    mask[0, :3] = 0
    return feeds


@pytest.mark.parametrize("name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in EXPORTS])
def test_every_rms_norm_rotary_and_attention_fused_and_equal(name, tmp_path, monkeypatch):
    model = onnx.load(str(DATA / ENTRIES[name]["file"]))
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(tmp_path / "costs.sqlite"))  # cold: kernels measured afresh
    # the fusing step runs before the budgeted search: a small budget fuses as much
    out, report = optimize_onnx(model, time_check=False, peer_starts=False, settings={"budget": 2})
    assert not report.decision.startswith("original: the model does not run"), report.decision
    for kind in ("layer norm", "rotary", "attention"):
        before, after = fused_census(model)[kind], fused_census(out).get(kind)
        # a tiny prefill's last layer norm, [1, 64, 64] before the LM head: ONNX Runtime's SkipLayerNormalization
        # there may measure slower than Add + LayerNormalization beyond the noise (GPT-J's, Phi-2's: 7 %), and the
        # search then keeps the pieces (Cohere's, Phi-2's and GPT-J's norms are layer norms; their first, on the
        # embeddings alone, has no residual sum to fuse with: one LayerNormalization, as fused as it can be)
        family, form = ENTRIES[name]["family"], ENTRIES[name]["form"]
        last = int(kind == "layer norm" and family in LAYER_NORMED and "prefill" in form)
        first = int(kind == "layer norm" and family in LAYER_NORMED)  # a LayerNormalization node in the export
        assert before[0] <= first and after[1] == before[1], (kind, before, after, report.decision)
        assert before[1] - last <= after[0], (kind, before, after, report.decision)
    if ENTRIES[name]["family"] in LAYER_NORMED:  # no norm left in pieces: those left are LayerNormalization nodes
        fused, norms = fused_census(out)["layer norm"]
        sums = {o for n in out.graph.node if n.op_type == "Add" for o in n.output}
        assert [n.op_type for n in out.graph.node if n.input and n.input[0] in sums].count("LayerNormalization") \
            == norms - fused
    # the attention on the projections as their products give them (3-D): no transpose of heads left; a decode
    # step's attention appends to the cache itself (past in, present out)
    assert not [n for n in out.graph.node if n.op_type == "Transpose"], report.decision
    # a decode step's products of one input packed into one MatMul on every layer (q, k and v; the gate and up
    # projections); at a tiny prefill ([1, 64, 64] products) packing is the measured costs' call: GPT-J's and
    # Phi-2's prefills came out packed or not from one cold run to the next
    decode = "decode" in ENTRIES[name]["form"]
    readers = Counter(n.input[0] for n in out.graph.node if n.op_type == "MatMul")
    assert max(readers.values()) == 1 or not decode, [k for k, c in readers.items() if c > 1]
    for n in (n for n in out.graph.node if n.op_type == "Attention"):
        assert (len(n.input) == 6 and len(n.output) == 3) == decode, (n.input, n.output)
    if decode:  # one query: the exporter's causal mask is the padding mask alone, read from attention_mask (Cast,
        # Unsqueeze, Where) instead of its chain of positions compared and gathered
        kinds = {n.op_type for n in out.graph.node}
        assert not kinds & {"LessOrEqual", "IsNaN"}, kinds
        assert all(n.input[3].startswith("taso_mask/") for n in out.graph.node if n.op_type == "Attention")
    for batch, length, seed in ((2, 16, 1), (3, 5, 2)):  # never searched at (the search binds 1 x 64 and 3 x 128)
        feeds = _feeds(model, batch, length, seed)
        want, got = run_onnx(model, feeds), run_onnx(out, feeds)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4, err_msg=k)


def test_the_genai_builders_norms_expand_exactly():
    """onnxruntime-genai's graph: its SimplifiedLayerNormalization (default domain) and
    SkipSimplifiedLayerNormalization nodes written as the pieces the rules lift, equal in ONNX Runtime."""
    path = DATA / "llama_genai_tiny.onnx"
    if not path.exists():
        pytest.skip("no tiny genai-builder export (benchmarks/peers/make_decoder_models.py --set tiny)")
    model = onnx.load(str(path))
    expanded, count = expand_fused(model)
    kinds = {n.op_type for n in expanded.graph.node}
    assert count == 5 and not kinds & {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
    assert fused_census(expanded)["layer norm"][0] == 0
    feeds = random_feeds(model, dims={"batch_size": 2, "sequence_length": 1, "past_sequence_length": 7,
                                      "total_sequence_length": 8, "kv_cache_dim": 16}, seed=3)
    feeds["attention_mask"][:] = 1
    want, got = run_onnx(model, feeds), run_onnx(expanded, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
def test_standard_ops_write_no_runtime_operator(tmp_path, monkeypatch):
    """`--standard-ops`: the fused norms are written as default-domain ONNX, the rotary embeddings and the attention
    as ONNX 23's RotaryEmbedding and Attention, equal."""
    model = onnx.load(str(DATA / "llama_decode_tiny.onnx"))
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(tmp_path / "costs.sqlite"))
    out, report = optimize_onnx(model, time_check=False, peer_starts=False, standard_ops=True)
    assert report.rules_applied and not [n.op_type for n in out.graph.node if n.domain not in ("", "ai.onnx")]
    census = fused_census(out)  # ONNX 23's Attention and RotaryEmbedding are standard ONNX
    assert census["attention"] == (2, 2) and census["rotary"] == (4, 4), census
    onnx.checker.check_model(out)
    feeds = _feeds(model, 2, 9, 4)
    want, got = run_onnx(model, feeds), run_onnx(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4, err_msg=k)


@pytest.mark.slow  # 15 s; the default suite's 6-minute margin
def test_a_rotary_table_gathered_from_a_cache_kept_as_a_weight_fuses(tmp_path, monkeypatch):
    """GPT-J's sin/cos cache (`embed_positions`) as a user's large model has it: above the size kept as a reference
    to the data file (here 1024 positions, 8192 values), so no folding reads it and the tables gathered from it by
    position are computed at run time; the repeat's Unsqueeze, which the partition leaves out (TVM writes an
    Unsqueeze of two axes back as two nodes), is read into the region and every rotary fuses (0 of 4 before), the
    result equal to the original."""
    from onnx import numpy_helper

    from taso_tvm.cli.common import read_model

    model = onnx.load(str(DATA / ENTRIES["gptj_decode_tiny"]["file"]))
    (i, table), = [(i, t) for i, t in enumerate(model.graph.initializer) if list(t.dims) == [256, 8]]
    rows = numpy_helper.to_array(table)
    model.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.concatenate([rows] * 4), table.name))
    path = tmp_path / "gptj.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="gptj.data", size_threshold=1024)
    model, _ = read_model(str(path))
    assert any(t.data_location == onnx.TensorProto.EXTERNAL and t.name == table.name for t in model.graph.initializer)
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(tmp_path / "costs.sqlite"))
    out, report = optimize_onnx(model, time_check=False, peer_starts=False, settings={"budget": 2})
    census = fused_census(out)
    assert census["rotary"] == (4, 4) and census["attention"] == (2, 2), (census, report.decision)
    for batch, length, seed in ((2, 16, 1), (3, 5, 2)):
        feeds = _feeds(model, batch, length, seed)
        want, got = run_onnx(model, feeds), run_onnx(out, feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4, err_msg=k)


def _optimum_feeds(model: onnx.ModelProto, batch: int, past: int, step: int, seed: int) -> dict:
    """optimum's inputs for `step` tokens after `past` cached ones, the first row left-padded by three: its positions
    count its unpadded tokens only (as generation computes them), so each row has its own."""
    feeds = random_feeds(model, dims={"batch_size": batch, "past_sequence_length": past, "sequence_length": step},
                         seed=seed)
    mask = np.ones((batch, past + step), np.int64)
    mask[0, :3] = 0
    feeds["attention_mask"] = mask
    feeds["position_ids"] = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, past:]
    return feeds


@pytest.mark.slow  # 17 s: its kernels measured cold
def test_optimum_export_fuses_every_norm_and_rotary(tmp_path, monkeypatch):
    """Hugging Face optimum's `text-generation-with-past` export (TorchScript; `make_optimum_models.py`): its RMS
    norms cast to float32 and back, its rotary tables scaled by 1 and computed per batch row from position_ids, each
    layer's mask sliced to a key length read from the repeated keys' shape, opset 18. Every norm, rotary and
    attention is fused (none were: the casts and the scale were opaque to the rules, the slice cut layer 0 from its
    attention, the runtime's rotary read the first row's table for every row, and opset 18 was not raised to ONNX
    23's Attention), equal to the export on rows with their own positions, prefill and decode step."""
    model = onnx.load(str(DATA / "llama_optimum_tiny.onnx"))
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(tmp_path / "costs.sqlite"))
    out, report = optimize_onnx(model, time_check=False, peer_starts=False, settings={"budget": 2})
    census = fused_census(out)
    assert census["layer norm"] == (5, 5) and census["rotary"] == (4, 4), (census, report.decision)
    # the attention as ONNX 23's with the cache (the model raised from opset 18), over the kv heads themselves
    assert census["attention"] == (2, 2), (census, report.decision)
    for batch, past, step, seed in ((2, 0, 7, 1), (3, 6, 1, 2), (2, 5, 4, 3)):
        feeds = _optimum_feeds(model, batch, past, step, seed)
        want, got = run_onnx(model, feeds), run_onnx(out, feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4, err_msg=k)
