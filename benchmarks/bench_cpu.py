"""TVM CPU builds with the schedule pass (no tuning, no graph search) against ONNX Runtime, on the zoo.

Each model is built with the "taso-schedule" Relax pipeline for the host CPU (llvm, host mcpu), checked against
ONNX Runtime (relative to the output's scale), then timed against ONNX Runtime (same thread count, all graph
optimizations) with the project's timing helper: single runs alternating in random order, per-round ratios.
Prints one row per model, then the geometric mean and the worst ratio TVM / ORT, the threads TVM used and the
machine's load average (the machine may be shared: say under what load the numbers were taken).

    python benchmarks/bench_cpu.py [--models resnet50,bert] [--threads 2] [--time-cap 20] [--bert-layers 12]
                                   [--no-spin] [--json out.json]
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

ZOO = ["squeezenet", "resnet50", "resnext50", "inception_v3", "nasnet_a", "bert", "nasrnn", "seed_example"]


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def bench_model(name: str, model, threads: int, time_cap: float, target, spin: bool = True) -> dict:
    import tvm

    from taso_tvm.runtime import timing
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.schedule import CpuSchedule, schedule_pipeline

    feeds = zoo.random_inputs(model)
    mod = load_onnx(model)
    sched = CpuSchedule(target)
    t0 = time.perf_counter()
    ex = tvm.compile(mod, target=target, relax_pipeline=schedule_pipeline(target, sched))
    build_s = time.perf_counter() - t0
    args = list(feeds.values())
    tvm_run = timing.vm_runner(ex, args)
    out = tvm_run()
    got = (out.numpy() if hasattr(out, "numpy") else out[0].numpy())
    sess = timing.ort_session(model, threads, spin=spin)
    want = sess.run(None, feeds)[0]
    err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12))
    res = timing.compare(timing.ort_runner(sess, feeds), tvm_run, names=("ort", "tvm"), time_cap=time_cap)
    return {"model": name, "ort_ms": res.median_a * 1e3, "tvm_ms": res.median_b * 1e3, "ratio": res.ratio,
            "ci": list(res.ci), "rounds": res.rounds, "build_s": build_s, "rel_err": err,
            "rules": dict(sched.report.rules), "fallback": list(sched.report.fallback)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated zoo names; default all")
    p.add_argument("--threads", type=int, default=2, help="threads for TVM and ONNX Runtime (default 2)")
    p.add_argument("--time-cap", type=float, default=20.0, help="seconds of timing per model")
    p.add_argument("--bert-layers", type=int, default=12)
    p.add_argument("--json", help="write the rows as JSON")
    p.add_argument("--no-spin", action="store_true",
                   help="neither thread pool spins after a run (ORT allow_spinning=0, TVM_THREAD_POOL_SPIN_COUNT=0): "
                        "with runs interleaved on few cores, one runtime's spinning threads slow the other's start")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    if args.no_spin:
        os.environ["TVM_THREAD_POOL_SPIN_COUNT"] = "0"  # read when the pool starts
    from taso_tvm.schedule import set_num_threads

    used = set_num_threads(args.threads)  # before the first TVM run: the pool is sized once
    import tvm

    from taso_tvm import zoo

    target = tvm.target.Target.from_device(tvm.cpu())
    names = args.models.split(",") if args.models else ZOO
    print(f"target {target}; TVM threads {used}, ORT threads {args.threads}"
          f"{'; thread pools not spinning' if args.no_spin else ''}; load before: {_load()}")
    print(f"{'model':14s} {'ORT ms':>9s} {'TVM ms':>9s} {'TVM/ORT':>8s} {'95% CI':>15s} {'build s':>8s} "
          f"{'rel err':>9s}")
    rows = []
    for name in names:
        kwargs = {"layers": args.bert_layers} if name == "bert" else {}
        r = bench_model(name, zoo.get_model(name, **kwargs), args.threads, args.time_cap, target, not args.no_spin)
        rows.append(r)
        print(f"{name:14s} {r['ort_ms']:9.2f} {r['tvm_ms']:9.2f} {r['ratio']:8.3f} "
              f"[{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] {r['build_s']:8.1f} {r['rel_err']:9.1e}"
              + (f"  fallback: {r['fallback']}" if r["fallback"] else ""), flush=True)
    ratios = [r["ratio"] for r in rows]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"geometric mean TVM/ORT {geo:.3f}; worst {worst['ratio']:.3f} ({worst['model']}); "
          f"TVM threads {used}; load after: {_load()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "geomean": geo, "threads": used, "target": str(target)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
