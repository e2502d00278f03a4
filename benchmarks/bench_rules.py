"""Benchmark the rule library: cold verification (2 cores), warm (cached) loading, and matching on zoo models.

    python benchmarks/bench_rules.py [--jobs 2] [--models resnet50,squeezenet,bert]

Targets: cold verification < 60 s on 2 cores, warm load < 1 s, matching all rules on ResNet-50 < 50 ms.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _limit_cores(n: int) -> str:
    try:
        cores = sorted(os.sched_getaffinity(0))[:n]
        os.sched_setaffinity(0, cores)
        return f"pinned to cores {cores}"
    except (AttributeError, OSError):
        return "core pinning unavailable"


def bench_verify(jobs: int) -> None:
    from taso_tvm.rules import load_rules
    from taso_tvm.rules.language.compile import read_rule_files
    from taso_tvm.rules.ruleset import library_files
    from taso_tvm.rules.verify.verdict import Cache, load_axioms, verify_axioms, verify_rules
    from taso_tvm.rules.verify.results import tally

    rules = read_rule_files(library_files())
    cache = Cache()
    t = time.perf_counter()
    axioms, ax_res = verify_axioms(load_axioms(), jobs=jobs, cache=cache)
    t_ax = time.perf_counter() - t
    res = verify_rules(rules, jobs=jobs, axioms=axioms, cache=cache)
    cold = time.perf_counter() - t
    print(f"cold verification: {len(rules)} rules + {len(ax_res)} axioms in {cold:.1f} s with {jobs} processes "
          f"(axioms {t_ax:.1f} s); {tally(res)['verified']}/{len(rules)} rules verified, "
          f"{tally(ax_res)['verified']}/{len(ax_res)} axioms")
    by_method: dict = {}
    for r in res:
        for m in r.methods:
            by_method.setdefault(m.method, []).append(m)
    for name, ms in by_method.items():
        proven = sum(m.status == "proven" for m in ms)
        skipped = sum(m.status == "skipped" for m in ms)
        print(f"  {name}: {proven} proven, {skipped} not applicable, CPU {sum(m.time for m in ms):.1f} s")
    slow = sorted(res, key=lambda r: -r.time)[:5]
    print("  slowest: " + ", ".join(f"{r.rule} {r.time:.2f}s" for r in slow))
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        rs = load_rules(jobs=jobs)
        runs.append(time.perf_counter() - t)
    print(f"warm load (cached): {len(rs)} rules in {min(runs) * 1000:.0f} ms (median {statistics.median(runs) * 1000:.0f} ms)")


def bench_match(models: list) -> None:
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.rules import load_rules
    from taso_tvm.rules.matching.matcher import GraphIndex, find_matches

    rs = load_rules()
    for name in models:
        kw = {"layers": 12} if name == "bert" else {}
        g = lift_function(load_onnx(zoo.get_model(name, **kw))["main"])[0].graph
        [find_matches(r, g, index=GraphIndex(g)) for r in rs]  # warm-up (compiles the patterns)
        runs, cpu, count = [], [], 0
        for _ in range(10):
            t, c = time.perf_counter(), time.process_time()
            index = GraphIndex(g)  # precomputed once per graph, shared by all rules
            count = sum(len(find_matches(r, g, index=index)) for r in rs)
            runs.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        per = []
        index = GraphIndex(g)
        for r in rs:
            t = time.perf_counter()
            n = len(find_matches(r, g, index=index))
            per.append((time.perf_counter() - t, r.name, n))
        top = ", ".join(f"{n} {dt * 1000:.1f}ms" for dt, n, _ in sorted(per, reverse=True)[:3])
        print(f"match {name}: {len(g.topo_order())} nodes, {len(rs)} rules, {count} matches in "
              f"{statistics.median(runs) * 1000:.1f} ms wall (min {min(runs) * 1000:.1f}), "
              f"{statistics.median(cpu) * 1000:.1f} ms CPU; slowest rules: {top}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--models", default="resnet50,squeezenet,bert,inception_v3")
    ap.add_argument("--skip-verify", action="store_true")
    args = ap.parse_args(argv)
    print(_limit_cores(args.jobs), "; load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as d:
        os.environ["TASO_TVM_CACHE_DIR"] = d  # a cold cache
        if not args.skip_verify:
            bench_verify(args.jobs)
        if args.models:
            bench_match([m for m in args.models.split(",") if m])
    return 0


if __name__ == "__main__":
    sys.exit(main())
