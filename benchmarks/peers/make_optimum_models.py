"""Export decoder LLMs the way Hugging Face optimum does (`optimum-cli export onnx --task text-generation-with-past`:
torch's TorchScript exporter, one graph for prefill and decode), for the tests and the decoder benchmark.

The graph takes input_ids, attention_mask [batch, past_sequence_length + sequence_length], position_ids [batch,
sequence_length] (each row's own positions: a left-padded row starts later) and past_key_values.{i}.key / .value
[batch, kv_heads, past_sequence_length, head_dim], and gives logits and present.{i}.key / .value. Its forms differ from
the dynamo exports' (`make_decoder_models.py`): every RMS norm's input and output cast to float32, the rotary tables
scaled by an attention_scaling of 1 and computed per batch row from position_ids, each layer's mask sliced to the key
length read from the repeated keys' shape, the query and key each scaled by the square root of the softmax scale.

The model is the family's of `make_decoder_models.py` (its config, tiny or at the benchmark's depth, the same seeded
weights spread as trained), saved as a checkpoint into a temporary folder and exported by optimum-cli; the file is
checked in ONNX Runtime against torch: a prefill at batch 2, sequence 7, the second row left-padded by 2 (positions
from the mask, as generation computes them), then one decode step from its presents, logits and presents within
1e-4. It needs torch, transformers, optimum-onnx and onnxruntime, which the project does not depend on:

    python3 -m venv /tmp/venv-optimum && /tmp/venv-optimum/bin/pip install optimum-onnx onnxruntime
    /tmp/venv-optimum/bin/python benchmarks/peers/make_optimum_models.py [--family llama] [--set tiny|full] [--out DIR]

`--set tiny` (default) writes `{family}_optimum_tiny.onnx` into tests/data/decoders with its weights inline; `--set
full` writes `{family}_optimum.onnx` (and its `.data`) into the decoder models' folder.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from make_decoder_models import FAMILIES, TINY, Spec, _causal_lm, _config, default_out  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4


def export(family: str, tiny: bool, out: Path) -> Path:
    """The family's optimum export written to `out`; its path."""
    import onnx

    model = _causal_lm(Spec(family, "optimum", _config(family, tiny), False, tiny))
    name = f"{family}_optimum{'_tiny' if tiny else ''}.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, dst = Path(tmp) / "checkpoint", Path(tmp) / "onnx"
        model.save_pretrained(ckpt)
        cli = shutil.which("optimum-cli", path=str(Path(sys.executable).parent)) or "optimum-cli"
        subprocess.run([cli, "export", "onnx", "--model", str(ckpt), "--task", "text-generation-with-past",
                        str(dst)], check=True)
        proto = onnx.load(str(dst / "model.onnx"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    onnx.save(proto, str(path), save_as_external_data=not tiny, location=f"{name}.data")
    check(model, path)
    return path


def check(model, path: Path) -> None:
    """ONNX Runtime against torch: a left-padded prefill, then a decode step from its presents."""
    import onnxruntime as ort
    import torch
    from transformers import DynamicCache

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cfg = model.config
    layers, kv = cfg.num_hidden_layers, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (2, 7)).astype(np.int64)
    mask = np.ones((2, 7), np.int64)
    mask[1, :2] = 0
    pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    for i in range(layers):
        for k in ("key", "value"):
            feeds[f"past_key_values.{i}.{k}"] = np.zeros((2, kv, 0, hd), np.float32)
    outs = [o.name for o in sess.get_outputs()]
    got = dict(zip(outs, sess.run(outs, feeds)))
    with torch.no_grad():
        o = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  position_ids=torch.from_numpy(pos), past_key_values=DynamicCache(config=cfg), use_cache=True)
    keep = mask.astype(bool)
    worst = float(np.abs(got["logits"][keep] - o.logits.numpy()[keep]).max())
    nxt = rng.integers(0, cfg.vocab_size, (2, 1)).astype(np.int64)
    mask2 = np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1)
    feeds = {"input_ids": nxt, "attention_mask": mask2, "position_ids": pos[:, -1:] + 1}
    for i in range(layers):
        for k in ("key", "value"):
            feeds[f"past_key_values.{i}.{k}"] = got[f"present.{i}.{k}"]
    got2 = dict(zip(outs, sess.run(outs, feeds)))
    with torch.no_grad():
        o2 = model(input_ids=torch.from_numpy(nxt), attention_mask=torch.from_numpy(mask2),
                   position_ids=torch.from_numpy(pos[:, -1:] + 1), past_key_values=o.past_key_values, use_cache=True)
    worst = max(worst, float(np.abs(got2["logits"] - o2.logits.numpy()).max()))
    print(f"{path.name}: max |ORT - torch| {worst:.3g} (prefill left-padded, then a decode step)", flush=True)
    if not worst <= TOL:
        raise SystemExit(f"{path.name}: ONNX Runtime differs from torch by {worst:.3g} (over {TOL})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="llama", choices=sorted(FAMILIES))
    p.add_argument("--set", choices=["tiny", "full"], default="tiny")
    p.add_argument("--out", type=Path, help="default: tests/data/decoders (tiny), the decoder models' folder (full)")
    a = p.parse_args(argv)
    tiny = a.set == "tiny"
    out = a.out or (ROOT / "tests" / "data" / "decoders" if tiny else default_out())
    print(f"wrote {export(a.family, tiny, out)} ({TINY['hidden_size'] if tiny else 'full'} hidden)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
