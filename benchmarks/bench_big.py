"""Big models with external data: `taso-tvm optimize` on BERT-large (24 layers, hidden 1024; 1.3 GB) and a GPT-2
with >= 2.5 GB of weights (36 layers, hidden 1280: gpt2-large's shape, 3.1 GB; its blocks written out in torch), random
weights, exported by torch with external data. Each runs from another folder into a third one; the bench reports wall time and peak resident
memory per phase (the command's own `phase` log lines) and for the whole run, then loads the output in ONNX
Runtime from yet another folder and compares it with the original.

    python benchmarks/bench_big.py [--models bert_large,gpt2_big] [--torch-python PY] [--json out.json]
                                   [--time-limit S] [-- extra optimize flags]

Exporting needs torch and transformers, which the project does not depend on: give a Python that has them with
--torch-python (or $TASO_TVM_TORCH_PYTHON). Exports go to ~/.cache/taso_tvm/big_models/NAME/ (never into the
repository) and are reused. Goal: peak memory <= 3x the model's size, <= 10 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "taso_tvm", "big_models")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 128  # tokens in the export's example input (the sequence dim stays symbolic)

MODELS = {
    "bert_large": dict(kind="bert", hidden=1024, layers=24, heads=16, intermediate=4096),
    "gpt2_big": dict(kind="gpt2", hidden=1280, layers=36, heads=20),
}

EXPORT = r'''
import json, os, sys, torch
spec, out, raw = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(0)
if spec["kind"] == "bert":
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=spec["hidden"], num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                     intermediate_size=spec["intermediate"], attn_implementation="eager")
    model = BertModel(cfg).eval()
    names = ["input_ids", "attention_mask"]
    args = (torch.randint(0, 1000, (1, %(seq)d)), torch.ones(1, %(seq)d, dtype=torch.int64))
else:  # GPT-2's blocks written out (transformers' mask code does not trace with the TorchScript exporter)
    sys.path.insert(0, spec["peers_dir"])
    from gpt2_blocks import GPT2
    model = GPT2(spec["hidden"], spec["layers"], spec["heads"]).eval()
    names = ["input_ids"]
    args = (torch.randint(0, 1000, (1, %(seq)d)),)
dims = {n: {0: "batch", 1: "sequence"} for n in names}
with torch.no_grad():
    torch.onnx.export(model, args, raw, input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes=dict(dims, last_hidden_state={0: "batch", 1: "sequence"}), opset_version=17,
                      dynamo=False)
import onnx
m = onnx.load(raw)
onnx.save_model(m, out, save_as_external_data=True, location="model.data", size_threshold=1024)
print(sum(p.numel() for p in model.parameters()))
''' % {"seq": SEQ}


def export(name: str, python: str) -> str:
    """The model's path in the cache, exported first if it is not there."""
    folder = os.path.join(CACHE, name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path) and os.path.exists(os.path.join(folder, "model.data")):
        return path
    raw = os.path.join(folder, "raw")  # torch writes a file per weight past 2 GB: gathered into model.data
    os.makedirs(raw, exist_ok=True)
    t = time.monotonic()
    spec = dict(MODELS[name], peers_dir=os.path.join(ROOT, "benchmarks", "peers"))
    subprocess.run([python, "-c", EXPORT, json.dumps(spec), path, os.path.join(raw, "model.onnx")],
                   check=True)
    shutil.rmtree(raw)
    print(f"exported {name} in {time.monotonic() - t:.0f} s", flush=True)
    return path


def _model_bytes(path: str) -> int:
    folder = os.path.dirname(path)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


