"""Lift + lower speed on zoo models (issue: ResNet-50 under 0.3 s, BERT-base 12 layers under 2 s on 2 cores).

    python benchmarks/bench_lift_lower.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

from taso_tvm import load_onnx, zoo
from taso_tvm.relay_pass.lift import lift_function
from taso_tvm.relay_pass.rewrite import rewrite_module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", nargs="*", default=["resnet50", "bert", "inception_v3", "nasnet_a", "squeezenet"])
    args = ap.parse_args()
    print(f"{'model':14s} {'ops':>5s} {'lift ms':>9s} {'lift+lower ms':>14s}  (median of {args.repeat})")
    for name in args.models:
        mod = load_onnx(zoo.get_model(name, **({"layers": 12} if name == "bert" else {})))
        lift_t, both_t = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            blocks = lift_function(mod["main"])
            lift_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rewrite_module(mod)
            both_t.append(time.perf_counter() - t0)
        ops = sum(b.graph.num_ops for b in blocks)
        print(f"{name:14s} {ops:5d} {1e3 * statistics.median(lift_t):9.1f} {1e3 * statistics.median(both_t):14.1f}")


if __name__ == "__main__":
    main()
