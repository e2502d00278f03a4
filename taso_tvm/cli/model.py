"""The model commands of `taso-tvm`: optimize, convert, compile, run (with the safety net that checks outputs)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections import Counter
from typing import Any, Optional, Sequence

import numpy as np

from ..runtime.check import CheckError, CheckFailed, check_tolerances, compare, random_feeds, run_onnx
from .. import errors as _errors

log = logging.getLogger("taso_tvm")


class CLIError(_errors.SettingsError):
    """A user error: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------- settings
def search_settings(args: argparse.Namespace) -> dict:
    """TasoOptimize keyword arguments from --config and the search flags (flags win)."""
    from ..relay_pass.settings import SettingsError, resolve_settings
    from ..search import SearchConfig

    rules = None
    if getattr(args, "rules", None):  # added to the library (a settings file's `rules:` list may replace it)
        from ..relay_pass.settings import load_named_rules, rule_paths
        from ..rules.ruleset import LIBRARY_ENTRY

        rules = load_named_rules(rule_paths([LIBRARY_ENTRY] + list(args.rules)))
    try:
        s = resolve_settings(getattr(args, "config", None), alpha=getattr(args, "alpha", None),
                             budget=getattr(args, "budget", None), time_limit=getattr(args, "time_limit", None),
                             cost=getattr(args, "cost_backend", None), rules=rules,
                             method=getattr(args, "search", None))
        SearchConfig(**{k: s[k] for k in ("alpha", "budget", "time_limit", "region_size", "method")}).validate()
    except (SettingsError, ValueError) as e:
        raise CLIError(str(e)) from None
    s["target"] = parse_target(args.target) if getattr(args, "target", None) else None
    return s


def parse_target(text: Optional[str]) -> Any:
    """llvm, cuda (sm_90 by default) or a JSON target dict -> tvm.target.Target (the cost model's parser)."""
    import tvm

    from ..cost.config import CostConfigError
    from ..cost.config import parse_target as target_dict

    try:
        spec = target_dict(text or "llvm")
    except CostConfigError as e:
        raise CLIError(str(e)) from None
    host = spec.pop("host", None)
    if spec["kind"] == "llvm":
        from ..schedule import with_host_cpu

        spec = with_host_cpu(spec)  # a bare llvm target would get generic x86-64 code: build for this CPU
    if spec["kind"] == "cuda":
        spec.setdefault("arch", "sm_90")
        host = host or {"kind": "llvm"}
    try:
        return tvm.target.Target(spec, host=host) if host else tvm.target.Target(spec)
    except Exception as e:  # TVM raises several types for bad target dicts
        raise CLIError(f"unknown target {text}: {str(e).splitlines()[-1]}") from None


# ----------------------------------------------------------------------------------------- checking
def ort_outputs(model: Any, feeds: dict) -> list:
    """The model's outputs in ONNX Runtime, in graph order."""
    return list(run_onnx(model, feeds).values())


# ----------------------------------------------------------------------------------------- commands
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


def _writable(*paths: Optional[str]) -> None:
    from ..fileio import writable_target

    for path in paths:
        if path:
            why = writable_target(path)
            if why:
                raise CLIError(why)


def save_model(model: Any, path: str, external_data: str = "auto", source: Any = None) -> None:
    """Write an ONNX model atomically (temporary files renamed into place), its weights in one data file beside
    it (PATH.data) as `external_data` says (auto: when `source`, the model read, had external data, or the
    model is over 1.8 GB)."""
    from ..onnx_io.weights import has_data_files, save
    from ..progress import Progress, phase

    with phase("writing"), Progress(len(model.graph.initializer), "writing weights", unit="tensors") as p:
        save(model, path, external_data, source is not None and has_data_files(source), progress=p)


