"""Search on every zoo model at the default settings: time, predicted cost before/after, rules applied, and the
relaxed search (alpha 1.05) against a greedy one (alpha 1.0), side by side in one run.

    python benchmarks/bench_search.py [--backend analytic|tvm|ort] [--target llvm|cuda] [--models ...] [--light]

`--light` adds the nine ONNX "light" models (randomized weights) after the zoo models.

With a measuring backend, each model is searched twice and the second (warm-cache) run is reported; the issue's
bar is 10 s per model with a warm cache on 2 cores.

    python benchmarks/bench_search.py --compare [--set zoo real peers] [--backend analytic|ort] [--json F]
        [--rules GENERATED.yaml ...] [--peers NAME ...]

`--compare`: the backtracking search (default budget, and 10x) against the e-graph search, on the same graphs
with the same cost model: zoo models at their default sizes (the pass's blocks, weights folded), the committed
real models and the peers' transformers (`$TASO_TVM_PEER_MODELS`) as `optimize_onnx` cuts them into regions.
Costs are summed over a model's graphs; "eg greedy" / "eg ILP" are what the e-graph search returns with that
extraction alone, "e-graph" what it returns (the better of the two after its local refinement, never above the
input); "pred" is how far the kept extraction's e-node costs were from the cost model's cost of the graph.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

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
    ap.add_argument("--compare", action="store_true", help="backtracking against the e-graph search")
    ap.add_argument("--set", nargs="*", default=["zoo", "real"], choices=["zoo", "real", "peers"])
    ap.add_argument("--peers", nargs="*", default=None, help="peer model names (default: all in the manifest)")
    ap.add_argument("--rules", nargs="*", default=[], help="rule files added to the library (e.g. generated)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None, help="--compare: write the table as markdown")
    args = ap.parse_args()
    if args.compare:
        return main_compare(args)
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


# ------------------------------------------------------------------------------------------------------------------
# --compare: backtracking (default budget and 10x) against the e-graph search (greedy, ILP, kept)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PEERS_ENV = "TASO_TVM_PEER_MODELS"


@dataclass
class Graphs:
    """The graphs one model's search sees: the pass's blocks (zoo models) or the ONNX optimizer's regions."""

    label: str
    graphs: list
    note: str = ""


def zoo_graphs(names: list) -> list:
    from taso_tvm.graph import fold_weights

    out = []
    for name in names:
        blocks = lift_function(load_onnx(zoo.get_model(name))["main"])
        out.append(Graphs(name, [fold_weights(b.graph) for b in blocks if b.graph.num_ops]))
    return out


