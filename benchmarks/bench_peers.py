"""taso-tvm next to the tools users would pick instead, side by side in ONNX Runtime (issue #21's benchmark).

For each model and sequence length: the original; onnxsim; ONNX Runtime's transformer optimizer
(`onnxruntime.transformers.optimizer.optimize_model`, opt_level 0); taso-tvm (`optimize_onnx`, as `taso-tvm
optimize` runs it, its never-slower guard included); and taso-tvm on top of ONNX Runtime's optimizer. Each tool's
wall time is recorded; each output is compared with the original's in ONNX Runtime on the same valid inputs; all
variants are timed in ONE alternating comparison (single runs in a fresh random order each round, 2 intra-op
threads, all graph optimizations, thread spinning off for every session: `taso_tvm.runtime.timing`). The limit is
measured in the same run: ONNX Runtime's MatMul on 1024^3 fp32 gives the machine's GEMM peak, and each variant's
FLOPs over its latency its share of it.

    python benchmarks/bench_peers.py [NAMES] [--set peers|real|zoo|all] [--seq 128 512] [--time-cap 60]
        [--md benchmarks/results/peers.md] [--json benchmarks/results/peers.json]

Models: `benchmarks/peers/make_peer_models.py` writes the transformers into `$TASO_TVM_PEER_MODELS` (default
`~/.cache/taso_tvm/peer_models`); `--set real` takes the committed real models (tests/data/real_models), `--set zoo`
the zoo's models. A tool that fails, or whose output does not load or differs, is a table entry saying so.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taso_tvm.runtime.check import CheckFailed, compare_outputs, run_onnx  # noqa: E402
from taso_tvm.runtime.timing import compare, measure, ort_runner, ort_session  # noqa: E402

log = logging.getLogger("bench_peers")
VARIANTS = ("original", "onnxsim", "ort-opt", "taso", "ort-opt+taso")
PEERS = ("onnxsim", "ort-opt")
GEMM = 1024
THREADS = 2


@dataclass
class Model:
    name: str
    path: Path
    feeds: Callable[[int], dict]  # sequence length -> inputs
    seqs: list
    model_type: Optional[str] = None  # for ORT's transformer optimizer
    num_heads: int = 0
    hidden_size: int = 0


@dataclass
class Cell:
    variant: str
    ok: bool = True
    note: str = ""
    tool_seconds: float = 0.0
    median_ms: float = float("nan")
    ratio: float = float("nan")  # to the original
    ci: tuple = (float("nan"), float("nan"))
    vs_peer: float = float("nan")  # latency ratio to the best peer (< 1: faster than it)
    gflops: float = float("nan")
    peak_share: float = float("nan")
    fused: dict = field(default_factory=dict)  # com.microsoft op type -> count


# ------------------------------------------------------------------------------------------- models
def _entry_feeds(entry: dict, seq: int, batch: int = 1, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    dims = {"batch": batch, "sequence": seq}
    out = {}
    for inp in entry["inputs"]:
        shape = [dims.get(d, seq) if isinstance(d, str) else d for d in inp["shape"]]
        if inp["dtype"].startswith("float"):
            out[inp["name"]] = rng.standard_normal(shape).astype(inp["dtype"])
        elif inp.get("pattern") == "padding_mask":  # a padded batch: ones, then some zeros at the end
            m = np.ones(shape, inp["dtype"])
            m[:, shape[-1] - shape[-1] // 8:] = 0
            out[inp["name"]] = m
        else:
            lo, hi = inp.get("range", [0, 2])
            out[inp["name"]] = rng.integers(lo, hi, shape).astype(inp["dtype"])
    return out


def manifest_models(folder: Path, kinds: Optional[set] = None) -> list[Model]:
    man = folder / "manifest.json"
    if not man.exists():
        return []
    out = []
    for e in json.loads(man.read_text())["models"]:
        if kinds and not kinds & set(e.get("kinds", [])):
            continue
        seqs = e.get("seq") or sorted({v for d, vals in e.get("dims", {}).items() if d != "batch" for v in vals})[:1]
        cfg = e.get("source", {}).get("config", {})
        bert = "transformer" in e.get("kinds", []) and "num_attention_heads" in cfg  # the real models' BERTs
        out.append(Model(e["name"], folder / e["file"], lambda s, e=e: _entry_feeds(e, s), seqs or [0],
                         e.get("model_type") or ("bert" if bert else None),
                         e.get("num_heads") or cfg.get("num_attention_heads", 0),
                         e.get("hidden_size") or cfg.get("hidden_size", 0)))
    return out


def zoo_models(tmp: Path) -> list[Model]:
    from taso_tvm import zoo
    from taso_tvm.runtime.check import random_feeds

    out = []
    for name in ("squeezenet", "resnet50", "bert", "nasrnn"):
        path = tmp / f"zoo_{name}.onnx"
        onnx.save(zoo.get_model(name), str(path))
        out.append(Model(f"zoo_{name}", path, lambda s, p=path: random_feeds(onnx.load(str(p))), [0]))
    return out


# ------------------------------------------------------------------------------------------- the limit
def matmul_flops(model: onnx.ModelProto, feeds: dict) -> float:
    """Floating-point operations of the model's MatMul / Gemm / Conv nodes at these inputs (a multiply-add counts 2).
    The shapes are those ONNX Runtime computes (a run with every operand read out), not shape inference's, which
    loses dims in torch's dynamo exports."""
    import onnxruntime as ort

    g = model.graph
    inits = {t.name: list(t.dims) for t in g.initializer}
    ops = [n for n in g.node if n.op_type in ("MatMul", "Gemm", "Conv", "FusedConv")]
    want = list(dict.fromkeys(x for n in ops for x in list(n.input[:2]) + [n.output[0]] if x and x not in inits))
    m = copy.deepcopy(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_empty_tensor_value_info(x) for x in want if x not in have)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes = dict(inits)
    shapes.update({k: list(np.shape(v)) for k, v in zip(names, sess.run(names, feeds)) if k in want})
    total = 0.0
    for n in ops:
        a, w, y = shapes.get(n.input[0]), shapes.get(n.input[1]), shapes.get(n.output[0])
        if a is None or w is None or y is None:
            continue
        if n.op_type == "MatMul":
            total += 2.0 * np.prod(y) * a[-1]
        elif n.op_type == "Gemm":
            trans_a = next((at.i for at in n.attribute if at.name == "transA"), 0)
            total += 2.0 * np.prod(y) * (a[0] if trans_a else a[-1])
        else:
            total += 2.0 * np.prod(y) * np.prod(w[1:])
    return float(total)