class _RssSampler(threading.Thread):
    """Peak resident memory of a process tree (the command and the workers it starts), sampled every 0.2 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, False

    def _tree_rss(self) -> int:
        total = 0
        for p in [self.pid] + self._children(self.pid):
            try:
                with open(f"/proc/{p}/status") as f:
                    total += next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0) * 1024
            except OSError:
                pass
        return total

    def _children(self, pid: int) -> list:
        out = []
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                for k in kids:
                    out += [k] + self._children(k)
        except OSError:
            pass
        return out

    def run(self) -> None:
        while not self.done:
            self.peak = max(self.peak, self._tree_rss())
            time.sleep(0.2)


def optimize(path: str, extra: list, work: str) -> dict:
    """Run `taso-tvm optimize` with `work`/cwd as the working directory, writing `work`/out/model.opt.onnx."""
    cwd, out_dir = os.path.join(work, "cwd"), os.path.join(work, "out")
    os.makedirs(cwd), os.makedirs(out_dir)
    out = os.path.join(out_dir, "model.opt.onnx")
    cmd = [sys.executable, "-m", "taso_tvm.cli", "-v", "optimize", os.path.relpath(path, cwd), "-o",
           os.path.relpath(out, cwd)] + extra
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = _RssSampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.done = True
    wall = time.monotonic() - t
    phases = [{"phase": m.group(1), "seconds": float(m.group(2)), "peak_rss_mb": float(m.group(3))}
              for m in re.finditer(r"phase (.+?): ([\d.]+) s, peak RSS (\d+) MB", stderr)]
    if proc.returncode != 0:
        print(stderr[-3000:], file=sys.stderr)
    return {"rc": proc.returncode, "wall_s": wall, "peak_rss_mb": sampler.peak / 2**20, "phases": phases,
            "summary": stdout.strip().splitlines()[-12:], "output": out}


def compare(original: str, optimized: str, work: str) -> float:
    """The largest difference between the two models' outputs in ONNX Runtime, both loaded from `work`."""
    import numpy as np
    import onnxruntime as ort

    here = os.getcwd()
    os.chdir(work)
    try:
        sessions = [ort.InferenceSession(p, providers=["CPUExecutionProvider"]) for p in (original, optimized)]
        rng = np.random.default_rng(0)
        feeds = {}
        for i in sessions[0].get_inputs():
            feeds[i.name] = (rng.integers(0, 1000, (1, SEQ)) if "ids" in i.name else np.ones((1, SEQ))
                             ).astype(np.int64)
        a, b = (s.run(None, feeds) for s in sessions)
        return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
    finally:
        os.chdir(here)


def markdown(results: list) -> str:
    """The results as the tables of `benchmarks/results/bench_big.md`: one row per model, then phases x models."""
    lines = ["# bench_big: big models with external data (2 cores, default optimize flags)", "",
             "`python benchmarks/bench_big.py --torch-python PY --json ... --md ...` (optimize run from another folder "
             "into a third; output loaded in ORT from a fourth).", "",
             "| model | size | wall | peak RSS | peak / size | max abs diff vs original |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['model_gb']:.2f} GB | {r['wall_s']:.0f} s | "
                     f"{r['peak_rss_mb'] / 1024:.2f} GB | {r['peak_over_size']:.2f}x | {r.get('max_abs_diff', 'n/a')} |")
    phases = list(dict.fromkeys(p["phase"] for r in results for p in r["phases"]))
    lines += ["", "Per phase (seconds, peak RSS of the phase in GB):", "",
              "| phase | " + " | ".join(r["model"] for r in results) + " |", "|---|" + "---|" * len(results)]
    for ph in phases:
        cells = []
        for r in results:
            p = next((p for p in r["phases"] if p["phase"] == ph), None)
            cells.append(f"{p['seconds']:.1f} s, {p['peak_rss_mb'] / 1024:.2f} GB" if p else "")
        lines.append(f"| {ph} | " + " | ".join(cells) + " |")
    lines += ["", "Goal: peak <= 3x the model, <= 10 minutes."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--torch-python", default=os.environ.get("TASO_TVM_TORCH_PYTHON", sys.executable))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--md", help="write the results as a markdown table here")
    ap.add_argument("--keep", action="store_true", help="keep the optimized models (in a temporary folder)")
    ap.add_argument("extra", nargs="*", help="more `optimize` flags, after --")
    args = ap.parse_args()
    results = []
    for name in args.models.split(","):
        path = export(name, args.torch_python)
        size = _model_bytes(path)
        work = tempfile.mkdtemp(prefix=f"bench_big_{name}_")
        try:
            r = optimize(path, args.extra, work)
            r.update(model=name, model_gb=size / 2**30)
            r["peak_over_size"] = r["peak_rss_mb"] * 2**20 / size
            if r["rc"] == 0:
                third = os.path.join(work, "third")
                os.makedirs(third)
                r["max_abs_diff"] = compare(path, r["output"], third)
            results.append(r)
            print(f"{name}: {size / 2**30:.2f} GB, rc {r['rc']}, {r['wall_s']:.0f} s, peak RSS "
                  f"{r['peak_rss_mb'] / 1024:.2f} GB ({r['peak_over_size']:.2f}x the model), max |diff| "
                  f"{r.get('max_abs_diff', float('nan')):.3g}", flush=True)
            for p in r["phases"]:
                print(f"    {p['phase']:16s} {p['seconds']:8.1f} s  {p['peak_rss_mb'] / 1024:6.2f} GB")
            for line in r["summary"]:
                print("    | " + line)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(results))
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
