"""ONNX files side by side in ONNX Runtime, in one alternating run: each file on random inputs of its own (its
symbolic dims bound by --dim, masks all ones), the first file the baseline. For files that compute the same thing
with different inputs (an export, taso-tvm's file of it, onnxruntime-genai's graph of the same checkpoint), where
`bench_decoders.py`'s rows, one run each, differ between runs by more than a change measures.

    python benchmarks/compare_files.py A.onnx B.onnx ... [--dim NAME=VALUE ...] [--rounds 2000] [--time-cap 100]

Prints each file's median latency and its latency over the first's (median of per-round ratios, 95 % interval:
below 1 is faster); 2 intra-op threads, spinning off.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--dim", action="append", default=[], help="NAME=VALUE: a symbolic dim's value (files lacking it "
                   "ignore it)")
    p.add_argument("--rounds", type=int, default=2000, help="alternating rounds at least (then --time-cap)")
    p.add_argument("--time-cap", type=float, default=100.0)
    a = p.parse_args(argv)
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in a.dim)}
    runners = [ort_runner(ort_session(f, threads=2, spin=False), feeds_of(f, dims)) for f in a.files]
    names = [f"{Path(f).parent.name}/{Path(f).name}" for f in a.files]
    res = compare(*runners, names=names, time_cap=a.time_cap, min_rounds=a.rounds, max_rounds=10 * a.rounds)
    print(res.summary().replace("; ", "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