GEMM_SHAPES = ((GEMM, GEMM, GEMM), (128, 768, 3072), (512, 768, 768))  # (M, K, N): the issue's, and BERT's own


def gemm_peak_gflops(time_cap: float) -> float:
    """The machine's GEMM peak in GFLOP/s: ONNX Runtime's MatMul (fp32, THREADS threads, spinning off, constant
    weights as in a model) at GEMM^3 and at transformer shapes, the best of their fastest runs (a large square GEMM
    runs out of cache on small CPUs, where a model's own GEMMs do not)."""
    rng = np.random.default_rng(0)
    best = 0.0
    for m_, k_, n_ in GEMM_SHAPES:
        a = helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [m_, k_])
        y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [m_, n_])
        w = numpy_helper.from_array(rng.standard_normal((k_, n_)).astype(np.float32), "w")
        g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "gemm", [a], [y], [w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        sess = ort_session(m.SerializeToString(), threads=THREADS, spin=False)
        x = rng.standard_normal((m_, k_)).astype(np.float32)
        lat = measure(ort_runner(sess, {"a": x}), "gemm", time_cap=time_cap / len(GEMM_SHAPES), max_rounds=400)
        best = max(best, 2.0 * m_ * k_ * n_ / lat.p5 / 1e9)  # the fastest runs: what the machine gives
    return best


# ------------------------------------------------------------------------------------------- the tools
def run_onnxsim(src: Path, dst: Path) -> None:
    import onnxsim

    out, ok = onnxsim.simplify(str(src))
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    onnx.save(out, str(dst))


def run_ort_opt(m: Model, src: Path, dst: Path) -> None:
    if not m.model_type:
        raise RuntimeError("not a transformer the optimizer knows")
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(src), model_type=m.model_type, num_heads=m.num_heads, hidden_size=m.hidden_size,
                         opt_level=0)
    opt.save_model_to_file(str(dst))


