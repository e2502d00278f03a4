"""Embeddings with positions sliced from a constant arange by the ids' length (HuggingFace BERT through the
TorchScript exporter) written as EmbedLayerNormalization (onnx_opt/embed_positions.py), equal in ONNX Runtime."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from test_embed_ort import B, RNG, S, VOCAB, _run, tiny_bert

from taso_tvm.onnx_opt import optimize_onnx
from taso_tvm.onnx_opt.embed_positions import fuse_embed_positions

PEERS = os.path.expanduser("~/.cache/taso_tvm/peer_models")


def _feeds(b: int, s: int, vocab: int = VOCAB) -> dict:
    mask = np.ones((b, s), np.int64)
    mask[-1, s // 2:] = 0
    return {"input_ids": RNG.integers(0, vocab, (b, s)), "token_type_ids": RNG.integers(0, 2, (b, s)),
            "attention_mask": mask}


def _embeds(model: onnx.ModelProto) -> int:
    return [n.op_type for n in model.graph.node].count("EmbedLayerNormalization")


def test_sliced_positions_become_embed_layernorm_equal_in_ort():
    model = tiny_bert()
    out, n = fuse_embed_positions(model)
    assert n == 1 and _embeds(out) == 1
    assert "Slice" not in [x.op_type for x in out.graph.node]
    for b, s in ((B, S), (1, 3)):
        feeds = _feeds(b, s)
        np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-5, atol=1e-5)


def test_positions_from_another_constant_are_left_alone():
    model = tiny_bert()
    buf = next(t for t in model.graph.initializer if t.name == "position_ids_buffer")
    arr = onnx.numpy_helper.to_array(buf).copy()
    arr[0, 1] = 0  # not an arange: position 1 reads row 0
    buf.CopyFrom(onnx.numpy_helper.from_array(arr, buf.name))
    assert fuse_embed_positions(model)[1] == 0


def test_optimize_writes_embed_layernorm_for_sliced_positions():
    model = tiny_bert()
    out, report = optimize_onnx(model, time_check=False, inputs=_feeds(B, S))
    assert _embeds(out) == 1, report.decision
    for b, s in ((B, S), (3, 5)):
        feeds = _feeds(b, s)
        np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-3, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm_l6_eager_op17", "minilm_l3_eager_op17"])
def test_real_export_gets_embed_layernorm(name):
    path = os.path.join(PEERS, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is missing (benchmarks/peers/make_peer_models.py writes it)")
    model = onnx.load(path)
    out, n = fuse_embed_positions(model)
    assert n == 1
    for b, s in ((1, 128), (3, 77)):
        feeds = _feeds(b, s, vocab=1000)
        np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-4, atol=1e-4)
