"""taso-tvm next to the tools users would pick instead, side by side in ONNX Runtime (issue #21's benchmark).

For each model and sequence length: the original; onnxsim; ONNX Runtime's transformer optimizer
(`onnxruntime.transformers.optimizer.optimize_model`, opt_level 0); taso-tvm (`optimize_onnx`, as `taso-tvm
optimize` runs it, its never-slower guard included); and taso-tvm on top of ONNX Runtime's optimizer. Each tool's
wall time is recorded; each output is compared with the original's in ONNX Runtime on the same valid inputs; all
variants are timed in ONE alternating comparison (single runs in a fresh random order each round, 2 intra-op
threads, all graph optimizations, thread spinning off for every session: `taso_tvm.runtime.timing`). The limit is
measured in the same run: ONNX Runtime's MatMul on 1024^3 fp32 gives the machine's GEMM peak, and each variant's
FLOPs over its latency its share of it.

    python benchmarks/bench_peers.py [NAMES] [--set peers|eager|classifiers|real|zoo|all] [--seq 128 512] [--time-cap 60]
        [--md benchmarks/results/peers.md] [--json benchmarks/results/peers.json] [--append] [--keep DIR]

Models: `benchmarks/peers/make_peer_models.py` writes the transformers into `$TASO_TVM_PEER_MODELS` (default
`~/.cache/taso_tvm/peer_models`); `--set peers` takes those exported without eager attention, `--set eager` the
eager-attention exports (issue 28: the form ORT's optimizer was built for), `--set classifiers` the sequence
classifiers (issue 34: logits read from the [CLS] row), `--set real` the committed real models
(tests/data/real_models), `--set zoo` the zoo's models. A tool that fails, or whose output does not load or differs,
is a table entry saying so. A model with no sequence dim (ViT) keeps its own token count whatever `--seq` says.

Each cell lists the `com.microsoft` operators of the file the tool wrote ("wrote") and of the graph ONNX Runtime's
session makes of it at ORT_ENABLE_EXTENDED ("session": ORT fuses Gelu, SkipLayerNormalization, FusedMatMul, ... by
itself). taso-tvm's cells give its speed against the best peer with that ratio's own interval; a row on an encoder
where ORT's optimizer fused no attention is flagged and not counted as ahead. Tool times are wall-clock, end to end
(load, run, save) in this process.
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
from typing import Any, Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taso_tvm.runtime.check import CheckFailed, compare_outputs, run_onnx  # noqa: E402
from taso_tvm.runtime.timing import compare, in_turn, measure, ort_runner, ort_session  # noqa: E402

log = logging.getLogger("bench_peers")
VARIANTS = ("original", "onnxsim", "ort-opt", "taso", "ort-opt+taso")
PEERS = ("onnxsim", "ort-opt")
ATTENTION_OPS = frozenset({"Attention", "MultiHeadAttention", "PackedAttention", "PackedMultiHeadAttention",
                           "GroupQueryAttention", "DecoderMaskedSelfAttention", "DecoderMaskedMultiHeadAttention"})
NO_ATTENTION_FLAG = "peer fused no attention: not counted as ahead"
GEMM = 1024
THREADS = 2
SESSIONS = 4  # sessions of each variant the timing runs in turn: where ONNX Runtime places a session's buffers moves
# its runs by several % (six sessions of one decoder file: medians up to 6.6 % apart), so a ratio of two single
# sessions measures their placements as much as the files
SESSION_BYTES = 8 << 30  # the files' bytes (model and data) the sessions may hold at once; fewer sessions beyond it


@dataclass
class Model:
    name: str
    path: Path
    feeds: Callable[[int], dict]  # sequence length -> inputs
    seqs: list
    model_type: Optional[str] = None  # for ORT's transformer optimizer
    num_heads: int = 0
    hidden_size: int = 0
    has_seq: bool = True  # a symbolic sequence dim (False: images, whose token count is fixed)
    encoder: bool = False  # an encoder ORT's optimizer should fuse attention in (BERT family, ViT)


@dataclass
class ToolCell:
    """One tool's entry of a row: whether its file was written and checked, what it said, its wall time, latency."""

    variant: str
    ok: bool = True
    note: str = ""
    tool_seconds: float = 0.0
    median_ms: float = float("nan")