def run_taso(src: Path, dst: Path, feeds: dict, time_cap: float) -> str:
    from taso_tvm.onnx_opt import optimize_onnx

    model = onnx.load(str(src))
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    out, report = optimize_onnx(model, shapes=shapes, inputs=feeds, time_cap=time_cap, threads=THREADS)
    onnx.save(out, str(dst))
    return report.decision


def _fused(path: Path) -> dict:
    counts: dict = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        if n.domain == "com.microsoft":
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def bench(m: Model, seq: int, work: Path, time_cap: float, guard_cap: float, peak: float) -> list[Cell]:
    feeds = m.feeds(seq)
    cells = {v: Cell(v) for v in VARIANTS}
    paths = {"original": m.path}
    steps = [("onnxsim", lambda d: run_onnxsim(m.path, d)), ("ort-opt", lambda d: run_ort_opt(m, m.path, d)),
             ("taso", lambda d: run_taso(m.path, d, feeds, guard_cap)),
             ("ort-opt+taso", lambda d: run_taso(paths["ort-opt"], d, feeds, guard_cap))]
    for v, fn in steps:
        dst = work / f"{m.name}_{seq}_{v}.onnx"
        t0 = time.monotonic()
        try:
            if v == "ort-opt+taso" and "ort-opt" not in paths:
                raise RuntimeError("no ORT optimizer output")
            note = fn(dst)
            paths[v] = dst
            cells[v].note = note or ""
        except Exception as e:  # a tool's failure is a table entry
            cells[v].ok, cells[v].note = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
        cells[v].tool_seconds = time.monotonic() - t0
    want = run_onnx(onnx.load(str(m.path)), feeds)
    runners, names = [], []
    for v in VARIANTS:
        if v not in paths:
            continue
        c = cells[v]
        try:
            if v != "original":
                compare_outputs(run_onnx(onnx.load(str(paths[v])), feeds), want, rtol=1e-3, atol=1e-4)
            sess = ort_session(str(paths[v]), threads=THREADS, spin=False)
            runners.append(ort_runner(sess, feeds))
            names.append(v)
            c.fused = _fused(paths[v])
        except (CheckFailed, Exception) as e:  # noqa: BLE001  (does not load, or differs)
            c.ok, c.note = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
    res = compare(*runners, names=names, time_cap=time_cap)
    flops = matmul_flops(onnx.load(str(m.path)), feeds)
    lat = {lt.name: lt for lt in res.latencies}
    for r in res.ratios:
        cells[r.candidate].ratio, cells[r.candidate].ci = r.ratio, r.ci
    cells["original"].ratio, cells["original"].ci = 1.0, (1.0, 1.0)
    for v, lt in lat.items():
        c = cells[v]
        c.median_ms = lt.median * 1e3
        c.gflops = flops / lt.median / 1e9
        c.peak_share = c.gflops / peak if peak else float("nan")
    best_peer = min((cells[p].ratio for p in PEERS if p in lat), default=1.0)
    best_peer = min(best_peer, 1.0)  # a peer slower than the original is not what a user would keep
    for v in lat:
        cells[v].vs_peer = cells[v].ratio / best_peer
    log.info("%s seq %s: %s", m.name, seq, res.summary())
    return list(cells.values())


# ------------------------------------------------------------------------------------------- report
def machine() -> str:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return f"{cpu}, {os.cpu_count()} logical cores, load {os.getloadavg()[0]:.1f}, {THREADS} ORT threads"


def _inv(x: float) -> float:
    """A latency ratio as a speedup (an unbounded interval end stays unbounded)."""
    return float("inf") if x == 0 else 1.0 / x


