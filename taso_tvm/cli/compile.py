"""The build commands of `taso-tvm`: compile (optimize and build an ONNX model into a TVM library, checked against
the original and timed) and run (a compiled module)."""
from __future__ import annotations

import argparse
import logging
import os
import time
from collections import Counter
from typing import Any, Optional

import numpy as np

from ..runtime.check import compare, random_feeds
from ..runtime.library import signature_path, write_library
from .common import (CLIError, _tolerances, _writable, check_paths, parse_target, read_model, search_settings,
                     setting_reads)

log = logging.getLogger("taso_tvm")


def _optimize_module(mod: Any, settings: dict) -> tuple[Any, Any]:
    from ..relay_pass.taso_pass import TasoOptimize

    p = TasoOptimize(**settings)
    return p(mod), p.report


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


def _import_for_tvm(proto: Any, shapes: Optional[dict]) -> Any:
    """load_onnx; if TVM's frontend refuses the file and its shapes are bound (static, or --input-shapes), fold
    the shape arithmetic with onnxsim at those shapes and import that instead."""
    from ..onnx_io import ModelLoadError, load_onnx
    from ..onnx_opt.prepare import fold_at, make_binding, symbolic_dims

    try:
        return load_onnx(proto, shapes=shapes)
    except ModelLoadError as first:
        if symbolic_dims(proto) and not shapes:
            dims = ", ".join(sorted(symbolic_dims(proto)))
            raise ModelLoadError(f"{first} (the model has symbolic dims {dims}: --input-shapes binds them)") from None
        folded, ok = fold_at(proto, make_binding(proto, shapes))
        if not ok:
            raise first from None
        try:
            mod = load_onnx(folded.model)
        except ModelLoadError:
            raise first from None
        log.warning("TVM's frontend needed the shape arithmetic folded at %s (onnxsim) to import this model",
                    folded.binding.label())
        return mod


def set_num_threads(n: int) -> int:
    """Set the TVM runtime's thread count (0: TVM's choice); the count in use, for the report."""
    from ..schedule import set_num_threads as _set

    return _set(n or None)


def cmd_compile(args: argparse.Namespace) -> int:
    import tvm
    from tvm import relax

    from ..onnx_io import parse_shapes
    from ..onnx_io.weights import inline

    t0 = time.monotonic()
    check_paths([("the model", args.model)] + setting_reads(args),
                [("-o", args.output), ("the signature file", signature_path(args.output))])
    _writable(args.output)
    _tolerances(args)
    target = parse_target(args.target)
    if args.tune is not None:
        _check_tune_args(args, target)
    elif args.tuning_db:
        raise CLIError("--tuning-db goes with --tune (--tune 0 builds with what the database holds)")
    threads = set_num_threads(args.threads)
    shapes = parse_shapes(args.input_shapes) if args.input_shapes else None
    proto = inline(read_model(args.model)[0])  # TVM holds the weights as constants anyway
    mod = _import_for_tvm(proto, shapes)
    report = None
    if not args.no_optimize:
        settings = search_settings(args)
        settings["target"] = target
        new_mod, report = _optimize_module(mod, settings)
    else:
        new_mod = mod
    pipeline = build_pipeline(target, args.no_schedule)
    if target.kind.name == "cuda":  # kernels compiled now (cubins): the GPU machine needs only its driver
        from ..runtime.cuda_build import enable_cuda_codegen

        enable_cuda_codegen()
    with target:  # nvcc takes the architecture from the current target when there is no GPU to ask
        ex = tvm.compile(new_mod, target=target, relax_pipeline=pipeline)
    timing, decision, built = None, "", new_mod  # built: the module `ex` was compiled from
    runnable = target.kind.name == "llvm" and report is not None and report.total is not None \
        and bool(report.total.rules_applied)
    if runnable and not (args.no_check and args.no_time_check):
        feeds = random_feeds(proto, shapes)
        ref = tvm.compile(mod, target=target, relax_pipeline=build_pipeline(target, args.no_schedule))
        if not args.no_check:
            compare([o.name for o in proto.graph.output], vm_outputs(ex, feeds), vm_outputs(ref, feeds), args.rtol,
                    args.atol)
        if not args.no_time_check:
            from ..runtime.timing import compare_tvm

            timing = compare_tvm(ref, ex, feeds, time_cap=args.time_cap)
            if timing.verdict != "faster":
                decision = (f"original: the optimized module is not faster ({timing.verdict}, ratio "
                            f"{timing.ratio:.3f})")
                ex, built = ref, mod
    tuning = None
    if args.tune is not None:  # the last stage, on the graph chosen above
        ex, tuning = _tune_stage(args, built, target, threads, ex, proto, shapes)
    write_library(ex, args.output, library_signature(proto, shapes, target))
    if report is not None:
        print(_summary(report, args.output, time.monotonic() - t0))
        if timing is not None:
            print(f"{'latency (TVM, llvm)':24s}original {timing.median_a * 1e3:.3f} ms, optimized "
                  f"{timing.median_b * 1e3:.3f} ms: ratio {timing.ratio:.3f} [{timing.ci_low:.3f}, "
                  f"{timing.ci_high:.3f}], {timing.rounds} rounds ({timing.verdict})")
        rewritten = report.total is not None and bool(report.total.rules_applied)
        print(f"{'written':24s}{decision or ('the optimized module' if rewritten else 'no rewrite was found')}")
    else:
        print(f"written to {args.output}")
    if tuning is not None:
        print(tuning)
    if target.kind.name == "llvm":
        print(f"{'build':24s}{'TVM default pipeline' if args.no_schedule else 'CPU schedules'} for {target}; "
              f"TVM runtime threads: {threads}")
    return 0


