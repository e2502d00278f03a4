"""The ONNX path end to end, on the zoo and the real-model set: optimize each model as `taso-tvm optimize` does
(cost backend auto = ONNX Runtime kernels, never-slower guard on), then time what it wrote against the original
in ONNX Runtime (2 threads, all graph optimizations on), single runs alternating in random order, in one run.

    python benchmarks/bench_onnx.py [--models squeezenet,bert,...] [--cost auto|analytic] [--time-cap 20]
                                    [--json out.json]

Real models come from tests/data/real_models (committed, small) and, when present, the cache that
benchmarks/real_models/make_real_models.py fills (full-size models and ONNX files shipped in pip packages).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

ZOO = ["squeezenet", "resnet50", "resnext50", "inception_v3", "nasnet_a", "bert", "nasrnn", "seed_example"]


def _models(selected):
    import real_models as rm
    from taso_tvm import zoo

    for name in ZOO:
        if not selected or name in selected:
            model = zoo.get_model(name)
            yield name, "zoo", model, None
    seen = set()
    for m in rm.committed_models() + rm.cache_manifest_models():
        label = f"{m.name}{'' if m.path.parent == rm.COMMITTED_DIR else ' (full)'}"
        if label in seen or (selected and m.name not in selected):
            continue
        seen.add(label)
        yield label, m.entry.get("exporter", {}).get("name", "?"), m.load(), m.entry


def _feeds(model, entry):
    import real_models as rm
    from taso_tvm.runtime.check import random_feeds

    return rm.feeds(entry) if entry is not None else random_feeds(model)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated names (zoo or real-model set); default all")
    p.add_argument("--cost", default="auto", help="cost backend for the search (default auto: ORT kernels)")
    p.add_argument("--time-cap", type=float, default=20.0, help="seconds per timing (guard and final timing)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the rows as JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.runtime.timing import compare_onnx

    selected = set(args.models.split(",")) if args.models else None
    rows = []
    print("| model | exporter | nodes | searched | rules applied | search s | written | original ms | output ms "
          "| speedup [95% CI] | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, exporter, model, entry in _models(selected):
        t0 = time.monotonic()
        out, rep = optimize_onnx(model, {"cost": args.cost}, time_check=True, time_cap=args.time_cap,
                                 threads=args.threads)
        seconds = time.monotonic() - t0
        row = {"model": name, "exporter": exporter, "nodes": rep.nodes, "searched": rep.share_searchable,
               "rules": dict(rep.rules_applied), "regions_accepted": len(rep.accepted), "seconds": seconds,
               "decision": rep.decision}
        if out is model:
            row.update(speedup=1.0, ci=[1.0, 1.0], rounds=0, original_ms=None, output_ms=None)
        else:
            res = compare_onnx(model, out, _feeds(model, entry), threads=args.threads, time_cap=args.time_cap)
            row.update(speedup=1.0 / res.ratio, ci=[1.0 / res.ci_high, 1.0 / res.ci_low], rounds=res.rounds,
                       original_ms=res.median_a * 1e3, output_ms=res.median_b * 1e3)
        rows.append(row)
        written = "optimized" if out is not model else "original"
        ms = (f"{row['original_ms']:.2f} | {row['output_ms']:.2f}" if row["original_ms"] is not None else "- | -")
        rules = ", ".join(f"{k} x{v}" for k, v in sorted(row["rules"].items(), key=lambda kv: -kv[1])[:3]) or "-"
        print(f"| {name} | {exporter} | {rep.nodes} | {100 * rep.share_searchable:.0f} % | {rules} | {seconds:.1f} "
              f"| {written} | {ms} | {row['speedup']:.3f} [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}] "
              f"| {row['rounds']} |", flush=True)
    geo = math.exp(float(np.mean([math.log(r["speedup"]) for r in rows]))) if rows else 1.0
    print(f"\ngeometric-mean speedup over {len(rows)} models: {geo:.3f}; "
          f"slower (CI above 1): {sum(r['ci'][1] < 1.0 for r in rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "geomean": geo}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
