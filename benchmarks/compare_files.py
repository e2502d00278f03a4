"""ONNX files side by side in ONNX Runtime, in one alternating run: each file on random inputs of its own (its
symbolic dims bound by --dim, masks all ones), the first file the baseline. For files that compute the same thing
with different inputs (an export, taso-tvm's file of it, onnxruntime-genai's graph of the same checkpoint), where
`bench_decoders.py`'s rows, one run each, differ between runs by more than a change measures.

    python benchmarks/compare_files.py A.onnx B.onnx ... [--dim NAME=VALUE ...] [--rounds 2000] [--time-cap 100]
    python benchmarks/compare_files.py A.onnx B.onnx ... --epochs 30 [--rounds 60]

Prints each file's median latency and its latency over the first's (median of per-round ratios, 95 % interval:
below 1 is faster); 2 intra-op threads, spinning off. `--epochs E`: where ONNX Runtime places a session's buffers
moves its runs by several % (sessions of one decoder file: medians up to 6.6 % apart), which one run of one session
per file cannot show; E epochs, each with fresh sessions of every file (made in a random order) and --rounds rounds
in a shuffled order each, the interval a bootstrap over the epochs, then their rounds.
"""
from __future__ import annotations

import argparse
import gc
import math
import random
import sys
from pathlib import Path

import numpy as np

from taso_tvm.onnx_io import read_onnx
from taso_tvm.runtime.check import random_feeds
from taso_tvm.runtime.timing import compare, ort_runner, ort_session


def feeds_of(path: str, dims: dict) -> dict:
    """Random inputs bound at `dims` (those of them the file has), every integer mask input all ones."""
    model, _ = read_onnx(path)
    params = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    feeds = random_feeds(model, dims={k: v for k, v in dims.items() if k in params}, seed=0)
    for k, v in feeds.items():
        if "mask" in k:
            v[...] = 1
    return feeds


def epochs(files: list, feeds: list, names: list, count: int, rounds: int, seed: int = 0) -> str:
    """Latencies over `count` epochs of fresh sessions, `rounds` shuffled rounds each (module docstring)."""
    rnd, times = random.Random(seed), np.zeros((len(files), count, rounds))
    for e in range(count):
        order = list(range(len(files)))
        rnd.shuffle(order)  # the sessions made in a random order
        made = {i: ort_runner(ort_session(files[i], threads=2, spin=False), feeds[i]) for i in order}
        res = compare(*[made[i] for i in range(len(files))], time_cap=math.inf, min_rounds=rounds, max_rounds=rounds,
                      seed=seed + e)
        times[:, e, :] = res.samples.T
        del made, res
        gc.collect()
    boot = np.random.default_rng(seed)
    picks = [(boot.integers(0, count, count), boot.integers(0, rounds, (count, rounds))) for _ in range(2000)]
    lines = [f"{names[0]}: median {np.median(times[0]) * 1e3:.3f} ms ({count} epochs x {rounds} rounds)"]
    for i in range(1, len(files)):
        ratio = times[i] / times[0]
        spread = [float(np.median(ratio[ee[:, None], rr])) for ee, rr in picks]
        per_epoch = np.median(ratio, axis=1)
        lines.append(f"{names[i]}: median {np.median(times[i]) * 1e3:.3f} ms, {np.median(ratio):.3f}x the first's "
                     f"[{np.percentile(spread, 2.5):.3f}, {np.percentile(spread, 97.5):.3f}] (epochs' medians "
                     f"{per_epoch.min():.3f} to {per_epoch.max():.3f})")
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--dim", action="append", default=[], help="NAME=VALUE: a symbolic dim's value (files lacking it "
                   "ignore it)")
    p.add_argument("--rounds", type=int, default=2000, help="alternating rounds at least (then --time-cap)")
    p.add_argument("--time-cap", type=float, default=100.0)
    p.add_argument("--epochs", type=int, default=0, help="epochs of fresh sessions, --rounds rounds each (docstring)")
    a = p.parse_args(argv)
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in a.dim)}
    names = [f"{Path(f).parent.name}/{Path(f).name}" for f in a.files]
    if a.epochs > 0:
        print(epochs(a.files, [feeds_of(f, dims) for f in a.files], names, a.epochs, a.rounds))
        return 0
    runners = [ort_runner(ort_session(f, threads=2, spin=False), feeds_of(f, dims)) for f in a.files]
    res = compare(*runners, names=names, time_cap=a.time_cap, min_rounds=a.rounds, max_rounds=10 * a.rounds)
    print(res.summary().replace("; ", "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