@dataclass
class Cell(ToolCell):
    ratio: float = float("nan")  # to the original
    ci: tuple = (float("nan"), float("nan"))
    vs_peer: float = float("nan")  # latency ratio to the best peer (< 1: faster than it)
    vs_peer_ci: tuple = (float("nan"), float("nan"))  # that ratio's interval (same error rate as `ci`)
    best_peer: str = ""  # the variant vs_peer is against (a peer, or the original when both peers are slower)
    gflops: float = float("nan")
    peak_share: float = float("nan")
    fused: dict = field(default_factory=dict)  # com.microsoft op type -> count, in the file the tool wrote
    session_fused: dict = field(default_factory=dict)  # the same in ORT's session graph at ORT_ENABLE_EXTENDED


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


def is_eager(entry: dict) -> bool:
    """An eager-attention export of make_peer_models.py (issue 28's set)."""
    return "eager" in entry.get("kinds", []) or "_eager" in entry["name"]


def manifest_models(folder: Path, kinds: Optional[set] = None,
                    eager: Optional[bool] = None, classifiers: Optional[bool] = False) -> list[Model]:
    """The models of a manifest.json; `kinds`: those with one of these kinds; `eager`: only the eager-attention
    exports (True) or only the others (False); `classifiers`: only the sequence classifiers (True, issue 34's set),
    none of them (False), or both (None)."""
    man = folder / "manifest.json"
    if not man.exists():
        return []
    out = []
    for e in json.loads(man.read_text())["models"]:
        if kinds and not kinds & set(e.get("kinds", [])):
            continue
        if eager is not None and is_eager(e) != eager:
            continue
        if classifiers is not None and ("classifier" in e.get("kinds", [])) != classifiers:
            continue
        seqs = e.get("seq") or sorted({v for d, vals in e.get("dims", {}).items() if d != "batch" for v in vals})[:1]
        cfg = e.get("source", {}).get("config", {})
        bert = "transformer" in e.get("kinds", []) and "num_attention_heads" in cfg  # the real models' BERTs
        model_type = e.get("model_type") or ("bert" if bert else None)
        has_seq = any(isinstance(d, str) and d != "batch" for i in e["inputs"] for d in i["shape"])
        out.append(Model(e["name"], folder / e["file"], lambda s, e=e: _entry_feeds(e, s), seqs or [0],
                         model_type, e.get("num_heads") or cfg.get("num_attention_heads", 0),
                         e.get("hidden_size") or cfg.get("hidden_size", 0), has_seq,
                         e.get("encoder", model_type in ("bert", "vit"))))
    return out


def zoo_models(tmp: Path) -> list[Model]:
    from taso_tvm import zoo
    from taso_tvm.runtime.check import random_feeds

    out = []
    for name in ("squeezenet", "resnet50", "bert", "nasrnn"):
        path = tmp / f"zoo_{name}.onnx"
        onnx.save(zoo.get_model(name), str(path))
        out.append(Model(f"zoo_{name}", path, lambda s, p=path: random_feeds(onnx.load(str(p))), [0],
                         has_seq=False))
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


def run_tool(cell: Any, fn: Callable[[Path], Optional[str]], dst: Path) -> bool:
    """Run one tool writing `dst`, into `cell` (a Cell with ok, note, tool_seconds): its wall time, and what it said
    (`fn`'s return) or why it failed (a tool's failure is a table entry); whether it wrote its file."""
    t0 = time.monotonic()
    try:
        cell.note = fn(dst) or ""
    except Exception as e:  # noqa: BLE001
        cell.ok, cell.note = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
    cell.tool_seconds = time.monotonic() - t0
    return cell.ok


