"""Per-rule verification time (cold, no cache, one process): wall and CPU seconds of `verify_rule` per rule.

    python benchmarks/bench_verify_speed.py taso_tvm/rules/library/merge.yaml --filter conv2d
    python benchmarks/bench_verify_speed.py --generated 2 --ops conv2d,relu,add,concat,split \\
        --kinds act4,conv3x3,conv1x1 --filter conv2d --max 40 --save conv2.yaml

`--generated N` takes the generator's candidates of up to N operators (enumerated, paired, generalized, not
verified) instead of rule files; `--save` writes them for later runs. Prints one line per rule (status, wall, CPU
of this process, bounded instances, the seconds of each method) and a summary.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def generated_candidates(max_ops: int, ops: list, kinds: list) -> str:
    """The YAML text of the generator's candidates, its verification step skipped (benchmark use only)."""
    from taso_tvm.rules.generate import driver
    from taso_tvm.rules.generate.emit import entry_yaml

    texts: list = []

    def collect(s, entries, jobs, use_cache, counts, progress=None):
        texts.extend(entry_yaml(e, "candidate") for _c, e, _fb in entries)
        return []

    saved = driver._verify_entries
    driver._verify_entries = collect
    try:
        driver.generate_rules(max_ops, ops=ops, jobs=1, kinds=kinds or None, use_cache=False)
    finally:
        driver._verify_entries = saved
    return "\n".join(texts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--generated", type=int, default=0, metavar="N")
    ap.add_argument("--ops", default="")
    ap.add_argument("--kinds", default="")
    ap.add_argument("--filter", default="", help="only rules whose canonical text contains this")
    ap.add_argument("--max", type=int, default=0, help="at most this many rules")
    ap.add_argument("--save", default="")
    args = ap.parse_args()

    from taso_tvm.rules.language.compile import parse_rules
    from taso_tvm.rules.verify.verdict import load_axioms, verify_rule

    rules = []
    if args.generated:
        text = generated_candidates(args.generated, [o for o in args.ops.split(",") if o],
                                    [k for k in args.kinds.split(",") if k])
        if args.save:
            with open(args.save, "w") as f:
                f.write(text)
        rules += parse_rules(text, "<generated>")
    for path in args.files:
        with open(path) as f:
            rules += parse_rules(f.read(), path)
    rules = [r for r in rules if args.filter in r.canonical]
    if args.max:
        rules = rules[:args.max]
    if not rules:
        print("no rules", file=sys.stderr)
        return 1
    axioms = load_axioms()
    walls, cpus, statuses = [], [], {}
    for r in rules:
        t0, c0 = time.perf_counter(), time.process_time()
        res = verify_rule(r, axioms)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        walls.append(wall)
        cpus.append(cpu)
        statuses[res.status] = statuses.get(res.status, 0) + 1
        methods = " ".join(f"{m.method}:{m.status}:{m.time:.2f}" for m in res.methods)
        print(f"{r.name:40s} {res.status:9s} wall {wall:6.2f} s cpu {cpu:5.2f} s "
              f"instances {res.methods[0].instances:4d}  {methods}", flush=True)
    print(f"{len(rules)} rules {statuses}: wall total {sum(walls):.1f} s, median {statistics.median(walls):.2f}, "
          f"max {max(walls):.2f}; cpu total {sum(cpus):.1f} s, median {statistics.median(cpus):.2f}, "
          f"max {max(cpus):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
