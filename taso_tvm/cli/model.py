"""The model commands of `taso-tvm`: optimize and convert (ONNX to ONNX, with the safety net that checks outputs),
and the parsers of every model command (compile and run: `compile.py`)."""
from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any, Optional

import numpy as np

from ..runtime.check import compare, random_feeds, run_onnx
from .common import (CLIError, _tolerances, _writable, check_paths, read_model, save_model, search_settings,
                     setting_reads)
from .compile import _trials, cmd_compile, cmd_run

log = logging.getLogger("taso_tvm")

PHASE_LINE_S = 1.0  # the summary's time line names the phases that took at least this long


# ----------------------------------------------------------------------------------------- checking
def ort_outputs(model: Any, feeds: dict) -> list:
    """The model's outputs in ONNX Runtime, in graph order."""
    return list(run_onnx(model, feeds).values())


# ----------------------------------------------------------------------------------------- commands
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
    if report.fused:
        lines.append(f"{'fused (written)':24s}{report.fused_line}")
    t = report.timing
    if t is not None:
        lines.append(f"{'latency (ONNX Runtime)':24s}original {t.latencies[0].median * 1e3:.3f} ms, "
                     f"{t.rounds} rounds alternating" + (f" ({t.sessions} sessions each, in turn)" if t.sessions > 1
                                                          else "") + " with:")
        for i, (lat, r) in enumerate(zip(t.latencies[1:], t.ratios), 1):  # the result and the other models timed
            dropped = f", dropped after {lat.runs} rounds: slower than the fastest" if i in t.dropped else ""
            lines.append(f"{'':24s}{lat.name} {lat.median * 1e3:.3f} ms: ratio {r.ratio:.3f} "
                         f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}] ({r.verdict}{dropped})")
    if report.gain is not None:
        g = report.gain
        lines.append(f"{'gain':24s}predicted {g['predicted_points']:.1f} points, measured {g['measured_points']:.1f} "
                     f"(of the original's {g['original_ms']:.3f} ms)")
    lines.append(f"{'written':24s}{report.decision}")
    lines.append(f"{'total time':24s}{report.seconds:.2f} s")
    lines.append(f"{'time':24s}{_time_line(report.phases, report.measure_seconds)}")
    lines.append(f"written to {out}")
    return "\n".join(lines)


def _time_line(phases: dict, measured: float) -> str:
    """Where the time went: the phases of at least PHASE_LINE_S, in order, the search with its kernel
    measurements, the rest as 'other'."""
    parts, other = [], 0.0
    for name, sec in phases.items():
        if sec < PHASE_LINE_S:
            other += sec
            continue
        note = f" (kernels measured {measured:.1f} s)" if name == "search" and measured >= PHASE_LINE_S else ""
        parts.append(f"{name} {sec:.1f} s{note}")
    if other >= PHASE_LINE_S:
        parts.append(f"other {other:.1f} s")
    return ", ".join(parts) or "-"