def _check_tune_args(args: argparse.Namespace, target: Any) -> None:
    """--tune's settings, checked before any work: llvm, the CPU schedules, MetaSchedule's dependencies."""
    from ..schedule.tune import TuneError, check_dependencies, prepare_db_dir

    if target.kind.name != "llvm":
        raise CLIError(f"--tune supports llvm targets only (MetaSchedule on CPU), not {target.kind.name}")
    if args.no_schedule:
        raise CLIError("--tune tunes on top of the CPU schedules: drop --no-schedule")
    try:
        check_dependencies()
        if args.tuning_db:
            prepare_db_dir(args.tuning_db)
    except TuneError as e:
        raise CLIError(str(e)) from None


def _tune_stage(args: argparse.Namespace, mod: Any, target: Any, threads: int, untuned: Any, proto: Any,
                shapes: Optional[dict]) -> tuple:
    """(executable, summary text): `mod` tuned and built with the database; checked against the untuned build
    (outputs, unless --no-check) and timed against it (unless --no-time-check): slower, the untuned one is kept."""
    from ..schedule.tune import build_tuned

    ex, report = build_tuned(mod, target, args.tune, args.tuning_db, threads=threads)
    lines = [report.summary()]
    if not report.tuned_tasks:
        lines.append(f"{'written':24s}the database picked our schedule for every task")
        return ex, "\n".join(lines)
    feeds = random_feeds(proto, shapes)
    if not args.no_check:
        compare([o.name for o in proto.graph.output], vm_outputs(ex, feeds), vm_outputs(untuned, feeds), args.rtol,
                args.atol)
    if not args.no_time_check:
        from ..runtime.timing import compare_tvm

        t = compare_tvm(untuned, ex, feeds, time_cap=args.time_cap, names=("untuned", "tuned"))
        lines.append(f"{'latency (tuned)':24s}untuned {t.median_a * 1e3:.3f} ms, tuned {t.median_b * 1e3:.3f} ms: "
                     f"ratio {t.ratio:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}], {t.rounds} rounds ({t.verdict})")
        if t.verdict == "slower":
            lines.append(f"{'written':24s}the untuned build: the tuned one is slower as a whole")
            return untuned, "\n".join(lines)
    lines.append(f"{'written':24s}the tuned build ({len(report.tuned_tasks)} tuned task(s))")
    return ex, "\n".join(lines)


def build_pipeline(target: Any, no_schedule: bool = False) -> Any:
    """The Relax pipeline `compile` builds with: the CPU schedules on llvm (unless `no_schedule`), else the
    target's default pipeline."""
    from tvm import relax

    if target.kind.name == "llvm" and not no_schedule:
        from ..schedule import schedule_pipeline

        return schedule_pipeline(target)
    return relax.get_default_pipeline(target)


def vm_outputs(ex: Any, feeds: dict, device: Any = None) -> list:
    import tvm
    from tvm import relax

    dev = device or tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    out = vm["main"](*[tvm.runtime.tensor(v, dev) for v in feeds.values()])
    return _flatten(out)