def checked_runners(cells: dict, paths: dict, order: Sequence[str], feeds: dict,
                    note: Callable[[Any, Path], None]) -> tuple[list, list]:
    """(runners, names) of the variants' files (`paths`, "original" among them) in `order`, each checked against
    the original's outputs first: a file that does not load or differs is its cell's failure, not a runner.
    `note(cell, path)` records what a checked file holds. Each runner runs its file in SESSIONS sessions in turn
    (fewer where the files would hold more than SESSION_BYTES), made in turns across the variants."""
    want = run_onnx(str(paths["original"]), feeds)  # by path: a model over 2 GB reads its weights from its data file
    checked, names = [], []
    for v in order:
        if v not in paths:
            continue
        c = cells[v]
        try:
            if v != "original":
                compare_outputs(run_onnx(str(paths[v]), feeds), want, rtol=1e-3, atol=1e-4)
            checked.append([ort_runner(ort_session(str(paths[v]), threads=THREADS, spin=False), feeds)])
            names.append(v)
        except (CheckFailed, Exception) as e:  # noqa: BLE001  (does not load, or differs)
            c.ok, c.note = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
            continue
        note(c, paths[v])
    held = sum(_file_bytes(paths[v]) for v in names)
    for _ in range(1, max(1, min(SESSIONS, SESSION_BYTES // max(held, 1)))):
        for v, runs in zip(names, checked):
            runs.append(ort_runner(ort_session(str(paths[v]), threads=THREADS, spin=False), feeds))
            runs[-1]()  # its first run (buffers allocated) before any is timed, as compare's warm-up does the first
    return [in_turn(runs) for runs in checked], names


def _file_bytes(path: Path) -> int:
    """A model file's bytes with those of the data files beside it that it names."""
    m = onnx.load(str(path), load_external_data=False)
    files = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
    return Path(path).stat().st_size + sum((Path(path).parent / f).stat().st_size for f in files)


def fused_counts(model: Any) -> dict:
    """`com.microsoft` operator type -> count in the model's main graph (`model`: a ModelProto or a path)."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    counts: dict = {}
    for n in model.graph.node:
        if n.domain == "com.microsoft":
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items()))


def session_fused_counts(path: Path, level: str = "extended") -> dict:
    """`fused_counts` of the graph ONNX Runtime's CPU session makes of the model at this optimization level
    (basic | extended | all), written out with `optimized_model_filepath`: what ORT fuses by itself (Gelu,
    SkipLayerNormalization, FusedMatMul, Attention, ...), whoever wrote the file."""
    import onnxruntime as ort

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    with tempfile.TemporaryDirectory(prefix="bench_peers_session_") as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = levels[level]
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        opts.optimized_model_filepath = os.path.join(tmp, "session.onnx")
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return fused_counts(Path(opts.optimized_model_filepath))


def attention_fused(counts: dict) -> bool:
    return any(k in ATTENTION_OPS for k in counts)


def row_flags(m: Model, cells: dict) -> list:
    """Why a row's taso-tvm cell does not count as ahead of the peers, whatever its ratio."""
    peer = cells.get("ort-opt")
    if m.encoder and peer is not None and peer.ok and not attention_fused(peer.fused):
        return [NO_ATTENTION_FLAG]
    return []


def bench(m: Model, seq: int, work: Path, time_cap: float, guard_cap: float, peak: float) -> list[Cell]:
    feeds = m.feeds(seq)
    cells = {v: Cell(v) for v in VARIANTS}
    paths = {"original": m.path}
    steps = [("onnxsim", lambda d: run_onnxsim(m.path, d)), ("ort-opt", lambda d: run_ort_opt(m, m.path, d)),
             ("taso", lambda d: run_taso(m.path, d, feeds, guard_cap)),
             ("ort-opt+taso", lambda d: run_taso(paths["ort-opt"], d, feeds, guard_cap))]
    for v, fn in steps:
        dst = work / f"{m.name}_{seq}_{v}.onnx"
        if v == "ort-opt+taso" and "ort-opt" not in paths:
            cells[v].ok, cells[v].note = False, "RuntimeError: no ORT optimizer output"
        elif run_tool(cells[v], fn, dst):
            paths[v] = dst
    def note(c: Cell, path: Path) -> None:
        c.fused = fused_counts(path)
        try:
            c.session_fused = session_fused_counts(path)
        except Exception as e:  # noqa: BLE001  (the optimized graph could not be written: the cell still counts)
            log.warning("%s %s: no session graph (%s)", m.name, c.variant, e)

    runners, names = checked_runners(cells, paths, VARIANTS, feeds, note)
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
    # the best peer: the faster of the peers, or the original when both are slower (not what a user would keep)
    best = min((p for p in PEERS if p in lat), key=lambda p: cells[p].ratio, default="original")
    if cells[best].ratio > 1.0:
        best = "original"
    for v in lat:
        c = cells[v]
        c.best_peer = best
        c.vs_peer = c.ratio / cells[best].ratio
        if v == best:
            c.vs_peer_ci = (1.0, 1.0)
        elif v != "original":
            r = res.between(names.index(best), names.index(v))
            c.vs_peer, c.vs_peer_ci = r.ratio, r.ci
    log.info("%s seq %s: %s", m.name, seq, res.summary())
    _FLOPS[(str(m.path), seq)] = flops
    return list(cells.values())


_FLOPS: dict = {}  # (model path, seq) -> matmul_flops, as bench computed it


def row_of(m: Model, seq: int, cells: list) -> dict:
    """The json row of one model at one sequence length."""
    by = {c.variant: c for c in cells}
    flops = _FLOPS.get((str(m.path), seq))
    if flops is None:
        flops = matmul_flops(onnx.load(str(m.path)), m.feeds(seq))
    flags = row_flags(m, by)
    taso = by.get("taso")
    ahead = None if flags or taso is None or not taso.ok else bool(taso.vs_peer_ci[1] < 1.0)
    return {"model": m.name, "seq": seq, "gflop": flops / 1e9, "encoder": m.encoder, "flags": flags,
            "ahead": ahead, "cells": [asdict(c) for c in cells]}


# ------------------------------------------------------------------------------------------- report
def write_results(md: Path, js: Path, text: str, rows: list, **meta: Any) -> None:
    """The benchmark's markdown and its JSON (this machine, `meta`, the rows), written after every row."""
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    js.write_text(json.dumps({"machine": machine(), **meta, "rows": rows}, indent=1, default=float) + "\n")


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
             "| model | seq | GFLOP | " + " | ".join(VARIANTS) + " | notes |",
             "|---|---|---|" + "---|" * len(VARIANTS) + "---|"]
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
                    lo, hi = c.get("vs_peer_ci", (float("nan"),) * 2)
                    if lo == lo:  # rows from before the interval was kept have none
                        s += f" [{_inv(hi):.3f}, {_inv(lo):.3f}] ({c.get('best_peer', '')})"
                s += f", {c['gflops'] / peak:.0%}, tool {c['tool_seconds']:.0f} s"
                if c["variant"].endswith("taso") and c["note"]:  # what it wrote (its guard's decision)
                    s += f"<br>{c['note'][:90]}"
            if c["fused"]:
                s += "<br>wrote: " if c.get("session_fused") else "<br>"
                s += ", ".join(f"{k} {v}" for k, v in sorted(c["fused"].items()))
            elif c.get("session_fused") and c["variant"] != "original":
                s += "<br>wrote: no com.microsoft op"
            if c.get("session_fused"):
                s += "<br>session: " + ", ".join(f"{k} {v}" for k, v in sorted(c["session_fused"].items()))
            cells.append(s)
        notes = list(r.get("flags", []))
        if r.get("ahead") is not None:
            notes.append("taso-tvm ahead of the best peer" if r["ahead"] else "taso-tvm not ahead")
        lines.append(f"| {r['model']} | {r['seq']} | {r['gflop']:.1f} | " + " | ".join(cells) + " | "
                     + "; ".join(notes) + " |")
    lines += ["", "Speedups are original latency / variant latency (median of per-round ratios, 95 % interval), "
              "all variants timed in one alternating run per row; '% of peak' is FLOPs / latency over the GEMM "
              "peak; 'vs best peer' compares with the faster of onnxsim and ORT's optimizer (or the original when "
              "both are slower), with the interval of that ratio itself and the peer it is against. 'wrote': the "
              "com.microsoft operators of the file the tool wrote; 'session': those of the graph ONNX Runtime's "
              "session runs at ORT_ENABLE_EXTENDED (its own fusions added). 'ahead': the interval against the best "
              "peer is above 1; an encoder row where ORT's optimizer fused no attention is not counted."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="model names (default: all of the set), run in the order given; "
                   "NAME@128 or NAME@128,512: that model at these sequence lengths only (over --seq)")
    p.add_argument("--set", default="peers", choices=["peers", "eager", "classifiers", "real", "zoo", "all"],
                   help="peers: the exports without eager attention; eager: issue 28's eager-attention exports; "
                        "classifiers: issue 34's sequence classifiers")
    p.add_argument("--seq", type=int, nargs="*", help="sequence lengths (default: each model's own)")
    p.add_argument("--time-cap", type=float, default=60.0, help="seconds of alternating timing per row")
    p.add_argument("--guard-cap", type=float, default=20.0, help="taso-tvm's own never-slower timing cap")
    p.add_argument("--md", type=Path, help="default benchmarks/results/peers.md (--set eager: peers_eager.md)")
    p.add_argument("--json", type=Path, help="default benchmarks/results/peers.json (--set eager: peers_eager.json)")
    p.add_argument("--append", action="store_true", help="add the rows to those already in --json (replacing rows of the same model and sequence length)")
    p.add_argument("--dry-run", action="store_true", help="list the rows (model, seq) it would run, and stop")
    p.add_argument("--keep", type=Path, help="keep the files the tools wrote in this folder "
                   "(NAME_SEQ_VARIANT.onnx; benchmarks/profile_ops.py --from reads them)")
    p.add_argument("--models-dir", type=Path, action="append", default=[],
                   help="more model folders with a manifest.json in make_peer_models.py's format (e.g. the paddle "
                        "encoders of benchmarks/peers/paddle_encoder.py); their models join the peers' set")
    a = p.parse_args(argv)
    stem = {"eager": "peers_eager", "classifiers": "peers_classifiers"}.get(a.set, "peers")
    a.md = a.md or ROOT / "benchmarks" / "results" / f"{stem}.md"
    a.json = a.json or ROOT / "benchmarks" / "results" / f"{stem}.json"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        work = Path(tmp)
        models: list[Model] = []
        peer_dir = Path(os.environ.get("TASO_TVM_PEER_MODELS",
                                       Path.home() / ".cache" / "taso_tvm" / "peer_models"))
        if a.set in ("peers", "all"):
            models += manifest_models(peer_dir, eager=None if a.set == "all" else False)
            for folder in a.models_dir:
                models += manifest_models(folder, classifiers=None)
        if a.set == "eager":
            models += manifest_models(peer_dir, eager=True)
        if a.set in ("classifiers", "all"):
            models += manifest_models(peer_dir, classifiers=True)
        if a.set in ("real", "all"):
            models += manifest_models(ROOT / "tests" / "data" / "real_models", classifiers=None)
        if a.set in ("zoo", "all"):
            models += zoo_models(work)
        plan = [(m, None) for m in models]  # (model, its sequence lengths when the name gave them)
        if a.names:
            by_name = {m.name: m for m in models}
            asked = [(n.partition("@")[0], n.partition("@")[2]) for n in a.names]
            unknown = sorted({n for n, _ in asked} - set(by_name))
            if unknown:
                print(f"not in --set {a.set}: {', '.join(unknown)}", file=sys.stderr)
                return 2
            plan = [(by_name[n], [int(x) for x in seqs.split(",")] if seqs else None) for n, seqs in asked]
        if a.dry_run:
            for m, seqs in plan:
                for seq in ((seqs or a.seq) if m.has_seq else None) or m.seqs:
                    print(f"{m.name} {seq} ({m.path.stat().st_size / 1e6:.0f} MB)")
            return 0
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            work = a.keep
        if not models:
            print("no models: run benchmarks/peers/make_peer_models.py first (or --set real / zoo)", file=sys.stderr)
            return 2
        peak = gemm_peak_gflops(min(20.0, a.time_cap))
        rows = json.loads(a.json.read_text())["rows"] if a.append and a.json.exists() else []
        t_all = time.monotonic()
        for m, seqs in plan:
            for seq in ((seqs or a.seq) if m.has_seq else None) or m.seqs:
                t0 = time.monotonic()
                cells = bench(m, seq, work, a.time_cap, a.guard_cap, peak)
                rows = [r for r in rows if (r["model"], r["seq"]) != (m.name, seq)]  # a re-run supersedes a row
                rows.append(row_of(m, seq, cells))
                rows[-1]["row_seconds"] = time.monotonic() - t0
                write_results(a.md, a.json, markdown(rows, peak), rows, gemm_peak_gflops=peak)
                print(markdown(rows[-1:], peak).splitlines()[-3], flush=True)
                print(f"({m.name} seq {seq}: {rows[-1]['row_seconds']:.0f} s)", flush=True)
    print(f"wrote {a.md} and {a.json} ({time.monotonic() - t_all:.0f} s after the GEMM peak)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