def markdown(rows: list, peak: float) -> str:
    lines = [f"Machine: {machine()}; GEMM peak (ONNX Runtime MatMul, best of {GEMM}^3 and BERT's shapes): "
             f"**{peak:.0f} GFLOP/s**.", "",
             "| model | seq | GFLOP | " + " | ".join(VARIANTS) + " |", "|---|---|---|" + "---|" * len(VARIANTS)]
    for r in rows:
        cells = []
        for c in r["cells"]:
            if not c["ok"]:
                cells.append(f"failed: {c['note'][:60]}")
                continue
            if c["variant"] == "original":
                s = f"{c['median_ms']:.3g} ms, {c['gflops'] / peak:.0%} of peak"
            else:
                s = f"{_inv(c['ratio']):.3f}x [{_inv(c['ci'][1]):.3f}, {_inv(c['ci'][0]):.3f}]"
                if c["variant"].endswith("taso"):
                    s += f", **{_inv(c['vs_peer']):.3f}x vs best peer**"
                s += f", {c['gflops'] / peak:.0%}, tool {c['tool_seconds']:.0f} s"
            if c["fused"]:
                s += "<br>" + ", ".join(f"{k} {v}" for k, v in sorted(c["fused"].items()))
            cells.append(s)
        lines.append(f"| {r['model']} | {r['seq']} | {r['gflop']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Speedups are original latency / variant latency (median of per-round ratios, 95 % interval), "
              "all variants timed in one alternating run per row; '% of peak' is FLOPs / latency over the GEMM "
              "peak; 'vs best peer' compares with the faster of onnxsim and ORT's optimizer (or the original when "
              "both are slower)."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="model names (default: all of the set)")
    p.add_argument("--set", default="peers", choices=["peers", "real", "zoo", "all"])
    p.add_argument("--seq", type=int, nargs="*", help="sequence lengths (default: each model's own)")
    p.add_argument("--time-cap", type=float, default=60.0, help="seconds of alternating timing per row")
    p.add_argument("--guard-cap", type=float, default=20.0, help="taso-tvm's own never-slower timing cap")
    p.add_argument("--md", type=Path, default=ROOT / "benchmarks" / "results" / "peers.md")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "peers.json")
    p.add_argument("--append", action="store_true", help="add the rows to those already in --json (replacing rows of the same model and sequence length)")
    p.add_argument("--models-dir", type=Path, action="append", default=[],
                   help="more model folders with a manifest.json in make_peer_models.py's format (e.g. the paddle "
                        "encoders of benchmarks/peers/paddle_encoder.py); their models join the peers' set")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        work = Path(tmp)
        models: list[Model] = []
        if a.set in ("peers", "all"):
            models += manifest_models(Path(os.environ.get("TASO_TVM_PEER_MODELS",
                                                          Path.home() / ".cache" / "taso_tvm" / "peer_models")))
            for folder in a.models_dir:
                models += manifest_models(folder)
        if a.set in ("real", "all"):
            models += manifest_models(ROOT / "tests" / "data" / "real_models")
        if a.set in ("zoo", "all"):
            models += zoo_models(work)
        if a.names:
            models = [m for m in models if m.name in a.names]
        if not models:
            print("no models: run benchmarks/peers/make_peer_models.py first (or --set real / zoo)", file=sys.stderr)
            return 2
        peak = gemm_peak_gflops(min(20.0, a.time_cap))
        rows = json.loads(a.json.read_text())["rows"] if a.append and a.json.exists() else []
        for m in models:
            for seq in (a.seq or m.seqs):
                cells = bench(m, seq, work, a.time_cap, a.guard_cap, peak)
                feeds = m.feeds(seq)
                rows = [r for r in rows if (r["model"], r["seq"]) != (m.name, seq)]  # a re-run supersedes a row
                rows.append({"model": m.name, "seq": seq, "gflop": matmul_flops(onnx.load(str(m.path)), feeds) / 1e9,
                             "cells": [asdict(c) for c in cells]})
                a.md.parent.mkdir(parents=True, exist_ok=True)
                a.md.write_text(markdown(rows, peak))
                a.json.write_text(json.dumps({"machine": machine(), "gemm_peak_gflops": peak, "rows": rows},
                                             indent=1, default=float) + "\n")
                print(markdown(rows[-1:], peak).splitlines()[-3], flush=True)
    print(f"wrote {a.md} and {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
