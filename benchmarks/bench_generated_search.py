"""Do generated rules make the search's results better? The shipped library alone against the library plus a
generated rule file, on the zoo models (and the committed real models).

    python benchmarks/bench_generated_search.py --rules GENERATED.yaml [--matching] [--search]
        [--models squeezenet nasrnn ...] [--real] [--backend analytic|ort] [--time-cap 6]

`--matching`: the time of one `RuleSet.matches` on whole zoo graphs (resnet50, inception_v3, bert, nasrnn) with
the library, with library + generated (indexed by operator, inputs refused by rank at bind, as the search uses it),
and with library + generated tried rule by rule to the end (no index, no early rank check: the matcher before);
the matches must be the same either way.

`--search`: each model goes through the ONNX optimizer (`optimize_onnx`, as `taso-tvm optimize` runs it: region
search, per-region numeric checks, whole-model check) with either rule set, without its own timing gate; then
ONNX Runtime times the original and both results by single runs alternating in random order
(`taso_tvm.runtime.timing.compare`). Reported: predicted cost before/after, search seconds, rules applied (the generated
ones listed), median latencies, and each result's ratio to the original with its confidence interval.

Zoo models run at reduced sizes (SIZES) so the whole run stays within minutes on two cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

# reduced zoo models: the same structure, smaller images / sequences / layer counts
SIZES = {
    "squeezenet": dict(image_size=64),
    "resnet50": dict(layers=(1, 1, 1, 1), image_size=64),
    "resnext50": dict(layers=(1, 1, 1, 1), image_size=64),
    "inception_v3": dict(image_size=107),
    "nasnet_a": dict(normal_cells=1, stages=2, channels=32, image_size=64),
    "nasrnn": dict(steps=3, hidden=256),
    "bert": dict(layers=2, seq_len=32, hidden=128, heads=4, ffn=512),
    "seed_example": dict(channels=32, size=28),
}
MATCH_MODELS = ["resnet50", "inception_v3", "bert", "nasrnn"]


def _graph(name: str, full: bool):
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function

    kw = {} if full else SIZES.get(name, {})
    blocks = lift_function(load_onnx(zoo.get_model(name, **kw))["main"])
    return blocks[0].graph


def _key(pairs: list) -> list:
    return [(r.name, tuple(sorted(m.nodes.items())), tuple(sorted(m.tensors.items()))) for r, m in pairs]


def bench_matching(library, both, models: list, repeat: int) -> None:
    from taso_tvm.rules import graph_index
    from taso_tvm.rules.matching import matcher
    from taso_tvm.rules.matching.matcher import every_match

    print(f"\nmatching: one RuleSet.matches per graph (a fresh graph index each time), best of {repeat} (ms); "
          f"tried = rules whose operators all occur in the graph (as often as in their patterns)")
    print(f"{'model':14s} {'ops':>5s} {'library':>9s} {'+gen idx':>9s} {'+gen all':>9s} {'tried':>10s} "
          f"{'matches':>8s} {'gen':>5s}")
    for name in models:
        g = _graph(name, full=True)
        index = graph_index(g)

        def unindexed():  # the matcher before the index: every rule, ranks checked only by `where` at the end
            return every_match(both.rules, g, index)

        rows = {}
        for label, fn in (("lib", lambda: library.matches(g)), ("idx", lambda: both.matches(g)),
                          ("all", unindexed)):
            best, out = float("inf"), None
            for _ in range(repeat):
                matcher._INDEX_CACHE.clear()  # a fresh graph index each time, as every new graph of a search has
                index = graph_index(g)
                t = time.perf_counter()
                out = fn()
                best = min(best, time.perf_counter() - t)
            rows[label] = (best, out)
        assert _key(rows["idx"][1]) == _key(rows["all"][1]), f"{name}: the index changed the matches"
        tried = len(both.candidates({op: len(ids) for op, ids in index.by_op.items()}))
        gen = sum(r.family == "generated" for r, _ in rows["idx"][1])
        print(f"{name:14s} {g.num_ops:5d} {rows['lib'][0] * 1e3:9.1f} {rows['idx'][0] * 1e3:9.1f} "
              f"{rows['all'][0] * 1e3:9.1f} {tried:4d}/{len(both):<5d} {len(rows['idx'][1]):8d} {gen:5d}",
              flush=True)


def _models(names: list, real: bool) -> list:
    """[(label, ModelProto, inputs or None)]"""
    from taso_tvm import zoo

    out = [(n, zoo.get_model(n, **SIZES.get(n, {})), None) for n in names]
    if real:
        try:
            from real_models import committed_models, feeds
        except ImportError:
            return out
        for m in committed_models():
            out.append((f"real:{m.name}", m.load(), feeds(m.entry)))
    return out


def bench_search(library, both, models: list, backend: str, time_cap: float, threads: int) -> list:
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.onnx_opt.driver import feeds_at
    from taso_tvm.onnx_opt.prepare import make_binding
    from taso_tvm.runtime.timing import compare, ort_runner, ort_session

    gen_names = {r.name for r in both if r.name not in library}
    print(f"\nsearch ({backend} cost, default settings, optimize_onnx without its timing gate): library "
          f"{len(library)} rules vs library + {len(gen_names)} generated; ONNX Runtime {threads} threads, "
          f"single runs alternating in random order, <= {time_cap:g} s per model")
    head = (f"{'model':24s} {'cost before':>11s} {'library':>9s} {'+gen':>9s} {'lib s':>6s} {'+gen s':>6s} "
            f"{'orig ms':>8s} {'lib ms':>8s} {'+gen ms':>8s} {'lib/orig':>8s} {'gen/orig':>8s} {'gen/lib':>7s}")
    print(head)
    rows = []
    if models:  # warm up (imports, first builds) so that the first model's search times are comparable
        optimize_onnx(models[0][1], {"rules": library, "cost": backend}, inputs=models[0][2], check=False,
                      time_check=False)
    for label, proto, inputs in models:
        res = {}
        for tag, rules in (("lib", library), ("gen", both)):
            t = time.perf_counter()
            try:
                out, rep = optimize_onnx(proto, {"rules": rules, "cost": backend}, inputs=inputs, check=True,
                                         time_check=False)
            except Exception as e:  # noqa: BLE001 - one line per model that cannot be optimized
                print(f"{label:24s} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                break
            res[tag] = (out, rep, time.perf_counter() - t)
        if len(res) < 2:
            continue
        feeds = inputs if inputs is not None else feeds_at(proto, make_binding(proto, None), None, 0)
        runs = [ort_runner(ort_session(m, threads), feeds) for m in (proto, res["lib"][0], res["gen"][0])]
        tr = compare(*runs, names=["orig", "lib", "gen"], time_cap=time_cap, max_rounds=400, min_rounds=10)
        med = {lat.name: lat.median for lat in tr.latencies}
        (c0, c1), (_, c2) = res["lib"][1].cost, res["gen"][1].cost
        applied = res["gen"][1].rules_applied
        gen_used = {k: v for k, v in applied.items() if k in gen_names}
        same = res["lib"][0].SerializeToString() == res["gen"][0].SerializeToString()
        row = dict(model=label, cost_before=c0, cost_lib=c1, cost_gen=c2, s_lib=res["lib"][2], s_gen=res["gen"][2],
                   ms_orig=med["orig"] * 1e3, ms_lib=med["lib"] * 1e3, ms_gen=med["gen"] * 1e3,
                   r_lib=med["lib"] / med["orig"], r_gen=med["gen"] / med["orig"], r_gen_lib=med["gen"] / med["lib"],
                   same=same, gen_used=gen_used, rounds=tr.rounds,
                   lib_applied=dict(res["lib"][1].rules_applied), decision_gen=res["gen"][1].decision)
        rows.append(row)
        print(f"{label:24s} {c0:11.4g} {c1:9.4g} {c2:9.4g} {row['s_lib']:6.1f} {row['s_gen']:6.1f} "
              f"{row['ms_orig']:8.3f} {row['ms_lib']:8.3f} {row['ms_gen']:8.3f} {row['r_lib']:8.3f} "
              f"{row['r_gen']:8.3f} {row['r_gen_lib']:7.3f}  {'same model' if same else 'differs'}; "
              f"generated applied: {', '.join(f'{k} x{v}' for k, v in gen_used.items()) or '-'} "
              f"({tr.rounds} rounds)", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", required=True, nargs="+", help="generated rule file(s) to add to the library (a rule "
                    "in several files is taken once; only verified rules load)")
    ap.add_argument("--matching", action="store_true", help="time matching on whole zoo graphs")
    ap.add_argument("--search", action="store_true", help="search and time the results")
    ap.add_argument("--models", nargs="*", default=list(SIZES), help="zoo models for --search")
    ap.add_argument("--match-models", nargs="*", default=MATCH_MODELS, help="zoo models for --matching")
    ap.add_argument("--real", action="store_true", help="also the committed real models (tests/data/real_models)")
    ap.add_argument("--backend", default="analytic", help="cost backend (analytic, ort, tvm)")
    ap.add_argument("--time-cap", type=float, default=6.0, help="ONNX Runtime timing seconds per model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from taso_tvm.rules import RuleSet, load_rules, read_rule_files
    from taso_tvm.rules.verify.verdict import verify_rules

    t = time.perf_counter()
    library = load_rules()
    gen, seen = [], set(library.names)
    for path in args.rules:  # files of overlapping generator runs share rules: each name once
        for r in read_rule_files([path]):
            if r.name not in seen:
                seen.add(r.name)
                gen.append(r)
    verdicts = verify_rules(gen)
    both = RuleSet(list(library) + [r for r, v in zip(gen, verdicts) if v.ok])
    print(f"rules: library {len(library)}, library + generated {len(both)} (loaded and verified in "
          f"{time.perf_counter() - t:.1f} s)")
    if args.matching:
        bench_matching(library, both, args.match_models, args.repeat)
    if args.search:
        bench_search(library, both, _models(args.models, args.real), args.backend, args.time_cap, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
