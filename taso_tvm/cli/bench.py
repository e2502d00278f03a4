"""`taso-tvm bench`: what taso-tvm does for a model, side by side with what users run today, in one run.

    taso-tvm bench [MODELS or FILES] [--json F] [--plot F.png] [--no-tvm] [--time-cap S] [--threads N] [--no-spin]

For each zoo model and ONNX file:
- ONNX Runtime (CPU, all graph optimizations, `--threads` intra-op threads): the original, the original through
  onnxsim (what users run today), taso-tvm's output (what `taso-tvm optimize` writes, never-slower guard on) and that
  output through onnxsim, all four timed together by the project's timing helper (single runs alternating in random
  order; the ratio to the original with its confidence interval);
- TVM on llvm: `tvm.compile` with the default pipeline, with the CPU schedule pipeline (`taso-schedule`, when
  installed) and with `relax_pipeline="taso"`, each checked against ONNX Runtime, then timed against the original
  in ONNX Runtime (the ratios of every column are to that original);
- the search: seconds with a cold and a warm cost cache, operators before/after in the searched regions, rules
  applied, share of the model's nodes that were searched.
A Markdown table goes to stdout; `--json` writes every number; `--plot` a bar chart of the speedups (matplotlib).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from .. import errors as _errors
from .argtypes import OneLineParser, nonneg_int, positive_float, positive_int

log = logging.getLogger("taso_tvm")

ORT_COLUMNS = ("original", "onnxsim", "taso", "taso+onnxsim")
TVM_COLUMNS = ("default", "taso-schedule", "taso")
DEFAULT_MODELS = ("squeezenet", "resnet50", "inception_v3", "nasnet_a", "resnext50", "bert", "nasrnn")


class BenchError(_errors.SettingsError):
    """A user error on the bench command line (unknown model, unreadable file): one line, exit status 2."""


@dataclass
class Column:
    """One way of running the model: its median latency, and its ratio to the first column with the interval."""

    median_ms: float = math.nan
    ratio: float = math.nan  # this column's time / the baseline's (< 1: faster)
    ci: tuple = (math.nan, math.nan)
    verdict: str = ""
    note: str = ""  # why there is no number (failed to build, differs from ONNX Runtime, not installed)


@dataclass
class BenchRow:
    """Everything measured for one model."""

    model: str
    nodes: int = 0
    searched_share: float = 0.0
    ops_before: int = 0
    ops_after: int = 0
    rules_applied: dict = field(default_factory=dict)
    search_cold_s: float = math.nan
    search_warm_s: float = math.nan
    decision: str = ""
    ort: dict = field(default_factory=dict)  # column name -> Column
    ort_rounds: int = 0
    tvm: dict = field(default_factory=dict)
    tvm_rounds: int = 0


# ------------------------------------------------------------------------------------------------ inputs
def load_models(specs: Sequence[str], bert_layers: Optional[int]) -> list[tuple[str, Any]]:
    """(label, ModelProto) for each zoo name or ONNX file."""
    import onnx

    from .. import zoo

    out = []
    for spec in specs:
        if spec in zoo.MODELS:
            kwargs = {"layers": bert_layers} if spec == "bert" and bert_layers else {}
            out.append((spec if not kwargs else f"bert-{bert_layers}l", zoo.get_model(spec, **kwargs)))
        elif os.path.isfile(spec):
            try:
                out.append((Path(spec).stem, onnx.load(spec)))
            except Exception as e:  # protobuf raises several types for a file that is not ONNX
                raise BenchError(f"{spec}: not a readable ONNX file ({_errors.one_line(e)})") from None
        else:
            raise BenchError(f"{spec}: neither a zoo model ({', '.join(zoo.MODELS)}) nor an ONNX file")
    return out


def onnxsim_of(model: Any) -> tuple[Any, str]:
    """The model through onnxsim with its default settings (what users run), or the model and why not."""
    try:
        import onnxsim

        simplified, ok = onnxsim.simplify(model)
        return (simplified, "") if ok else (model, "onnxsim's own check failed")
    except Exception as e:  # onnxsim raises RuntimeError/ValueError/its own types on models it cannot take
        return model, f"onnxsim failed: {_errors.one_line(e)}"


# ------------------------------------------------------------------------------------------------ ONNX Runtime
def run_search(model: Any, row: BenchRow, settings: Any, shapes: Optional[dict], guard_cap: float,
               threads: int) -> Any:
    """Optimize as `taso-tvm optimize` does, twice: with an empty cost cache, then with the cache it filled."""
    from ..onnx_opt import optimize_onnx

    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("TASO_TVM_COST_CACHE")
        os.environ["TASO_TVM_COST_CACHE"] = os.path.join(tmp, "costs.sqlite")
        try:
            times, result = [], None
            for _ in range(2):
                t0 = time.monotonic()
                result, report = optimize_onnx(model, settings, shapes=shapes, time_cap=guard_cap,
                                               threads=threads)
                times.append(time.monotonic() - t0)
        finally:
            if old is None:
                os.environ.pop("TASO_TVM_COST_CACHE", None)
            else:
                os.environ["TASO_TVM_COST_CACHE"] = old
    row.search_cold_s, row.search_warm_s = times
    row.nodes = report.nodes
    row.searched_share = report.searchable / max(report.nodes, 1)
    row.ops_before, row.ops_after = report.operators
    row.rules_applied = dict(sorted(report.rules_applied.items()))
    row.decision = report.decision
    return result


def time_ort(models: dict, feeds: dict, row: BenchRow, threads: int, time_cap: float, seed: int,
             spin: bool = True) -> None:
    """Time the ONNX variants together, each checked against the original first."""
    from ..runtime.check import CheckFailed, compare_outputs, run_onnx
    from ..runtime.timing import compare, ort_runner, ort_session

    want = run_onnx(models["original"], feeds, threads=threads)
    runners, names = [], []
    for name, model in models.items():
        col = row.ort.setdefault(name, Column())
        try:
            if name != "original":
                compare_outputs(run_onnx(model, feeds, threads=threads), want)
            runners.append(ort_runner(ort_session(model, threads, spin=spin), feeds))
            names.append(name)
        except (CheckFailed, _errors.TasoError, RuntimeError) as e:
            col.note = _errors.one_line(e)
    row.ort_rounds = _fill(row.ort, compare(*runners, names=names, time_cap=time_cap, seed=seed))


def _fill(columns: dict, res: Any) -> int:
    """Copy a timing result into the columns; returns its number of rounds."""
    for lat in res.latencies:
        columns[lat.name].median_ms = lat.median * 1e3
    base = res.latencies[0].name
    columns[base].ratio, columns[base].ci = 1.0, (1.0, 1.0)
    for r in res.ratios:
        c = columns[r.candidate]
        c.ratio, c.ci, c.verdict = r.ratio, tuple(r.ci), r.verdict
    return res.rounds


# ------------------------------------------------------------------------------------------------ TVM
ANCHOR = "ort original"  # the TVM builds are timed against what users run today, not against each other


def time_tvm(model: Any, feeds: dict, row: BenchRow, shapes: Optional[dict], threads: int, time_cap: float,
             seed: int, spin: bool = True) -> None:
    """Build for llvm three ways, check each against ONNX Runtime, and time each against the original in ONNX
    Runtime: the scheduled builds together with it, the default build (seconds per run) apart, so that its slow runs
    do not starve the others of rounds."""
    import tvm
    from tvm import relax

    from ..runtime.check import compare_outputs, run_onnx, run_relax
    from ..onnx_io import load_onnx
    from ..schedule import with_host_cpu
    from ..runtime.timing import compare, ort_runner, ort_session, vm_runner

    want = list(run_onnx(model, feeds, threads=threads).values())
    mod = load_onnx(model, shapes=shapes)
    target = tvm.target.Target(with_host_cpu({"kind": "llvm", "num-cores": threads}))  # this CPU, not SSE2
    args = [feeds[str(p.name)] for p in mod["main"].params]
    built = {}
    for name in TVM_COLUMNS:
        col = row.tvm.setdefault(name, Column())
        if name not in relax.pipeline.PIPELINE_MAP and name != "default":
            col.note = f"pipeline '{name}' is not installed"
            continue
        try:
            ex = tvm.compile(mod, target, relax_pipeline=name)
            got = list(run_relax(ex, args).values())
            compare_outputs(dict(enumerate(got)), dict(enumerate(want)))
        except Exception as e:  # a build or run failure is a result of the benchmark, not its end
            col.note = _errors.one_line(e)
            continue
        built[name] = vm_runner(ex, args)
    anchor = ort_runner(ort_session(model, threads, spin=spin), feeds)
    rounds = []
    for group in ([n for n in built if n != "default"], [n for n in built if n == "default"]):
        if group:
            res = compare(anchor, *(built[n] for n in group), names=[ANCHOR, *group], time_cap=time_cap, seed=seed)
            cols = {ANCHOR: Column(), **row.tvm}
            rounds.append(_fill(cols, res))
    row.tvm_rounds = min(rounds) if rounds else 0


# ------------------------------------------------------------------------------------------------ report
def _cell(col: Column) -> str:
    if col.note:
        return "n/a"
    if math.isnan(col.median_ms):
        return ""
    if col.ratio == 1.0 and col.ci == (1.0, 1.0):
        return f"{col.median_ms:.3g} ms"
    return f"{col.median_ms:.3g} ms ({col.ratio:.2f}x [{col.ci[0]:.2f}, {col.ci[1]:.2f}])"


def markdown(rows: Sequence[BenchRow]) -> str:
    """The table users read: latencies with ratios to the original in ONNX Runtime, then the search."""
    head = (["model"] + [f"ORT {c}" for c in ORT_COLUMNS] + [f"TVM {c}" for c in TVM_COLUMNS]
            + ["search s (cold/warm)", "ops", "searched", "rules applied"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for r in rows:
        cells = [r.model] + [_cell(r.ort.get(c, Column())) for c in ORT_COLUMNS]
        cells += [_cell(r.tvm.get(c, Column())) for c in TVM_COLUMNS]
        cells += [f"{r.search_cold_s:.1f} / {r.search_warm_s:.1f}", f"{r.ops_before} -> {r.ops_after}",
                  f"{r.searched_share:.0%}", ", ".join(f"{k} x{v}" for k, v in r.rules_applied.items()) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
        for runtime, cols in (("ORT", r.ort), ("TVM", r.tvm)):
            notes += [f"- {r.model}, {runtime} {c}: {col.note}" for c, col in cols.items() if col.note]
        if r.decision:
            notes.append(f"- {r.model}: {r.decision}")
    return "\n".join(lines + ([""] + notes if notes else []))


def plot(rows: Sequence[BenchRow], path: str) -> None:
    """Bar chart of speedups over the original in ONNX Runtime (needs matplotlib: `pip install taso-tvm[plot]`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'taso-tvm[plot]'") from None
    series = [("ORT", c) for c in ORT_COLUMNS[1:]] + [("TVM", c) for c in TVM_COLUMNS]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    width = 0.8 / len(series)
    for k, (runtime, c) in enumerate(series):
        vals = []
        for r in rows:
            col = (r.ort if runtime == "ORT" else r.tvm).get(c, Column())
            vals.append(1.0 / col.ratio if col.ratio and not math.isnan(col.ratio) else 0.0)
        ax.bar(np.arange(len(rows)) + k * width, vals, width, label=f"{runtime} {c}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, [r.model for r in rows], rotation=20)
    ax.set_ylabel("speedup over the original in ONNX Runtime")
    ax.legend(fontsize=7)
    fig.tight_layout()
    from ..fileio import atomic_write

    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main
def bench_model(label: str, model: Any, args: argparse.Namespace, settings: Any) -> BenchRow:
    from ..runtime.check import random_feeds

    row = BenchRow(label)
    shapes = args.shapes
    feeds = random_feeds(model, shapes=shapes)
    log.info("%s: searching (cold and warm cost cache)", label)
    optimized = run_search(model, row, settings, shapes, args.guard_cap, args.threads)
    sim, sim_note = onnxsim_of(model)
    opt_sim, opt_note = onnxsim_of(optimized)
    variants = {"original": model, "onnxsim": sim, "taso": optimized, "taso+onnxsim": opt_sim}
    log.info("%s: timing in ONNX Runtime", label)
    time_ort(variants, feeds, row, args.threads, args.time_cap, args.seed, spin=not args.no_spin)
    for name, note in (("onnxsim", sim_note), ("taso+onnxsim", opt_note)):
        if note:
            row.ort[name].note = note
    if not args.no_tvm:
        log.info("%s: building and timing in TVM (llvm)", label)
        time_tvm(model, feeds, row, shapes, args.threads, args.time_cap, args.seed, spin=not args.no_spin)
    return row


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="taso-tvm bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"zoo names or ONNX files (default: {' '.join(DEFAULT_MODELS)})")
    p.add_argument("--json", help="write every number as JSON")
    p.add_argument("--plot", help="write a PNG bar chart of the speedups (needs matplotlib)")
    p.add_argument("--no-tvm", action="store_true", help="skip the TVM builds (ONNX Runtime only)")
    p.add_argument("--threads", type=nonneg_int, default=2, help="threads of ONNX Runtime and of TVM's runtime (default 2)")
    p.add_argument("--time-cap", type=positive_float, default=30.0, help="seconds to time each runtime's variants (default 30)")
    p.add_argument("--guard-cap", type=positive_float, default=20.0, help="seconds of the never-slower guard (default 20)")
    p.add_argument("--input-shapes", help='shapes for symbolic inputs, "x:[1,3,224,224],mask:[1,128]"')
    p.add_argument("--bert-layers", type=positive_int, help="encoder layers of the zoo's bert (default: the zoo's 12)")
    p.add_argument("--config", help="settings file for the search (YAML)")
    p.add_argument("--cost-backend", help="cost backend of the search (default auto: ONNX Runtime kernels)")
    p.add_argument("--no-spin", action="store_true",
                   help="neither runtime's threads spin after a run (ONNX Runtime allow_spinning=0, "
                        "TVM_THREAD_POOL_SPIN_COUNT=0): runs alternate, and on few cores one runtime's spinning "
                        "threads slow the next run's start")
    p.add_argument("--seed", type=nonneg_int, default=0)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if args.threads < 1 or args.time_cap <= 0 or args.guard_cap <= 0:
        raise BenchError("--threads, --time-cap and --guard-cap must be positive")
    from .common import check_paths

    check_paths([("--config", args.config)] + [("the model", m) for m in args.models if os.path.isfile(m)],
                [("--json", args.json), ("--plot", args.plot)])
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    if args.no_spin:
        os.environ["TVM_THREAD_POOL_SPIN_COUNT"] = "0"  # read when TVM's pool starts
    from .common import search_settings
    from ..onnx_io import parse_shapes

    args.shapes = parse_shapes(args.input_shapes) if args.input_shapes else None
    settings = dataclasses.replace(search_settings(args), target=None)
    models = load_models(args.models or DEFAULT_MODELS, args.bert_layers)
    rows = []
    for label, model in models:
        rows.append(bench_model(label, model, args, settings))
        print(f"done: {label}", file=sys.stderr)
    print(markdown(rows))
    print(f"\n{args.threads} threads; machine: {machine()}")
    if args.json:
        from ..fileio import atomic_write_text

        atomic_write_text(args.json, json.dumps({"machine": machine(), "threads": args.threads,
                                                 "rows": [asdict(r) for r in rows]}, indent=1, default=str))
    if args.plot:
        plot(rows, args.plot)
    return 0


def machine() -> str:
    """CPU model and core count, for the table's caption."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores"