def read_model(path: str, keep_invalid: bool = False) -> tuple[Any, str]:
    """(the model, '') or, with `keep_invalid`, (the model, why ONNX's checker refuses it); a model the checker
    refuses is bad input otherwise (exit 2, one line)."""
    from ..onnx_io import ModelLoadError, read_onnx
    from ..onnx_io.sanity import checker_problem
    from ..progress import phase

    with phase("reading"):
        proto, label = read_onnx(path)
    with phase("onnx.checker"):
        why = checker_problem(proto)
    if why and not keep_invalid:
        raise ModelLoadError(f"{label} is not a valid ONNX model (onnx.checker): {why}")
    return proto, why


def _onnx_summary(report: Any, out: str) -> str:
    lines = [""]
    share = f"{report.searchable} of {report.nodes} ({100 * report.share_searchable:.0f} %)"
    lines.append(f"{'nodes searched':24s}{share}, in {len(report.regions)} region(s)")
    if report.folded_nodes:
        lines.append(f"{'folded into constants':24s}{report.folded_nodes} node(s) whose values depend on no "
                     "symbolic dim")
    if report.not_searched:
        top = sorted(report.not_searched.items(), key=lambda kv: -kv[1])[:3]
        lines.append(f"{'left as they were':24s}" + "; ".join(f"{n} {why}" for why, n in top))
    if report.bindings and report.bindings[0]:
        lines.append(f"{'symbolic dims':24s}costed at {_dims(report.bindings[0])}; checked at "
                     + " and ".join(_dims(b) for b in report.bindings))
    ops_b, ops_a = report.operators
    lines.append(f"{'operators searched':24s}{ops_b} -> {ops_a}")
    cost_b, cost_a = report.cost
    lines.append(f"{'predicted cost':24s}{cost_b:.4g} -> {cost_a:.4g}")
    expanded = sum(r.expanded for r in report.regions)
    seconds = sum(r.seconds for r in report.regions)
    stops = sorted({r.stopped_by for r in report.regions if r.stopped_by})
    lines.append(f"{'search':24s}{expanded} graphs expanded, {seconds:.2f} s, stopped: {', '.join(stops) or '-'}")
    if "time" in stops:
        lines.append("time limit reached: the best graph found so far was used")
    applied = report.rules_applied
    lines.append(f"{'rules applied':24s}" + (", ".join(f"{k} x{v}" for k, v in applied.most_common()) or "none"))
    t = report.timing
    if t is not None:
        lines.append(f"{'latency (ONNX Runtime)':24s}original {t.latencies[0].median * 1e3:.3f} ms, "
                     f"{t.rounds} rounds alternating with:")
        for lat, r in zip(t.latencies[1:], t.ratios):  # the result and the other equivalent models timed
            lines.append(f"{'':24s}{lat.name} {lat.median * 1e3:.3f} ms: ratio {r.ratio:.3f} "
                         f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}] ({r.verdict})")
    lines.append(f"{'written':24s}{report.decision}")
    lines.append(f"{'total time':24s}{report.seconds:.2f} s")
    lines.append(f"written to {out}")
    return "\n".join(lines)


