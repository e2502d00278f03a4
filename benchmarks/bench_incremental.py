"""Incremental against from-scratch costing on the graphs a real search costs, side by side in one run.

    python benchmarks/bench_incremental.py [--models ...]

Each zoo model is searched at the default settings (analytic cost). Every candidate graph the search costs is
partitioned twice: by FuseOps on the whole graph (`Partitioner(split_components=False)`, memoizing per node as
the search did before) and component by component with the content-keyed memo (`Partitioner()`, what the
search uses); the kernels must agree. The node set of each candidate is likewise derived from its parent's
(`TensorGraph.replace`) and recomputed by a traversal. Prints medians per candidate and the ratios.
"""
from __future__ import annotations

import argparse
import statistics
import time

from taso_tvm import load_onnx, zoo
from taso_tvm.cost import CostModel, Partitioner, load_cost_config
from taso_tvm.graph import TensorGraph
from taso_tvm.relay_pass.lift import lift_function
from taso_tvm.rules import load_rules
from taso_tvm.search import optimize_graph


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=zoo.list_models())
    args = ap.parse_args()
    rules = load_rules()
    print(f"{'model':13s} {'graphs':>7s} {'whole us':>9s} {'split us':>9s} {'ratio':>6s} {'traverse us':>12s} "
          f"{'derived us':>11s} {'ratio':>6s}")
    with CostModel(load_cost_config(backend="analytic")) as cm:
        for name in args.models:
            g = lift_function(load_onnx(zoo.get_model(name))["main"])[0].graph
            whole, split = Partitioner(split_components=False), Partitioner()
            t_whole, t_split, t_trav, t_derived = [], [], [], []

            def cost(graph: TensorGraph) -> float:
                t0 = time.perf_counter()
                fresh = TensorGraph(graph.store, graph.outputs)
                ids = fresh.node_ids
                t1 = time.perf_counter()
                derived = graph.node_ids  # a rewrite's result carries it (computed inside replace)
                assert derived == ids
                a = whole.kernels(graph)
                t2 = time.perf_counter()
                b = split.kernels(graph)
                t3 = time.perf_counter()
                assert [(k.sig, k.nodes) for k in a] == [(k.sig, k.nodes) for k in b]
                t_trav.append(t1 - t0)
                t_whole.append(t2 - t1)
                t_split.append(t3 - t2)
                return cm.graph_cost(graph)

            orig = TensorGraph._derived_ids

            def timed(self, *a):
                t0 = time.perf_counter()
                out = orig(self, *a)
                t_derived.append(time.perf_counter() - t0)
                return out

            TensorGraph._derived_ids = timed  # the node-set step inside replace()
            try:
                optimize_graph(g, rules, cost)
            finally:
                TensorGraph._derived_ids = orig
            mw, ms = statistics.median(t_whole) * 1e6, statistics.median(t_split) * 1e6
            mt, md = statistics.median(t_trav) * 1e6, statistics.median(t_derived) * 1e6
            print(f"{name:13s} {len(t_whole):7d} {mw:9.0f} {ms:9.0f} {mw / ms:6.2f} {mt:12.0f} {md:11.0f} "
                  f"{mt / md:6.2f}", flush=True)


if __name__ == "__main__":
    main()
