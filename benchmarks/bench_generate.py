"""Benchmark the rule generator against TASO's shipped rule file.

    python benchmarks/bench_generate.py --max-ops 3 [--jobs 2] [--taso PATH] [--rules GENERATED.yaml] [--explain]

Runs `generate_rules` (or reads a generated file), then classifies each of TASO's substitutions (the decoded
text of its `graph_subst.pb`, e.g. ../shared/reference/taso_graph_subst.txt, read at run time and never copied):
*found* (one generated rule rewrites its source into its target), *subsumed* (a chain of generated rules does; the
chain is printed), *wrong* (source and target differ numerically: the counterexample is printed) or *missing*.
With --explain, each missing rule's cause: unproven, implied with unproven rules, not reached within the time
budget ("unverified"), or never a candidate (with the pool's reason where known).
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

TASO_FILE = "/work/shared/reference/taso_graph_subst.txt"
# TASO's generator gives every tensor of a rank one shape (a 4-D tensor is an activation or a 3x3 kernel alike:
# TASO convolves a tensor with itself); input -19 is a grouped-conv kernel (TASO infers groups from it)
SHAPES = {2: (4, 4), 4: (4, 4, 3, 3), "grouped": (4, 2, 3, 3)}


def _rank(rule_ops: list) -> int:
    return 4 if any(op == "CONV2D" or p.get("NUMDIM") == 4 for op, _a, p in rule_ops) else 2


def parse_taso(path: str) -> list:
    """[(rule number, src ops, dst ops, maps)] with ops = [(name, [(op, idx)], params)]."""
    rules, cur = [], None
    for line in open(path):
        line = line.strip()
        m = re.match(r"RULE (\d+)", line)
        if m:
            cur = (int(m.group(1)), [], [], [])
            rules.append(cur)
        elif line.startswith(("src", "dst")) and cur is not None:
            side, _k, rest = line.split(" ", 2)
            op = ast.literal_eval(rest)
            (cur[1] if side == "src" else cur[2]).append(op)
        elif line.startswith("map") and cur is not None:
            a = re.match(r"map src\((\d+),(\d+)\)->dst\((\d+),(\d+)\)", line)
            cur[3].append(tuple(int(x) for x in a.groups()))
    return rules


def build(store, ops: list, inputs: dict, rank: int) -> list:
    """Node output refs of one side, built in `store` (inputs shared between the sides through `inputs`)."""
    from taso_tvm.graph import TensorType

    outs: list = []
    parts: dict = {}  # ref -> {axis: sizes} of a concatenation (TASO's split cuts where its concat joined)

    def ref(i, j):
        if i < 0:
            if i not in inputs:
                inputs[i] = store.input(f"in{-i}", TensorType(SHAPES["grouped" if i == -19 else rank]))
            return inputs[i]
        return outs[i][j]

    for name, args, p in ops:
        a = [ref(i, j) for i, j in args]
        act = "relu" if p.get("ACTI") == 2 else "none"
        if name == "MATMUL":
            r = store.add("matmul", a, activation=act)
        elif name == "CONV2D":
            x, w = store.type(a[0]), store.type(a[1])
            r = store.add("conv2d", a, strides=(p["STRIDE_H"], p["STRIDE_W"]),
                          padding="SAME" if p["PAD"] == 0 else "VALID", groups=x.shape[1] // w.shape[1],
                          activation=act)
        elif name in ("EW_ADD", "EW_MUL"):
            r = store.add("add" if name == "EW_ADD" else "mul", a)
        elif name == "RELU":
            r = store.add("relu", a)
        elif name == "CONCAT":
            r = store.add("concat", a, axis=p["AXIS"])
            parts[r[0]] = {p["AXIS"]: [store.type(x).shape[p["AXIS"]] for x in a]}
        elif name == "SPLIT":
            n = store.type(a[0]).shape[p["AXIS"]]
            sizes = parts.get(a[0], {}).get(p["AXIS"]) or [n // 2, n - n // 2]
            r = store.add("split", a, axis=p["AXIS"], sizes=list(sizes))
        else:
            raise ValueError(f"unknown TASO operator {name}")
        # carry a concatenation's parts through element-wise operators and the rows/columns of matmul and conv
        if name in ("RELU", "EW_ADD", "EW_MUL") and a[0] in parts:
            parts[r[0]] = parts[a[0]]
        if name in ("MATMUL", "CONV2D") and a[1] in parts:
            ax = 1 if name == "MATMUL" else 0
            if ax in parts[a[1]]:
                parts[r[0]] = {1: parts[a[1]][ax]}
        if name in ("MATMUL", "CONV2D") and a[0] in parts and 0 in parts[a[0]]:
            parts.setdefault(r[0], {})[0] = parts[a[0]][0]
        outs.append(r)
    return outs


def taso_graphs(rule: tuple):
    from taso_tvm.graph import NodeStore, TensorGraph

    num, src, dst, maps = rule
    store = NodeStore()
    inputs: dict = {}
    rank = _rank(src + dst)
    s = build(store, src, inputs, rank)
    d = build(store, dst, inputs, rank)
    return (TensorGraph(store, [s[a][i] for a, i, _b, _j in maps]),
            TensorGraph(store, [d[b][j] for _a, _i, b, j in maps]), inputs)


def counterexample(g1, g2, inputs: dict):
    rng = np.random.default_rng(0)
    feeds = {g1.node(r[0]).attrs["name"]: rng.standard_normal(g1.type(r).shape).astype(np.float32)
             for r in inputs.values()}
    a, b = g1.evaluate(feeds), g2.evaluate(feeds)
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return f"shapes {x.shape} vs {y.shape}"
        if not np.allclose(x, y, rtol=1e-4, atol=1e-4):
            return f"max |difference| {float(np.abs(x - y).max()):.3g}"
    return None


def classify(rules, taso: list, max_steps: int) -> list:
    """Found (one rule), subsumed (a chain of rules from source to target, or failing that, rewriting source and
    target into one graph, rules over the same inputs used both ways), wrong, or missing."""
    from taso_tvm.rules.generate.coverage import rewrite_path
    from taso_tvm.rules.generate.derive import Deriver

    both = Deriver(src_steps=max_steps, dst_steps=max_steps, max_states=400)
    for r in rules:
        both.add(r)
    rows = []
    for rule in taso:
        try:
            src, dst, inputs = taso_graphs(rule)
        except Exception as err:  # noqa: BLE001  (a TASO graph our operators cannot express)
            rows.append((rule[0], "inexpressible", str(err)[:80]))
            continue
        ce = counterexample(src, dst, inputs)
        if ce:
            rows.append((rule[0], "wrong", ce))
            continue
        path = rewrite_path(rules, src, dst, max_steps=max_steps)
        if path is None:
            joined = both.derive(src, dst)
            if joined is not None:
                rows.append((rule[0], "subsumed", "both sides rewrite into one graph by " + " then ".join(joined)))
                continue
            rows.append((rule[0], "missing", ""))
        elif len(path) <= 1:
            rows.append((rule[0], "found", ", ".join(path)))
        else:
            rows.append((rule[0], "subsumed", " then ".join(path)))
    return rows


TASO_OPS = {"MATMUL": "matmul", "CONV2D": "conv2d", "EW_ADD": "add", "EW_MUL": "mul", "RELU": "relu",
            "CONCAT": "concat", "SPLIT": "split"}


def _outside_pool(rule: tuple) -> str:
    """Why the generator's pool cannot enumerate a TASO rule, or '' (TASO convolves a tensor with itself, and
    its input -19 is a grouped kernel; our pool keeps activations and kernels apart)."""
    _num, src, dst, _maps = rule
    for _name, args, _p in src + dst:
        if any(i == -19 for i, _j in args):
            return "outside the pool (a grouped kernel input, TASO's -19)"
    for name, args, _p in src + dst:
        if name == "CONV2D" and args[0] == args[1]:
            return "outside the pool (a tensor convolved with itself)"
    return ""


def explain_missing(res, rules: list, taso: list, rows: list, max_steps: int) -> dict:
    """Why each missing TASO rule is missing: the first verdict whose candidates, added to the generated rules,
    make it found or subsumed ("unproven", "implied_by_unproven": skipped as implied with unproven rules,
    "unverified": not reached within the time budget), else never a candidate (with the pool's reason where
    known). Only candidates over the operators of some missing rule are generalized (conv candidates take ~0.1 s
    each)."""
    from taso_tvm.rules.generate.emit import entry_yaml
    from taso_tvm.rules.generate.keep import Item, prepare
    from taso_tvm.rules.generate.pool import build_pool
    from taso_tvm.rules.language.rule import RuleError
    from taso_tvm.rules.language.compile import parse_rules

    missing = {n for n, s, _d in rows if s == "missing"}
    mt = [r for r in taso if r[0] in missing]
    opsets = {frozenset(TASO_OPS[o] for o, _a, _p in r[1] + r[2]) for r in mt}
    base = {v.name: v for v in build_pool(set(res.settings.kinds), res.settings.per_kind)}
    by_status: dict = {}
    for c, e, status in res.candidates:
        ops = frozenset(n.op for n in c.src + c.dst)
        if status in ("unproven", "implied_by_unproven", "unverified") and ops in opsets:
            by_status.setdefault(status, []).append((c, e))
    out: dict = {}
    extra: list = []
    for status in ("unproven", "implied_by_unproven", "unverified"):
        for c, e in by_status.get(status, []):
            if e is None:
                it = Item(c)
                try:
                    prepare(it, dict(base))
                except Exception:  # noqa: BLE001  (a candidate that does not generalize: not an explanation)
                    continue
                e = it.entry
            try:
                extra += parse_rules(entry_yaml(e, status), "<candidate>")
            except RuleError:
                continue
        left = [r for r in mt if r[0] not in out]
        for num, st, detail in classify(list(rules) + extra, left, max_steps):
            if st in ("found", "subsumed"):
                out[num] = (status, detail)
    for r in mt:
        out.setdefault(r[0], ("never_candidate", _outside_pool(r)))
    return out


def bench_search(generated: list, models: list) -> None:
    """The search on zoo models with the shipped library alone and with the generated rules added (analytic cost)."""
    from taso_tvm import load_onnx, zoo
    from taso_tvm.cost import CostModel, load_cost_config
    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.rules import RuleSet, load_rules
    from taso_tvm.search import SearchConfig, optimize_graph

    library = load_rules()
    both = RuleSet(list(library) + list(generated))
    print(f"\nsearch (analytic cost, default settings): library {len(library)} rules vs library + "
          f"{len(generated)} generated")
    print(f"{'model':14s} {'cost before':>12s} {'library':>10s} {'+generated':>10s} {'search s':>9s} "
          f"{'+gen s':>7s}  generated rules applied")
    with CostModel(load_cost_config(backend="analytic")) as cm:
        for name in models:
            g = lift_function(load_onnx(zoo.get_model(name))["main"])[0].graph
            t = time.perf_counter()
            _b1, s1 = optimize_graph(g, library, cm, SearchConfig())
            t1 = time.perf_counter() - t
            t = time.perf_counter()
            _b2, s2 = optimize_graph(g, both, cm, SearchConfig())
            t2 = time.perf_counter() - t
            gen = {r.name for r in generated}
            used = ", ".join(f"{k} x{v}" for k, v in s2.rules_applied.most_common() if k in gen) or "-"
            print(f"{name:14s} {s1.cost_before:12.4g} {s1.cost_after:10.4g} {s2.cost_after:10.4g} {t1:9.2f} "
                  f"{t2:7.2f}  {used}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ops", default=None, help="comma-separated operators (default: the generator's default)")
    ap.add_argument("--taso", default=TASO_FILE, help="TASO's rule file decoded to text")
    ap.add_argument("--rules", default=None, help="a generated rule file to classify against (skip generating)")
    ap.add_argument("--out", default="generated_rules.yaml", help="where to write the generated rules")
    ap.add_argument("--steps", type=int, default=2, help="rewrite steps allowed for 'subsumed'")
    ap.add_argument("--search", nargs="*", default=None, help="also run the search on these zoo models (none "
                                                              "given: all) with and without the generated rules")
    ap.add_argument("--no-taso", action="store_true", help="skip the comparison with TASO's rule file")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds for the whole generation (the rest "
                                                                     "is reported unverified)")
    ap.add_argument("--kinds", default=None, help="comma-separated input kinds (default: the generator's)")
    ap.add_argument("--explain", action="store_true", help="say why each missing TASO rule is missing (unproven, "
                                                            "implied with unproven rules, not reached, never a "
                                                            "candidate); needs a generation run, not --rules; "
                                                            "slow: generalizes the candidates left (minutes)")
    args = ap.parse_args()
    from taso_tvm.rules import read_rule_files
    from taso_tvm.rules.generate import generate_rules

    if args.rules is None:
        t0 = time.perf_counter()
        res = generate_rules(args.max_ops, ops=args.ops.split(",") if args.ops else None, jobs=args.jobs,
                             out=args.out, time_budget=args.time_budget,
                             kinds=args.kinds.split(",") if args.kinds else None)
        print(f"generated in {time.perf_counter() - t0:.1f} s ({res.settings.describe()}; load average "
              f"{os.getloadavg()[0]:.1f}):")
        for k, v in res.counts.items():
            print(f"  {k}: {v}")
        rules = res.rules
    else:
        rules = read_rule_files([args.rules])
    if args.search is not None:
        from taso_tvm import zoo
        bench_search(rules, args.search or zoo.list_models())
    if args.no_taso:
        return 0
    if not os.path.exists(args.taso):
        print(f"no TASO rule file at {args.taso}; skipping the comparison")
        return 0
    taso = parse_taso(args.taso)
    t0 = time.perf_counter()
    rows = classify(rules, taso, args.steps)
    for num, status, detail in rows:
        print(f"TASO rule {num:3d}: {status:13s} {detail}")
    tally = Counter(s for _n, s, _d in rows)
    print(f"\nTASO's {len(taso)} rules: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())) +
          f" ({time.perf_counter() - t0:.1f} s, {len(rules)} generated rules)")
    if args.explain and args.rules is None and tally.get("missing"):
        t0 = time.perf_counter()
        why = explain_missing(res, rules, taso, rows, args.steps)
        for num in sorted(why):
            cause, detail = why[num]
            print(f"missing TASO rule {num:3d}: {cause:20s} {detail}")
        print("missing by cause: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(c for c, _d in
                                                                                  why.values()).items())) +
              f" ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