def _dims(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def _tolerances(args: argparse.Namespace) -> None:
    try:
        check_tolerances(args.rtol, args.atol)
    except CheckError as e:
        raise CLIError(str(e)) from None


def cmd_optimize(args: argparse.Namespace) -> int:
    from ..onnx_io import parse_shapes

    t0 = time.monotonic()
    _writable(args.output, args.report)
    _tolerances(args)
    settings = search_settings(args)
    shapes = parse_shapes(args.input_shapes) if args.input_shapes else None
    proto, invalid = read_model(args.model, args.keep_invalid)
    if invalid:
        save_model(proto, args.output, args.external_data, proto)
        print(f"written to {args.output} unchanged: onnx.checker refuses the model ({invalid})")
        return 0
    if args.no_search:
        return _convert(proto, shapes, args)
    from ..onnx_opt import PrepareError, optimize_onnx
    from ..relay_pass.settings import search_scope

    search = {k: settings[k] for k in ("alpha", "budget", "time_limit", "region_size", "rules", "cost")}
    search["target"] = settings.get("target")
    inputs = _read_inputs(args.inputs) if args.inputs else None
    try:
        with search_scope(method=settings["method"]):  # the ONNX optimizer makes the passes; they read it here
            out_model, report = optimize_onnx(proto, search, shapes=shapes, fix_shapes=args.fix_shapes,
                                              inputs=inputs, check=not args.no_check,
                                              time_check=not args.no_time_check, time_cap=args.time_cap,
                                              threads=args.threads, rtol=args.rtol, atol=args.atol,
                                              standard_ops=args.standard_ops)
    except PrepareError as e:
        raise CLIError(str(e)) from None
    save_model(out_model, args.output, args.external_data, proto)
    print(_onnx_summary(report, args.output))
    if args.report:
        _write_report(args.report, report, args, time.monotonic() - t0)
    return 0


def _read_inputs(path: str) -> dict:
    """Sample inputs from an .npz (arrays named like the graph inputs)."""
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise CLIError(f"cannot read inputs '{path}': {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                       ) from None


def _convert(proto: Any, shapes: Optional[dict], args: argparse.Namespace) -> int:
    """`optimize --no-search`: import into Relax and export back (the convert tool)."""
    from ..api import export_onnx
    from ..onnx_io import load_onnx

    out_model = export_onnx(load_onnx(proto, shapes=shapes), like=proto)
    if not args.no_check:
        feeds = random_feeds(proto, shapes)
        compare([o.name for o in proto.graph.output], ort_outputs(out_model, feeds), ort_outputs(proto, feeds),
                args.rtol, args.atol)
    save_model(out_model, args.output, args.external_data, proto)
    print(f"written to {args.output} ({len(out_model.graph.node)} nodes)")
    return 0


def _write_report(path: str, report: Any, args: argparse.Namespace, seconds: float) -> None:
    from ..fileio import atomic_write_text

    t = report.timing
    data = {"model": args.model, "output": args.output, "decision": report.decision, "nodes": report.nodes,
            "nodes_searched": report.searchable, "share_searched": report.share_searchable,
            "nodes_folded": report.folded_nodes,
            "not_searched": report.not_searched, "bindings": report.bindings, "folding": report.folding,
            "rules_applied": dict(report.rules_applied), "seconds": seconds,
            "operators_before": report.operators[0], "operators_after": report.operators[1],
            "cost_before": report.cost[0], "cost_after": report.cost[1],
            "regions": [{"index": r.region.index, "nodes": len(r.region.nodes), "accepted": r.accepted is not None,
                         "cost_before": r.cost_before, "cost_after": r.cost_after, "ops_before": r.ops_before,
                         "ops_after": r.ops_after, "rules_applied": r.rules_applied, "note": r.note,
                         "seconds": r.seconds} for r in report.regions]}
    if t is not None:
        data["latency"] = {"original_ms": t.latencies[0].median * 1e3, "rounds": t.rounds,
                           "candidates": {lat.name: {"ms": lat.median * 1e3, "ratio": r.ratio, "ci": list(r.ci),
                                                     "verdict": r.verdict}
                                          for lat, r in zip(t.latencies[1:], t.ratios)}}
    atomic_write_text(path, json.dumps(data, indent=2))


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


def _export_library(ex: Any, path: str) -> None:
    """ex.export_library into a temporary file beside `path` (same suffix), renamed into place."""
    folder, base = os.path.split(os.path.abspath(path))
    root, ext = os.path.splitext(base)
    tmp = os.path.join(folder, f".{root}.{os.getpid()}.part{ext or '.so'}")
    try:
        ex.export_library(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
    _export_library(ex, args.output)
    write_signature(args.output, proto, shapes)
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

    if not os.path.exists(args.module):
        raise CLIError(f"cannot read '{args.module}': no such file")
    _writable(args.outputs)
    try:
        lib = tvm.runtime.load_module(args.module)
    except Exception as e:
        raise CLIError(f"'{args.module}' is not a TVM module: {str(e).splitlines()[-1]}") from None
    threads = set_num_threads(args.threads) if args.device == "cpu" else None
    dev = tvm.cuda() if args.device == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(lib, dev)
    func = vm["main"]
    if args.inputs:
        try:
            data = np.load(args.inputs)
        except (OSError, ValueError) as e:
            raise CLIError(f"cannot read inputs '{args.inputs}': {e}") from None
        feeds = [data[k] for k in data.files]
    else:
        feeds = _random_vm_inputs(args.module)
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(v), dev) for v in feeds]
    outs = _flatten(func(*tensors))
    for i, o in enumerate(outs):
        print(f"output {i}: shape {tuple(o.shape)} dtype {o.dtype} mean {float(np.mean(o)):.6g} "
              f"std {float(np.std(o)):.6g}")
    if args.outputs:
        from ..fileio import atomic_write

        atomic_write(args.outputs if args.outputs.endswith(".npz") else args.outputs + ".npz",
                     lambda f: np.savez(f, *outs))
    if args.print_time:
        timer = vm.time_evaluator("main", dev, number=1, repeat=max(1, args.repeat))
        res = timer(*tensors)
        print(f"latency: median {res.median * 1e3:.3f} ms, mean {res.mean * 1e3:.3f} ms, std {res.std * 1e3:.3f} ms "
              f"({max(1, args.repeat)} runs" + (f", {threads} TVM thread(s))" if threads else ")"))
    return 0


def signature_path(module_path: str) -> str:
    return module_path + ".inputs.json"


def write_signature(module_path: str, proto: Any, shapes: Optional[dict]) -> None:
    """Save the inputs' names, shapes and dtypes beside the library, so `run` can make inputs itself."""
    feeds = random_feeds(proto, shapes)
    sig = [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()]
    from ..fileio import atomic_write_text

    atomic_write_text(signature_path(module_path), json.dumps(sig, indent=1))


def _random_vm_inputs(module_path: str) -> list:
    path = signature_path(module_path)
    if not os.path.exists(path):
        raise CLIError(f"no input signature beside '{module_path}' ({path}); pass the inputs with --inputs in.npz")
    with open(path) as f:
        sig = json.load(f)
    rng = np.random.default_rng(0)
    out = []
    for s in sig:
        if np.issubdtype(np.dtype(s["dtype"]), np.floating):
            out.append(rng.standard_normal(s["shape"]).astype(s["dtype"]))
        else:
            out.append(rng.integers(0, 8, s["shape"]).astype(s["dtype"]))
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


def add_model_commands(sub: Any) -> None:
    from ..onnx_io.weights import EXTERNAL_MODES
    from ..search import METHODS, SearchConfig

    def common(p: argparse.ArgumentParser, search: bool = True) -> None:
        p.add_argument("--input-shapes", help='input shapes to cost at: "name:[1,3,224,224],mask:[1,128]" '
                       '(optimize keeps symbolic dims symbolic unless --fix-shapes; default binding: 1 for a '
                       'symbolic dim on axis 0, 64 elsewhere)')
        if search:
            p.add_argument("--config", help="YAML settings: search (alpha, budget, time_limit) and cost model")
            p.add_argument("--alpha", type=float, help="relaxation: keep candidates below alpha x best "
                           f"(default {SearchConfig.alpha})")
            p.add_argument("--budget", type=int, help=f"graphs expanded per region (default {SearchConfig.budget})")
            p.add_argument("--time-limit", dest="time_limit", type=float, help="search time limit in seconds")
            p.add_argument("--search", choices=list(METHODS), help="the search: TASO's backtracking, equality "
                           "saturation (e-graph; needs the egraph extra) or both, keeping the cheaper result "
                           f"(default {SearchConfig.method})")
            p.add_argument("--rules", action="append", metavar="FILE",
                           help="a rule file to search with besides the shipped library, e.g. one written by "
                                "`taso-tvm rules generate` (repeatable; every rule in it must verify)")
            p.add_argument("--cost-backend", choices=["auto", "analytic", "tvm", "ort"],
                           help="cost model backend (default auto: ONNX Runtime kernels for optimize, TVM kernels "
                                "on the target for compile)")
            p.add_argument("--no-check", action="store_true", help="skip the numerical check against the original")
            p.add_argument("--rtol", type=float, default=1e-3)
            p.add_argument("--atol", type=float, default=1e-4)

    o = sub.add_parser("optimize", help="optimize an ONNX model and write ONNX")
    o.add_argument("model")
    o.add_argument("-o", "--output", required=True)
    o.add_argument("--report", help="write a JSON report of the search")
    o.add_argument("--no-search", action="store_true", help="import and export only (a Relax round trip)")
    o.add_argument("--target", default=None, help="target the cost model measures on (llvm, cuda or JSON)")
    o.add_argument("--fix-shapes", action="store_true",
                   help="bake the --input-shapes (or the default binding) into the output instead of keeping "
                        "symbolic dims")
    o.add_argument("--no-time-check", action="store_true",
                   help="write the rewrite without timing it against the original in ONNX Runtime")
    o.add_argument("--time-cap", type=float, default=20.0,
                   help="seconds the original-vs-optimized timing may take (default 20)")
    o.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads for the timing (default 2)")
    o.add_argument("--inputs", help="sample inputs (.npz, arrays named like the graph inputs) for the checks, "
                                    "where random ones would not do (a sample rate, token ids)")
    o.add_argument("--external-data", choices=EXTERNAL_MODES, default="auto",
                   help="write the weights to one data file beside the output (OUTPUT.data): auto (default) when "
                        "the input has external data or the output is over 1.8 GB, always, or never (under 2 GB)")
    o.add_argument("--keep-invalid", action="store_true",
                   help="write a model ONNX's checker refuses unchanged (exit 0) instead of refusing it (exit 2)")
    o.add_argument("--standard-ops", action="store_true",
                   help="write default-domain ONNX operators only, for runtimes other than ONNX Runtime (TensorRT, "
                        "OpenVINO, TVM): no ONNX Runtime fused operators (com.microsoft MultiHeadAttention, ...)")
    common(o)
    o.set_defaults(func=cmd_optimize)

    c = sub.add_parser("compile", help="optimize and build an ONNX model into a TVM library (.so)")
    c.add_argument("model")
    c.add_argument("--target", required=True, help="llvm, cuda or a JSON target dict")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--no-optimize", action="store_true", help="build without the TASO search")
    c.add_argument("--no-time-check", action="store_true",
                   help="keep the optimized module without timing it against the original (llvm only)")
    c.add_argument("--time-cap", type=float, default=20.0,
                   help="seconds the original-vs-optimized timing may take (default 20)")
    c.add_argument("--threads", type=int, default=0,
                   help="TVM runtime threads for the checks and timing (default: TVM's, the physical cores)")
    c.add_argument("--no-schedule", action="store_true",
                   help="build with TVM's default pipeline instead of the CPU schedules (llvm)")
    c.add_argument("--tune", type=_trials, metavar="TRIALS",
                   help="tune the kernels with MetaSchedule for TRIALS trials in all (llvm; needs taso-tvm[tune]); "
                        "each kernel keeps the faster of its tuned and its CPU schedule")
    c.add_argument("--tuning-db", metavar="DIR",
                   help="the tuning database folder (created if missing; default ~/.cache/taso_tvm/tuning-db or "
                        "$TASO_TVM_TUNING_DB); trials it already holds are not run again")
    common(c)
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", help="run a compiled module")
    r.add_argument("module")
    r.add_argument("--inputs", help=".npz with the inputs in parameter order")
    r.add_argument("--outputs", help="write the outputs to this .npz")
    r.add_argument("--print-time", action="store_true")
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    r.add_argument("--threads", type=int, default=0, help="TVM runtime threads on cpu (default: TVM's)")
    r.set_defaults(func=cmd_run)
