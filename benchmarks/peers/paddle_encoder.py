"""Export BERT-like encoders written in PaddlePaddle to ONNX with paddle2onnx (the peers' Paddle transformer forms).

Each model is built with random weights from a fixed seed: token + position embeddings (paddle.nn.Embedding), a
LayerNorm, then `paddle.nn.TransformerEncoder` of `TransformerEncoderLayer(d_model, nhead, dim_feedforward,
dropout=0, activation="gelu", normalize_before=False)` (post-norm, as BERT). Its inputs are `input_ids` [batch, seq]
int64 and `attention_mask` [batch, seq] int64 (1 = token, 0 = padding), which becomes the additive mask
(1 - mask) * -1e4 of shape [batch, 1, 1, seq] that paddle's MultiHeadAttention adds to the scores. Batch and
sequence are dynamic (InputSpec with None dims). The export goes through `paddle.onnx.export` (paddle.jit.save, then
paddle2onnx), opset 17 by default (LayerNormalization; opset 14 writes it decomposed into ReduceMean, Sub,
Pow, Sqrt, Div, Mul, Add); each exported model is checked (onnx.checker, then ONNX Runtime at two values of
each dynamic dim against paddle, where onnxruntime is installed) and listed in `manifest.json` in the format of
`make_peer_models.py` (inputs, ONNX Runtime's transformer optimizer's `num_heads` / `hidden_size`), so that
`python benchmarks/bench_peers.py --models-dir ~/.cache/taso_tvm/paddle paddle_minilm_opset17` times it beside the
peers. `tests/data/paddle_encoder_tiny.onnx` is the tiny export at opset 17.

Biases and LayerNorm parameters are drawn at random too (paddle initializes them to 0 and (1, 0), which constant
folders would remove). paddle2onnx's default post-pass (Polygraphy constant folding) runs as users get it: it folds
the shape-only subgraphs, and leaves paddle's `scale` ops as Mul + Add(0.0) and the Identity nodes.

It needs paddlepaddle and paddle2onnx, which the project does not depend on (tried with paddlepaddle 3.3.1,
paddle2onnx 2.1.0, onnx 1.17.0, onnxruntime 1.32.0 on Python 3.11, CPU; paddle2onnx imports `packaging` without
declaring it, and Polygraphy pip-installs onnxruntime, onnx_graphsurgeon and sympy on first use unless present):

    python3.11 -m venv /work/venvs/paddle
    /work/venvs/paddle/bin/pip install paddlepaddle paddle2onnx onnx packaging onnxruntime onnx_graphsurgeon sympy
    /work/venvs/paddle/bin/python benchmarks/peers/paddle_encoder.py [OUT_DIR] [--only tiny|minilm] [--opset N]
        [--no-mask]

It writes `paddle_NAME_opsetN.onnx` (NAME: tiny, hidden 32, 4 heads, 2 layers, vocab 100; minilm: hidden 384,
12 heads, 3 layers, vocab 30522, MiniLM-L3's shape) and `manifest.json` in the output folder, by default
`~/.cache/taso_tvm/paddle/` (`$TASO_TVM_PADDLE_MODELS`; keep the models out of git). Then, in the project's
environment:

    taso-tvm -v optimize ~/.cache/taso_tvm/paddle/paddle_tiny_opset17.onnx -o /tmp/paddle_tiny.opt.onnx
    python -m onnxruntime.transformers.optimizer --input ~/.cache/taso_tvm/paddle/paddle_tiny_opset17.onnx \
        --output /tmp/paddle_tiny.ort.onnx --model_type bert --num_heads 4 --hidden_size 32 --opt_level 0
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

SEED = 0
# name -> (hidden, heads, layers, ffn, vocab, max_positions, sequence lengths to check/benchmark)
MODELS = {
    "tiny": dict(hidden=32, heads=4, layers=2, ffn=64, vocab=100, max_pos=512, seq=[8, 5]),
    "minilm": dict(hidden=384, heads=12, layers=3, ffn=1536, vocab=30522, max_pos=512, seq=[128, 37]),
}


def default_out() -> Path:
    return Path(os.environ.get("TASO_TVM_PADDLE_MODELS", Path.home() / ".cache" / "taso_tvm" / "paddle"))


def build(cfg: dict, masked: bool):
    import paddle
    import paddle.nn as nn

    class Encoder(nn.Layer):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(cfg["vocab"], cfg["hidden"])
            self.positions = nn.Embedding(cfg["max_pos"], cfg["hidden"])
            self.norm = nn.LayerNorm(cfg["hidden"], epsilon=1e-12)
            layer = nn.TransformerEncoderLayer(cfg["hidden"], cfg["heads"], cfg["ffn"], dropout=0.0,
                                               activation="gelu", normalize_before=False)
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"])

        def forward(self, input_ids, attention_mask=None):
            seq = paddle.shape(input_ids)[1]
            pos = paddle.arange(seq, dtype="int64").unsqueeze(0)
            x = self.norm(self.tokens(input_ids) + self.positions(pos))
            mask = None
            if attention_mask is not None:
                # [B, S] int (1 keep, 0 pad) -> additive [B, 1, 1, S]
                mask = (1.0 - attention_mask.astype(x.dtype)) * -10000.0
                mask = mask.unsqueeze([1, 2])
            return self.encoder(x, src_mask=mask)

    paddle.seed(SEED)
    model = Encoder()
    # paddle initializes biases to 0 and LayerNorm to (1, 0): exporters' simplifiers (onnxsim, paddle2onnx's
    # constant folding) would then drop the bias adds, a form no trained model has. Draw them at random.
    rng = np.random.default_rng(SEED)
    for name, p in model.named_parameters():
        if p.ndim == 1:
            base = 1.0 if name.endswith("weight") and "norm" in name else 0.0
            p.set_value((base + rng.normal(0.0, 0.1, p.shape)).astype("float32"))
    model.eval()
    return model


def export(name: str, cfg: dict, out: Path, masked: bool, opset: int) -> dict:
    import paddle
    from paddle.static import InputSpec

    model = build(cfg, masked)
    specs = [InputSpec([None, None], "int64", "input_ids")]
    if masked:
        specs.append(InputSpec([None, None], "int64", "attention_mask"))
    path = out / f"paddle_{name}_opset{opset}"
    paddle.onnx.export(model, str(path), input_spec=specs, opset_version=opset)
    onnx_path = path.with_suffix(".onnx")
    if not onnx_path.exists():
        raise SystemExit(f"paddle.onnx.export wrote no {onnx_path}")

    import onnx
    m = onnx.load(str(onnx_path))
    onnx.checker.check_model(m)
    shape = ["batch", "sequence"]
    inputs = [dict(name="input_ids", dtype="int64", shape=shape, range=[0, cfg["vocab"]])]
    if masked:
        inputs.append(dict(name="attention_mask", dtype="int64", shape=shape, range=[0, 2], pattern="padding_mask"))
    exporter = dict(name="paddle.onnx.export", paddle=paddle.__version__)
    try:
        import paddle2onnx
        exporter["paddle2onnx"] = paddle2onnx.__version__
    except Exception:  # noqa: BLE001
        pass
    # the entry in the format of benchmarks/peers/make_peer_models.py (bench_peers.py --models-dir reads it)
    return dict(name=onnx_path.stem, file=onnx_path.name, set="paddle", exporter=exporter, opset=opset,
                inputs=[i for i in inputs if i["name"] in {x.name for x in m.graph.input}],
                kinds=["transformer", "bert"], model_type="bert", num_heads=cfg["heads"], hidden_size=cfg["hidden"],
                layers=cfg["layers"], seq=cfg["seq"][:1], max_abs_err=check(model, onnx_path, cfg, masked))


def check(model, onnx_path: Path, cfg: dict, masked: bool):
    """Largest |paddle - ONNX Runtime| over two (batch, seq) points, with padding; None without onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import paddle
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    rng = np.random.default_rng(SEED)
    worst = 0.0
    for batch, seq in [(1, cfg["seq"][0]), (2, cfg["seq"][1])]:
        ids = rng.integers(0, cfg["vocab"], size=(batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq - max(1, seq // 4):] = 0
        feeds = [ids, mask] if masked else [ids]
        want = model(*[paddle.to_tensor(a) for a in feeds]).numpy()
        got = sess.run(None, dict(zip(names, feeds)))[0]
        worst = max(worst, float(np.abs(want - got).max()))
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=None, help="output folder (default ~/.cache/taso_tvm/paddle)")
    ap.add_argument("--only", action="append", choices=sorted(MODELS), help="export only these (repeatable)")
    ap.add_argument("--no-mask", action="store_true", help="export without the attention_mask input")
    ap.add_argument("--opset", type=int, default=17, help="ONNX opset (13-17; default 17)")
    args = ap.parse_args(argv)
    out = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    entries = {e["name"]: e for e in old.get("models", [])} if isinstance(old.get("models"), list) else {}
    for name in args.only or list(MODELS):
        entry = export(name, MODELS[name], out, not args.no_mask, args.opset)
        entries[entry["name"]] = entry
        print(f"{entry['name']}: {out / entry['file']} max|paddle-ort|={entry['max_abs_err']}", flush=True)
    manifest_path.write_text(json.dumps({"models": list(entries.values())}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
