"""Search on every zoo model at the default settings: time, predicted cost before/after, rules applied, and the
relaxed search (alpha 1.05) against a greedy one (alpha 1.0), side by side in one run.

    python benchmarks/bench_search.py [--backend analytic|tvm|ort] [--target llvm|cuda] [--models ...] [--light]

`--light` adds the nine ONNX "light" models (randomized weights) after the zoo models.

With a measuring backend, each model is searched twice and the second (warm-cache) run is reported; the issue's
bar is 10 s per model with a warm cache on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import time

from taso_tvm import load_onnx, zoo
from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.relay_pass.lift import lift_function
from taso_tvm.rules import load_rules
from taso_tvm.search import SearchConfig, optimize_graph


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="analytic")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--region-size", type=int, default=None)
    ap.add_argument("--models", nargs="*", default=zoo.list_models())
    ap.add_argument("--light", action="store_true", help="also the nine ONNX light models")
    args = ap.parse_args()
    models = [(n, lambda n=n: zoo.get_model(n)) for n in args.models]
    if args.light:
        for path in zoo.light_models():
            name = os.path.basename(path)[:-len(".onnx")]
            models.append((name, lambda path=path: zoo.load_light(path)))
    t0 = time.perf_counter()
    rules = load_rules()
    print(f"rules: {len(rules)} loaded in {time.perf_counter() - t0:.2f} s")
    cfg = SearchConfig(**({"budget": args.budget} if args.budget else {}), **({"region_size": args.region_size} if args.region_size else {}))
    with CostModel(load_cost_config(backend=args.backend, target=args.target)) as cm:
        print(f"{'model':18s} {'ops':>9s} {'cost before':>12s} {'after':>10s} {'greedy':>10s} {'ratio':>6s} "
              f"{'search s':>9s} {'expanded':>8s}  rules applied")
        for name, model in models:
            g = lift_function(load_onnx(model())["main"])[0].graph
            if args.backend != "analytic":
                optimize_graph(g, rules, cm, cfg)  # cold: measures the kernels it meets
            t = time.perf_counter()
            best, st = optimize_graph(g, rules, cm, cfg)
            secs = time.perf_counter() - t
            _, greedy = optimize_graph(g, rules, cm, SearchConfig(alpha=1.0, budget=cfg.budget, region_size=cfg.region_size))
            applied = ", ".join(f"{k} x{v}" for k, v in st.rules_applied.most_common()) or "-"
            print(f"{name:18s} {st.ops_before:4d}>{st.ops_after:<4d} {st.cost_before:12.4g} {st.cost_after:10.4g} "
                  f"{greedy.cost_after:10.4g} {st.cost_after / st.cost_before:6.3f} {secs:9.2f} {st.expanded:8d}  "
                  f"{applied}", flush=True)


if __name__ == "__main__":
    main()