def _flatten(out: Any) -> list:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    res: list = []
    for o in out:
        res.extend(_flatten(o))
    return res


def cmd_run(args: argparse.Namespace) -> int:
    import tvm
    from tvm import relax

    from ..runtime.library import load_library
    from ..runtime.samples import match_sample, read_sample

    outputs = None
    if args.outputs:
        outputs = args.outputs if args.outputs.endswith(".npz") else args.outputs + ".npz"
    check_paths([("the module", args.module), ("its signature file", signature_path(args.module)),
                 ("--inputs", args.inputs)], [("--outputs", outputs)])
    _writable(outputs)
    sample = read_sample(args.inputs) if args.inputs else None  # before loading any code
    lib, sig = load_library(args.module)
    if sample is not None:
        feeds = list(match_sample(sample, sig.inputs, f"inputs '{args.inputs}'").values())
    else:
        feeds = signature_feeds(sig)
    threads = set_num_threads(args.threads) if args.device == "cpu" else None
    dev = tvm.cuda() if args.device == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(lib, dev)
    func = vm["main"]
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(v), dev) for v in feeds]
    outs = _flatten(func(*tensors))
    for i, o in enumerate(outs):
        print(f"output {i}: shape {tuple(o.shape)} dtype {o.dtype} mean {float(np.mean(o)):.6g} "
              f"std {float(np.std(o)):.6g}")
    if outputs:
        from ..fileio import atomic_write

        names = sig.extra.get("outputs")
        if isinstance(names, list) and len(names) == len(outs) and len(set(names)) == len(names) \
                and all(isinstance(n, str) and n for n in names):
            named = dict(zip(names, outs))  # by name, as the model names its outputs
        else:
            named = {f"arr_{i}": o for i, o in enumerate(outs)}
        atomic_write(outputs, lambda f: np.savez(f, **named))
    if args.print_time:
        timer = vm.time_evaluator("main", dev, number=1, repeat=max(1, args.repeat))
        res = timer(*tensors)
        print(f"latency: median {res.median * 1e3:.3f} ms, mean {res.mean * 1e3:.3f} ms, std {res.std * 1e3:.3f} ms "
              f"({max(1, args.repeat)} runs" + (f", {threads} TVM thread(s))" if threads else ")"))
    return 0


def library_signature(proto: Any, shapes: Optional[dict], target: Any) -> Any:
    """The signature written beside a library: the model's inputs (dims as built: --input-shapes where given,
    else the model's, symbolic ones by name), an example shape of each, and for integer inputs the range that
    the compile checks drew from (token ids within their table)."""
    from ..runtime.library import Signature
    from ..runtime.samples import InputSpec, onnx_input_specs

    feeds = random_feeds(proto, shapes)
    specs = [InputSpec(s.name, tuple(shapes[s.name]) if shapes and s.name in shapes else s.dims,
                       str(feeds[s.name].dtype)) for s in onnx_input_specs(proto)]
    example = {k: list(v.shape) for k, v in feeds.items()}
    high = {k: int(v.max()) + 1 if v.size else 1 for k, v in feeds.items()
            if np.issubdtype(v.dtype, np.integer)}
    return Signature(specs, str(target), extra={"outputs": [o.name for o in proto.graph.output],
                                                "example_shapes": example, "integer_high": high})


def signature_feeds(sig: Any, seed: int = 0) -> list:
    """Random inputs for a library from its signature: floats standard normal, integers in the range the
    compile checks used, at the example shapes."""
    from ..runtime.check import random_array

    rng = np.random.default_rng(seed)
    example = sig.extra.get("example_shapes") if isinstance(sig.extra.get("example_shapes"), dict) else {}
    high = sig.extra.get("integer_high") if isinstance(sig.extra.get("integer_high"), dict) else {}
    out = []
    for spec in sig.inputs:
        shape = example.get(spec.name) or [d if isinstance(d, int) else 1 for d in spec.dims]
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer) and isinstance(high.get(spec.name), int):
            out.append(rng.integers(0, max(1, high[spec.name]), shape).astype(dtype))
        else:
            out.append(random_array(shape, dtype, rng))
    return out


def _trials(text: str) -> int:
    """--tune's argument: a whole number of trials >= 0 (0: build with what the database holds)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of trials, not '{text}'") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"the number of trials must be >= 0, not {n}")
    return n