def _dims(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def cmd_optimize(args: argparse.Namespace) -> int:
    from ..onnx_io import parse_shapes

    from ..onnx_io.weights import data_files, data_path

    t0 = time.monotonic()
    reads = [("the model", args.model)] + setting_reads(args)
    writes = [("-o", args.output), ("--report", args.report)]
    if args.external_data != "never":
        writes.insert(1, ("the output's data file", data_path(args.output)))
    check_paths(reads, writes)
    _writable(args.output, args.report)
    _tolerances(args)
    settings = search_settings(args)
    shapes = parse_shapes(args.input_shapes) if args.input_shapes else None
    proto, invalid = read_model(args.model, args.keep_invalid)
    read_s = time.monotonic() - t0
    check_paths(reads + [("the model's data file", p) for p in data_files(proto)], writes)
    if invalid:
        save_model(proto, args.output, args.external_data, proto)
        print(f"written to {args.output} unchanged: onnx.checker refuses the model ({invalid})")
        return 0
    if args.no_search:
        return _convert(proto, shapes, args)
    from ..onnx_opt import PrepareError, optimize_onnx

    inputs = _read_inputs(args.inputs, proto) if args.inputs else None
    try:
        out_model, report = optimize_onnx(proto, settings, shapes=shapes, fix_shapes=args.fix_shapes,
                                          inputs=inputs, check=not args.no_check,
                                          time_check=not args.no_time_check, time_cap=args.time_cap,
                                          threads=args.threads, rtol=args.rtol, atol=args.atol,
                                          standard_ops=args.standard_ops, peer_starts=not args.no_peer_starts)
    except PrepareError as e:
        raise CLIError(str(e)) from None
    t_write = time.monotonic()
    save_model(out_model, args.output, args.external_data, proto)
    report.phases = {"reading": read_s, **report.phases, "writing": time.monotonic() - t_write}
    print(_onnx_summary(report, args.output))
    if args.report:
        _write_report(args.report, report, args, time.monotonic() - t0)
    return 0


def _read_inputs(path: str, proto: Any) -> dict:
    """Sample inputs from an .npz, matched to the model's inputs by name (dtype and shape checked)."""
    from ..runtime.samples import match_sample, onnx_input_specs, read_sample

    return match_sample(read_sample(path), onnx_input_specs(proto), f"inputs '{path}'")


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
            "fused": {kind: {"fused": done, "of": total} for kind, (done, total) in report.fused.items()},
            "phases": {k: round(v, 3) for k, v in report.phases.items()},
            "kernels_measured_seconds": round(report.measure_seconds, 3),
            "operators_before": report.operators[0], "operators_after": report.operators[1],
            "cost_before": report.cost[0], "cost_after": report.cost[1], "gain": report.gain,
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


def add_model_commands(sub: Any) -> None:
    from ..cost.config import BACKENDS
    from ..onnx_io.weights import EXTERNAL_MODES
    from ..search import METHODS, SearchConfig
    from .argtypes import alpha, nonneg_float, nonneg_int, positive_float, positive_int

    def common(p: argparse.ArgumentParser, search: bool = True) -> None:
        p.add_argument("--input-shapes", help='input shapes to cost at: "name:[1,3,224,224],mask:[1,128]" '
                       '(optimize keeps symbolic dims symbolic unless --fix-shapes; default binding: 1 for a '
                       'symbolic dim on axis 0, 64 elsewhere)')
        if search:
            p.add_argument("--config", help="YAML settings: search (alpha, budget, time_limit) and cost model")
            p.add_argument("--alpha", type=alpha, help="relaxation: keep candidates below alpha x best "
                           f"(default {SearchConfig.alpha})")
            p.add_argument("--budget", type=nonneg_int, help=f"graphs expanded per region (default {SearchConfig.budget})")
            p.add_argument("--time-limit", dest="time_limit", type=positive_float, help="search time limit in seconds")
            p.add_argument("--search", choices=list(METHODS), help="the search: TASO's backtracking, equality "
                           "saturation (e-graph; needs the egraph extra) or both, keeping the cheaper result "
                           f"(default {SearchConfig.method})")
            p.add_argument("--rules", action="append", metavar="FILE",
                           help="a rule file to search with besides the shipped library, e.g. one written by "
                                "`taso-tvm rules generate` (repeatable; every rule in it must verify)")
            p.add_argument("--cost-backend", choices=list(BACKENDS),
                           help="cost model backend (default auto: ONNX Runtime kernels for optimize, TVM kernels "
                                "on the target for compile)")
            p.add_argument("--no-check", action="store_true", help="skip the numerical check against the original")
            p.add_argument("--rtol", type=nonneg_float, default=1e-3)
            p.add_argument("--atol", type=nonneg_float, default=1e-4)

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
    o.add_argument("--time-cap", type=positive_float, default=20.0,
                   help="seconds the original-vs-optimized timing may take (default 20; a model whose runs are "
                        "slow is timed on to 30 rounds, up to 3 times this)")
    o.add_argument("--threads", type=nonneg_int, default=2, help="ONNX Runtime threads for the timing (default 2)")
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
    o.add_argument("--no-peer-starts", action="store_true",
                   help="search from the model as given only: the outputs of ONNX Runtime's transformer optimizer "
                        "and onnxscript's ORT fusions, and the search from each, are not candidates of the guard")
    common(o)
    o.set_defaults(func=cmd_optimize)

    c = sub.add_parser("compile", help="optimize and build an ONNX model into a TVM library (.so)")
    c.add_argument("model")
    c.add_argument("--target", required=True, help="llvm, cuda or a JSON target dict")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--no-optimize", action="store_true", help="build without the TASO search")
    c.add_argument("--no-time-check", action="store_true",
                   help="keep the optimized module without timing it against the original (llvm only)")
    c.add_argument("--time-cap", type=positive_float, default=20.0,
                   help="seconds the original-vs-optimized timing may take (default 20)")
    c.add_argument("--threads", type=nonneg_int, default=0,
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
    r.add_argument("--inputs", help=".npz with one array per input, named like the model's inputs (checked "
                   "against the signature file beside the module: names, dtypes, shapes)")
    r.add_argument("--outputs", help="write the outputs to this .npz, named like the model's outputs")
    r.add_argument("--print-time", action="store_true")
    r.add_argument("--repeat", type=positive_int, default=10)
    r.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    r.add_argument("--threads", type=nonneg_int, default=0, help="TVM runtime threads on cpu (default: TVM's)")
    r.set_defaults(func=cmd_run)
