"""The build commands of `taso-tvm`: compile and run, a thin face over the library (`taso_tvm.tvmc`: load,
compile, run): parse, call, print."""
from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from typing import Any

import numpy as np

from ..runtime.library import signature_path
from .common import CLIError, _tolerances, _writable, check_paths, parse_target, search_settings, setting_reads

log = logging.getLogger("taso_tvm")


def _summary(report: Any, out: str, seconds: float) -> str:
    tot = report.total
    lines = ["", f"{'':24s}{'before':>14s}{'after':>14s}"]
    if tot is None:
        lines.append("no dataflow block to optimize")
    else:
        lines.append(f"{'operators':24s}{tot.ops_before:14d}{tot.ops_after:14d}")
        lines.append(f"{'predicted cost':24s}{tot.cost_before:14.4g}{tot.cost_after:14.4g}")
        applied = Counter()
        for s in report.blocks:
            applied.update(s.rules_applied)
        lines.append(f"{'rules applied':24s}" + (", ".join(f"{k} x{v}" for k, v in applied.most_common())
                                                 or "none"))
        lines.append(f"{'search':24s}{tot.expanded} graphs expanded, {tot.seconds:.2f} s, stopped: "
                     f"{tot.stopped_by}")
        if tot.stopped_by == "time":
            lines.append("time limit reached: the best graph found so far was used")
    lines.append(f"{'total time':24s}{seconds:.2f} s")
    lines.append(f"written to {out}")
    return "\n".join(lines)


def cmd_compile(args: argparse.Namespace) -> int:
    from ..schedule.threads import request_threads

    t0 = time.monotonic()
    threads = request_threads(args.threads)  # before anything starts TVM's thread pool (it is sized once)
    check_paths([("the model", args.model)] + setting_reads(args),
                [("-o", args.output), ("the signature file", signature_path(args.output))])
    _writable(args.output)
    _tolerances(args)
    target = parse_target(args.target)
    from ..onnx_io import parse_shapes
    from ..tvmc import compile as compile_model

    settings = None if args.no_optimize else search_settings(args)
    shapes = parse_shapes(args.input_shapes) if args.input_shapes else None
    package = compile_model(args.model, target, optimize=not args.no_optimize, tune=args.tune, settings=settings,
                            shapes=shapes, threads=threads, schedule=not args.no_schedule, check=not args.no_check,
                            time_check=not args.no_time_check, time_cap=args.time_cap, rtol=args.rtol,
                            atol=args.atol, tuning_db=args.tuning_db)
    package.export(args.output)
    print(compile_summary(package.report, args.output, target, time.monotonic() - t0))
    return 0


def compile_summary(report: Any, out: str, target: Any, seconds: float) -> str:
    """The lines `compile` prints for the library's `CompileReport`."""
    lines = []
    if report.search is not None:
        lines.append(_summary(report.search, out, seconds))
        t = report.timing
        if t is not None:
            lines.append(f"{'latency (TVM, llvm)':24s}original {t.median_a * 1e3:.3f} ms, optimized "
                         f"{t.median_b * 1e3:.3f} ms: ratio {t.ratio:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}], "
                         f"{t.rounds} rounds ({t.verdict})")
        lines.append(f"{'written':24s}"
                     + (report.decision or ('the optimized module' if report.rewritten else 'no rewrite was found')))
    else:
        lines.append(f"written to {out}")
    if report.tuning is not None:
        lines.append(report.tuning.summary())
        t = report.tuning_timing
        if t is not None:
            lines.append(f"{'latency (tuned)':24s}untuned {t.median_a * 1e3:.3f} ms, tuned {t.median_b * 1e3:.3f} ms: "
                         f"ratio {t.ratio:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}], {t.rounds} rounds ({t.verdict})")
        lines.append(f"{'written':24s}{report.tuning_decision}")
    if target.kind.name == "llvm":
        lines.append(f"{'build':24s}{'CPU schedules' if report.schedule else 'TVM default pipeline'} for {target}; "
                     f"TVM runtime threads: {report.threads}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    from ..runtime.samples import read_sample
    from ..tvmc import Package, run

    outputs = None
    if args.outputs:
        outputs = args.outputs if args.outputs.endswith(".npz") else args.outputs + ".npz"
    check_paths([("the module", args.module), ("its signature file", signature_path(args.module)),
                 ("--inputs", args.inputs)], [("--outputs", outputs)])
    _writable(outputs)
    sample = read_sample(args.inputs) if args.inputs else None  # before loading any code
    if sample is not None:
        from ..runtime.samples import match_sample

        package = Package.load(args.module)
        sample = match_sample(sample, package.signature.inputs, f"inputs '{args.inputs}'")
    else:
        package = args.module
    result = run(package, sample, device=args.device, repeat=max(1, args.repeat) if args.print_time else 0,
                 threads=args.threads)
    for i, o in enumerate(result.outputs.values()):
        print(f"output {i}: shape {tuple(o.shape)} dtype {o.dtype} mean {float(np.mean(o)):.6g} "
              f"std {float(np.std(o)):.6g}")
    if outputs:
        result.save(outputs)
    if result.timing is not None:
        t = result.timing
        print(f"latency: median {t.median * 1e3:.3f} ms, mean {t.mean * 1e3:.3f} ms, std {t.std * 1e3:.3f} ms "
              f"({t.repeat} runs" + (f", {result.threads} TVM thread(s))" if result.threads else ")"))
    return 0


def _trials(text: str) -> int:
    """--tune's argument: a whole number of trials >= 0 (0: build with what the database holds)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of trials, not '{text}'") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"the number of trials must be >= 0, not {n}")
    return n