def onnx_graphs(entries: list, rules, cm) -> list:
    """The region graphs `optimize_onnx` searches (as `taso-tvm optimize` does), captured at the search call."""
    import onnx

    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.relay_pass import taso_pass

    out = []
    for label, path, shapes in entries:
        seen: list = []
        real = taso_pass.optimize_graph

        def capture(graph, *a, **k):
            seen.append(graph)
            return real(graph, *a, **k)

        taso_pass.optimize_graph = capture
        t = time.perf_counter()
        try:
            optimize_onnx(onnx.load(path), {"rules": rules, "cost": cm}, shapes=shapes, check=False,
                          time_check=False)
        except Exception as e:  # noqa: BLE001 - one line per model the optimizer cannot take
            print(f"{label}: not searched ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
            continue
        finally:
            taso_pass.optimize_graph = real
        out.append(Graphs(label, seen, f"{len(seen)} regions, optimize_onnx {time.perf_counter() - t:.0f} s"))
    return out


def real_entries() -> list:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from real_models import committed_models, dim_values, input_shape

    return [(f"real:{m.name}", str(m.path), {i["name"]: input_shape(i, dim_values(m.entry)[0])
                                            for i in m.entry["inputs"]}) for m in committed_models()]


def peer_entries(names: Optional[list]) -> list:
    import json

    folder = os.environ.get(PEERS_ENV, os.path.join(os.path.expanduser("~"), ".cache", "taso_tvm", "peer_models"))
    man = os.path.join(folder, "manifest.json")
    if not os.path.exists(man):
        print(f"no peer models in {folder} (benchmarks/peers/make_peer_models.py writes them)")
        return []
    out = []
    for e in json.load(open(man))["models"]:
        if names and e["name"] not in names:
            continue
        dims = {d: v[0] for d, v in e["dims"].items()}
        if "sequence" in dims and e.get("seq"):
            dims["sequence"] = e["seq"][0]
        shapes = {i["name"]: [d if isinstance(d, int) else dims[d] for d in i["shape"]] for i in e["inputs"]}
        out.append((f"peer:{e['name']}", os.path.join(folder, e["file"]), shapes))
    return out


def compare(model: Graphs, rules, cm, egraph_cfg) -> dict:
    from collections import Counter

    from taso_tvm.search.egraph import egraph_search

    row = dict(model=model.label, note=model.note, ops=0, before=0.0, bt=0.0, bt10=0.0, eg_greedy=0.0, eg_ilp=0.0,
               eg=0.0, s_bt=0.0, s_bt10=0.0, s_eg=0.0, predicted=0.0, actual=0.0, enodes=0, iterations=0)
    rules_bt, rules_eg, stops, ilp = Counter(), Counter(), Counter(), Counter()
    for g in model.graphs:
        row["ops"] += g.num_runtime_ops
        for key, budget in (("bt", SearchConfig.budget), ("bt10", 10 * SearchConfig.budget)):
            t = time.perf_counter()
            _, st = optimize_graph(g, rules, cm, SearchConfig(budget=budget))
            row["s_" + key] += time.perf_counter() - t
            row[key] += st.cost_after
            if key == "bt":
                rules_bt.update(st.rules_applied)
                row["before"] += st.cost_before
        t = time.perf_counter()
        _, st = egraph_search(g, rules, cm.graph_cost, egraph_cfg, prefetch=cm.prefetch)
        row["s_eg"] += time.perf_counter() - t
        rep = st.egraph
        row["eg"] += st.cost_after
        row["eg_greedy"] += min(st.cost_before, rep.greedy_cost)
        row["eg_ilp"] += min(st.cost_before, rep.ilp_cost if rep.ilp_cost == rep.ilp_cost else rep.greedy_cost)
        rules_eg.update(st.rules_applied)
        stops[rep.saturation.stop.value] += 1
        ilp[rep.ilp_status.split(" (")[0]] += 1
        row["enodes"] += rep.saturation.enodes
        row["iterations"] = max(row["iterations"], rep.saturation.iterations)
        if rep.predicted == rep.predicted:  # an extraction was kept: how far its e-node costs were off
            row["predicted"] += rep.predicted
            row["actual"] += st.cost_after
    row["rules_bt"], row["rules_eg"] = dict(rules_bt), dict(rules_eg)
    row["stops"], row["ilp"] = dict(stops), dict(ilp)
    return row


def _fmt_rules(r: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(r.items(), key=lambda kv: -kv[1])) or "-"


def print_row(r: dict) -> None:
    err = (r["predicted"] - r["actual"]) / r["actual"] * 100 if r["actual"] else float("nan")
    print(f"{r['model']:26s} {r['ops']:5d} {r['before']:10.4g} {r['bt']:10.4g} {r['bt10']:10.4g} "
          f"{r['eg_greedy']:10.4g} {r['eg_ilp']:10.4g} {r['eg']:10.4g} {100 * (r['eg'] / r['bt'] - 1):+7.2f}% "
          f"{r['s_bt']:7.2f} {r['s_bt10']:7.2f} {r['s_eg']:7.2f} {err:+6.2f}% {r['enodes']:7d} "
          f"{'/'.join(f'{k}' for k in r['stops'])}", flush=True)
    print(f"{'':26s} rules: backtracking {_fmt_rules(r['rules_bt'])}; e-graph {_fmt_rules(r['rules_eg'])}",
          flush=True)


def main_compare(args) -> None:
    import json

    from taso_tvm.search.egraph import EGraphConfig

    rules = load_rules(["library", *args.rules]) if args.rules else load_rules()
    print(f"rules: {len(rules)}; backend {args.backend}; e-graph {EGraphConfig()}")
    rows = []
    with CostModel(load_cost_config(backend=args.backend, target=args.target)) as cm:
        sets = []
        if "zoo" in args.set:
            sets += zoo_graphs(args.models)
        if "real" in args.set:
            sets += onnx_graphs(real_entries(), rules, cm)
        if "peers" in args.set:
            sets += onnx_graphs(peer_entries(args.peers), rules, cm)
        print(f"{'model':26s} {'ops':>5s} {'before':>10s} {'bt':>10s} {'bt 10x':>10s} {'eg greedy':>10s} "
              f"{'eg ILP':>10s} {'e-graph':>10s} {'eg/bt':>8s} {'s bt':>7s} {'s bt10x':>7s} {'s eg':>7s} "
              f"{'pred':>7s} {'e-nodes':>7s} stop")
        for m in sets:
            if args.backend != "analytic":  # measured kernels: a cold pass first, the warm one is reported
                compare(m, rules, cm, EGraphConfig())
            r = compare(m, rules, cm, EGraphConfig())
            rows.append(r)
            print_row(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown_table(rows))


def markdown_table(rows: list) -> str:
    """The comparison as a markdown table (costs in the cost model's ms, summed over a model's graphs)."""
    head = ("| model | ops | cost before | backtrack | backtrack 10x | e-graph greedy | e-graph ILP | e-graph | "
            "e-graph vs backtrack | s backtrack | s 10x | s e-graph | e-nodes | prediction error | rules applied: "
            "backtrack / e-graph |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        err = (r["predicted"] - r["actual"]) / r["actual"] * 100 if r["actual"] else float("nan")
        rel = (r["eg"] / r["bt"] - 1) * 100 if r["bt"] else float("nan")
        lines.append(f"| {r['model']} | {r['ops']} | {r['before']:.6g} | {r['bt']:.6g} | {r['bt10']:.6g} | "
                     f"{r['eg_greedy']:.6g} | {r['eg_ilp']:.6g} | {r['eg']:.6g} | {rel:+.4f} % | {r['s_bt']:.2f} | "
                     f"{r['s_bt10']:.2f} | {r['s_eg']:.2f} | {r['enodes']} | "
                     f"{'-' if err != err else f'{err:+.2f} %'} | {_fmt_rules(r['rules_bt'])} / "
                     f"{_fmt_rules(r['rules_eg'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
