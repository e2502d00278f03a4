"""`taso-tvm rules verify [FILES]`, `taso-tvm rules list [FILES]` and `taso-tvm rules generate --max-ops N`: the rule
library from the command line.

`main(argv)` takes the arguments after `rules` (a leading "rules" is accepted too) and returns the exit status;
the `taso-tvm` console script delegates `taso-tvm rules ...` to it.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Optional, Sequence, TextIO

from ..rules.generate.driver import DEFAULT_TIME_BUDGET_S
from ..rules.language.rule import RuleError
from ..rules.language.compile import read_rule_files
from ..rules.ruleset import RuleSet, library_files
from .argtypes import OneLineParser, nonneg_float, nonneg_int, positive_int
from ..rules.verify.verdict import Cache, axioms_digest, load_axioms, rule_key, verify_axioms, verify_rules
from ..rules.verify.results import VerifyResult, tally


def _table(rows: list, headers: list, out: TextIO) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    widths[-1] = 0  # last column unpadded
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line.rstrip(), file=out)
    print("  ".join("-" * max(w, len(h)) for h, w in zip(headers, widths)), file=out)
    for r in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip(), file=out)


def _method_cell(res: VerifyResult) -> str:
    cells = []
    for m in res.methods:
        extra = f" ({m.instances})" if m.method == "bounded" and m.instances else ""
        cells.append(f"{m.method}: {m.status}{extra}")
    return ", ".join(cells)


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    files = args.files or library_files()
    rules = read_rule_files(files)
    t0 = time.perf_counter()
    cache = None if args.no_cache else Cache()
    axioms, ax_results = verify_axioms(load_axioms(), jobs=args.jobs, use_cache=not args.no_cache, cache=cache)
    results = verify_rules(rules, jobs=args.jobs, use_cache=not args.no_cache, axioms=axioms, cache=cache)
    total = time.perf_counter() - t0
    rows, failures = [], 0
    shown = list(zip(rules, results))
    if args.axioms:
        shown = list(zip(load_axioms(), ax_results)) + shown
    for rule, res in shown:
        expected = rule.expect
        ok = res.status == (expected or "verified")
        failures += not ok
        result = res.status + (" (expected)" if expected and ok else "") + (" [cached]" if res.cached else "")
        if res.ok:
            b = res.method("bounded")
            detail = f"{res.proof}; bounded: {b.coverage or b.detail}" if b else res.proof
        else:
            detail = res.reason()
        rows.append((rule.name, _method_cell(res), result, f"{res.time:.2f}s", detail))
    _table(rows, ["rule", "methods", "result", "time", "proof / counterexample / detail"], out)
    bad_axioms = len(ax_results) - tally(ax_results)["verified"]
    print(f"\n{len(rules)} rules, {len(rules) - failures if not args.axioms else len(shown) - failures} as expected, "
          f"{failures} not; {len(ax_results) - bad_axioms}/{len(ax_results)} axioms verified; {total:.2f}s",
          file=out)
    return 1 if failures or bad_axioms else 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    files = args.files or library_files()
    rules = read_rule_files(files)
    cache = Cache()
    ah = axioms_digest(load_axioms())
    rows = []
    for r in rules:
        hit = cache.get(rule_key(r, ah))
        status = hit.status if hit else "not verified yet"
        proof = (hit.proof or "-") if hit else ("bounded-only (declared)" if not r.verify.axiomatic else "-")
        src = ", ".join(n.op for n in r.source)
        tgt = ", ".join(n.op for n in r.target) or "(aliases)"
        rows.append((r.name, r.family, f"{src} -> {tgt}", status, proof, f"{r.file}:{r.line}"))
    _table(rows, ["rule", "family", "source -> target", "status", "proof", "where"], out)
    fams = RuleSet(rules).families()
    print(f"\n{len(rules)} rules: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(fams.items())), file=out)
    return 0


def cmd_generate(args: argparse.Namespace, out: TextIO) -> int:
    from ..progress import Progress
    from ..rules.generate import generate_rules

    def progress(total: int, desc: str) -> Progress:
        return Progress(total, desc, unit="items")

    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] if args.kinds else None
    budget = args.time_budget if args.time_budget and args.time_budget > 0 else None
    if args.output:
        from ..fileio import path_collision

        why = path_collision([], [("-o", args.output), ("--checkpoint", args.checkpoint or args.output + ".ckpt")])
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    try:
        res = generate_rules(args.max_ops, ops=ops, jobs=args.jobs, out=args.output, kinds=kinds,
                             checkpoint=args.checkpoint, seed=args.seed, progress=progress,
                             time_budget=budget, reverse=not args.no_reverse)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    c = res.counts
    default = " (the default)" if args.time_budget == DEFAULT_TIME_BUDGET_S else ""
    if not res.complete:
        resume = (f"the finished units are kept in {res.checkpoint}: the same command resumes there"
                  if res.checkpoint else "without -o nothing is kept")
        print(f"the time budget of {budget:g} s{default} ended the enumeration ({res.settings.describe()}) after "
              f"{c['units'] - c['units_left']} of {c['units']} units ({c['graphs']} graphs): nothing verified or "
              f"written; {resume}; --time-budget 0 runs without a limit", file=sys.stderr)
        return 1
    if args.output is None:
        out.write(res.text)
    left = c["unverified"]
    if budget is None:
        limit = "no time budget"
    elif left:
        limit = (f"the time budget of {budget:g} s{default} stopped the verification: {left} candidates left "
                 f"unverified, not written (a larger --time-budget, or 0 for none, goes further; verdicts are "
                 f"cached)")
    else:
        limit = f"within the time budget of {budget:g} s{default}"
    print(f"{c['verified']} verified rules ({res.settings.describe()}): {c['graphs']} graphs, "
          f"{c['candidates']} candidate pairs, {c['pruned_reverse_direction']} reverse directions, "
          f"{c['forward_derivable']} implied by kept rules, {c['forward_duplicate']} equal once generalized, "
          f"{c['refuted']} refuted, {c['unproven']} unproven, {left} left unverified; {limit}; "
          f"{c['t_total_s']} s (enumeration {c['t_enumerate_s']} s, pairing {c['t_pair_s']} s, verification "
          f"{c['t_verify_s']} s)"
          + (f"; written to {args.output}" if args.output else ""), file=sys.stderr if args.output is None else out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="taso-tvm rules", description="TASO substitution rules")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="prove rules with Z3 (bounded and axiomatic); exit 1 if any is not verified")
    v.add_argument("files", nargs="*", help="rule files or directories (default: the shipped library)")
    v.add_argument("--jobs", "-j", type=positive_int, default=None, help="parallel processes (default: all cores)")
    v.add_argument("--no-cache", action="store_true", help="ignore and do not update the result cache")
    v.add_argument("--axioms", action="store_true", help="also list the axioms and their results")
    v.set_defaults(fn=cmd_verify)
    ls = sub.add_parser("list", help="list rules with their cached verification status")
    ls.add_argument("files", nargs="*", help="rule files or directories (default: the shipped library)")
    ls.set_defaults(fn=cmd_list)
    g = sub.add_parser("generate", help="discover rules by enumerating small graphs (as TASO does); write the "
                                        "verified ones")
    g.add_argument("--max-ops", type=positive_int, required=True, help="operators per side, at most")
    g.add_argument("--ops", default=None, help="comma-separated operators (default: all the generator knows up to "
                                               "2 operators, TASO's seven from 3 on)")
    g.add_argument("--kinds", default=None, help="comma-separated input kinds (mat, act4, conv3x3, conv1x1, conv1x3, "
                                                 "conv3x1, dwconv, scalar, chan, row, batched)")
    g.add_argument("-o", "--output", default=None, help="the YAML rule file to write (default: standard output)")
    g.add_argument("--jobs", "-j", type=positive_int, default=2, help="worker processes (default: 2)")
    g.add_argument("--checkpoint", default=None, help="resume file (default: OUTPUT.ckpt; none without -o)")
    g.add_argument("--seed", type=nonneg_int, default=0, help="seed of the fingerprint inputs")
    g.add_argument("--time-budget", type=nonneg_float, default=DEFAULT_TIME_BUDGET_S, metavar="SECONDS",
                   help=f"time for the whole run (default: {DEFAULT_TIME_BUDGET_S:g} s; 0: no limit). Past it, "
                        "the verification stops (what is left is reported unverified, not written), or, if it is "
                        "still enumerating, the run stops with nothing written (with -o, the checkpoint resumes)")
    g.add_argument("--no-reverse", action="store_true", help="do not verify and write each kept rule's reverse")
    g.set_defaults(fn=cmd_generate)
    return p


def main(argv: Optional[Sequence[str]] = None, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "rules":  # called as `taso-tvm rules ...` with the sub-command name kept
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args, out)
    except RuleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
