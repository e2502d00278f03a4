"""Decoder LLMs (issue 35): each prefill and decode-step export next to the peers a user would run instead, and next
to onnxruntime-genai's model builder graph of the same checkpoint (the hand-written reference), side by side in
ONNX Runtime, with how many attention blocks, RMS norms and GELUs each tool's file runs fused.

Rows: the `*_prefill` and `*_decode` exports of `benchmarks/peers/make_decoder_models.py` (Llama at SmolLM2-135M's
shape, Qwen2, Phi-3, Gemma, Mistral; `$TASO_TVM_DECODER_MODELS`, default `~/.cache/taso_tvm/decoder_models`), or with
`--tiny` the committed tiny copies in `tests/data/decoders`; NAMES picks some (any form of the manifest but `genai`:
`llama_eager_decode` too). Each row is bound at batch 1: a prefill at `--seq` tokens (attention_mask all ones), a
decode step at `--past` cached positions (input_ids [1, 1], attention_mask [1, past + 1] all ones, every
past_key_values tensor random normal), input_ids random in the vocabulary.

Columns (variants), every file checked against the original's outputs in ONNX Runtime (rtol 1e-3, atol 1e-4 scaled
as `taso_tvm.runtime.check` does), then all timed in ONE alternating run per row (single runs in a fresh random order
each round, 2 intra-op threads, thread spinning off for every session: `taso_tvm.runtime.timing.compare`):

    original    the torch dynamo export as it is
    onnxscript  onnxscript's ORT fusions (`onnxscript.rewriter.ort_fusions.optimize_for_ort`)
    ort-opt     ONNX Runtime's transformer optimizer (`optimize_model`, opt_level 0) with `--ort-model-type`
                (default gpt2: ONNX Runtime 1.32 has no llama / mistral / gemma / phi3 model type, and gpt2 is the
                type its own Llama recipe, `onnxruntime.transformers.models.llama.convert_to_onnx`, optimizes with;
                `--ort-model-type none` leaves the column out)
    genai       the family's `{family}_genai` graph of the manifest (onnxruntime-genai's builder, same weights:
                GroupQueryAttention with the rotary inside, SkipSimplifiedLayerNormalization). Its inputs differ:
                it is fed the row's input_ids and attention_mask, the same past_key_values arrays by name for a
                decode step and, for a prefill, past tensors of length 0 ([1, kv_heads, 0, head_dim]). The original's
                outputs (the logits; a decode step's present.* too) are compared by name; its extra outputs (a
                prefill's presents) are not. A genai graph beyond the tolerance is still timed, with its largest
                difference in its cell, but is never the best peer
    taso        taso-tvm as `taso-tvm optimize` runs it (read with its weights as references, its never-slower guard
                included, the peers' fusions and the search from each among its candidates, written with its data
                file as the CLI writes it)
    taso-own    taso-tvm with `--no-peer-starts` (the search from the original only)

    python benchmarks/bench_decoders.py [NAMES] [--tiny] [--seq 128] [--past 128] [--time-cap 40] [--guard-cap 20]
        [--ort-model-type gpt2] [--md benchmarks/results/decoders.md] [--json benchmarks/results/decoders.json]
        [--append] [--keep DIR]

Each cell: speedup over the original [95 %] (the original's: its median latency), the tool's wall time, the layers
its file runs fused (`taso_tvm.onnx_opt.fused_census`: attn, LN (RMS norms count as layer norms), GELU (QuickGelu,
i.e. a fused SiLU, included), and any other kind it counts (rotary): a of b).
taso-tvm's cells add its speedup over the best peer (the fastest of onnxscript, ort-opt and genai; the original when
all are slower) with that ratio's own interval, and over genai and onnxscript. The summary: the rows where taso-tvm's
interval against the best peer reaches 1, the medians of its ratio to the best peer, to the genai builder and to
onnxscript, and the rows where it trails (its interval below 1). `--tiny` writes `decoders_tiny.md/json` unless told.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_matrix import Cell, fill_timing, inverse, run_onnxscript, short_fused  # noqa: E402
from bench_peers import THREADS, checked_runners, machine, run_tool, write_results  # noqa: E402
from taso_tvm.onnx_opt.fused_census import fused_census  # noqa: E402
from taso_tvm.runtime.check import CheckFailed, compare_arrays, run_onnx  # noqa: E402
from taso_tvm.runtime.timing import compare, ort_runner, ort_session  # noqa: E402

log = logging.getLogger("bench_decoders")
PEERS = ("onnxscript", "ort-opt", "genai")
VARIANTS = ("original",) + PEERS + ("taso", "taso-own")
TASO = ("taso", "taso-own")
FORMS = ("prefill", "decode")  # the rows by default (NAMES may pick eager_prefill / eager_decode too)
TINY = ROOT / "tests" / "data" / "decoders"
RTOL, ATOL = 1e-3, 1e-4  # checked_runners' tolerances, used for the genai graph too
ORT_MODEL_TYPE = "gpt2"


@dataclass
class DecoderCell(Cell):
    absent: bool = False  # no such variant for this row (no genai graph; the ORT optimizer left out): not a failure
    vs: dict = field(default_factory=dict)  # taso-tvm's cells: peer -> [speedup over it, 95 % low, high]
    max_abs_diff: dict = field(default_factory=dict)  # genai: output -> largest |difference| from the original's
    within_tolerance: bool = True  # genai: all of its outputs within the tolerance (else never the best peer)


# ------------------------------------------------------------------------------------------- models and inputs
def models_dir(tiny: bool) -> Path:
    if tiny:
        return TINY
    return Path(os.environ.get("TASO_TVM_DECODER_MODELS", Path.home() / ".cache" / "taso_tvm" / "decoder_models"))


def read_manifest(folder: Path) -> dict:
    """name -> manifest entry (only those with a form: make_decoder_models.py's files)."""
    man = folder / "manifest.json"
    if not man.exists():
        return {}
    return {e["name"]: e for e in json.loads(man.read_text())["models"] if e.get("form")}


def genai_entry(entries: dict, family: str) -> Optional[dict]:
    """The family's genai graph in the same manifest (`{family}_genai`, `{family}_genai_tiny`)."""
    return next((e for e in entries.values() if e.get("form") == "genai" and e.get("family") == family), None)


def is_decode(entry: dict) -> bool:
    return entry["form"].endswith("decode")


def binding(entry: dict, seq: int, past: int) -> dict:
    """The row's values of the export's symbolic dims (the manifest writes the mask's length as 'past_sequence + 1')."""
    if is_decode(entry):
        return {"batch": 1, "past_sequence": past, "past_sequence + 1": past + 1}
    return {"batch": 1, "sequence": seq}


def genai_binding(entry: dict, genai: dict, seq: int, past: int) -> dict:
    """The genai graph's dims for the same step: a prefill from an empty cache, or one token after `past`."""
    step, before = (1, past) if is_decode(entry) else (seq, 0)
    return {"batch_size": 1, "sequence_length": step, "past_sequence_length": before,
            "total_sequence_length": before + step, "kv_cache_dim": genai["head_dim"]}


def _shape(inp: dict, dims: dict, where: str) -> list:
    out = []
    for d in inp["shape"]:
        if isinstance(d, str) and d not in dims:
            raise ValueError(f"{where}: input '{inp['name']}' has dim '{d}' this benchmark does not bind")
        out.append(dims[d] if isinstance(d, str) else int(d))
    return out


def row_feeds(entry: dict, dims: dict, seed: int = 0) -> dict:
    """input_ids random in the vocabulary, attention_mask all ones, float inputs (the past key/values) normal."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in entry["inputs"]:
        shape = _shape(inp, dims, entry["name"])
        if inp["dtype"].startswith("float"):
            out[inp["name"]] = rng.standard_normal(shape).astype(inp["dtype"])
        elif inp["name"] == "attention_mask":
            out[inp["name"]] = np.ones(shape, inp["dtype"])
        else:
            lo, hi = inp.get("range", [0, entry.get("vocab_size", 2)])
            out[inp["name"]] = rng.integers(lo, hi, shape).astype(inp["dtype"])
    return out


def genai_feeds(genai: dict, dims: dict, feeds: dict) -> dict:
    """The genai graph's inputs for the row: the original's arrays by name (input_ids, attention_mask and, for a
    decode step, past_key_values.{i}.key / .value, which the builder names as the export does), and past tensors of
    length 0 where the original has none (a prefill). Any other input, or a shape that differs, is an error."""
    out = {}
    for inp in genai["inputs"]:
        name, shape = inp["name"], _shape(inp, dims, genai["name"])
        if name in feeds:
            if list(feeds[name].shape) != shape:
                raise ValueError(f"genai input '{name}' is {shape} at this binding, the original's "
                                 f"{list(feeds[name].shape)}")
            out[name] = feeds[name]
        elif name.startswith("past_key_values.") and shape[2] == 0:
            out[name] = np.zeros(shape, inp["dtype"])
        else:
            raise ValueError(f"genai input '{name}' {shape} has no counterpart among the original's inputs")
    return out


# ------------------------------------------------------------------------------------------- the tools
def has_external_data(path: Path) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in onnx.load(str(path), load_external_data=False).graph.initializer)


def run_onnxscript_decoder(src: Path, dst: Path) -> None:
    """bench_matrix's run_onnxscript; a source with external data (the full-size exports) is written with its own
    data file beside `dst` (one inline file would near or pass protobuf's 2 GB)."""
    if not has_external_data(src):
        return run_onnxscript(src, dst)
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, _ = optimize_for_ort(ir.load(str(src)))
    ir.save(model, str(dst), external_data=dst.name + ".data")
    return None


def run_ort_opt(entry: dict, model_type: str, src: Path, dst: Path) -> str:
    """ONNX Runtime's transformer optimizer at opt_level 0, as its own Llama recipe calls it; what it fused."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(src), model_type=model_type, num_heads=entry["num_heads"],
                         hidden_size=entry["hidden_size"], opt_level=0)
    opt.save_model_to_file(str(dst), use_external_data_format=has_external_data(src))
    return f"model_type {model_type}"


def run_taso(src: Path, dst: Path, feeds: dict, guard_cap: float, peer_starts: bool) -> str:
    """taso-tvm as `taso-tvm optimize SRC -o DST --inputs FEEDS [--no-peer-starts]` runs it: the model read with its
    weights as references, `optimize_onnx` (guard included), written as the CLI writes (`--external-data auto`)."""
    from taso_tvm.cli.common import save_model
    from taso_tvm.onnx_io import read_onnx
    from taso_tvm.onnx_opt import optimize_onnx

    proto, _ = read_onnx(str(src))
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    out, report = optimize_onnx(proto, shapes=shapes, inputs=feeds, time_cap=guard_cap, threads=THREADS,
                                peer_starts=peer_starts)
    save_model(out, str(dst), "auto", proto)
    return report.decision


# ------------------------------------------------------------------------------------------- one row
def census(path: Path) -> dict:
    return {k: list(t) for k, t in fused_census(onnx.load(str(path), load_external_data=False)).items()}


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"


def genai_runner(cell: DecoderCell, path: Path, feeds: dict, want: dict) -> Optional[Callable[[], Any]]:
    """The genai graph checked against the original's outputs `want` (by name; its extra outputs left out) and its
    runner on its own feeds; None when it does not load or run, or an output is missing or of another shape. A
    difference beyond the tolerance is kept in the cell (largest |difference| per output) and the graph still runs."""
    try:
        got = run_onnx(str(path), feeds)
        missing = [k for k in want if k not in got]
        if missing:
            raise CheckFailed(f"output '{missing[0]}' of the original is not among its outputs")
        for k in want:
            g, w = np.asarray(got[k]), np.asarray(want[k])
            if g.shape != w.shape:
                raise CheckFailed(f"output '{k}' has shape {g.shape}, the original {w.shape}")
            cell.max_abs_diff[k] = float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) if w.size else 0.0
        for k in want:
            try:
                compare_arrays(k, got[k], want[k], RTOL, ATOL)
            except CheckFailed as e:
                cell.within_tolerance = False
                cell.note = f"beyond tolerance: {_one_line(e)}"
                log.warning("genai graph %s: %s", path, cell.note)
                break
        run = ort_runner(ort_session(str(path), threads=THREADS, spin=False), feeds)
    except Exception as e:  # noqa: BLE001  (does not load or run, or does not match the original's outputs)
        cell.ok, cell.note = False, _one_line(e)
        return None
    cell.fused = census(path)
    return run


def bench(entry: dict, path: Path, genai: Optional[dict], folder: Path, seq: int, past: int, work: Path,
          time_cap: float, guard_cap: float, ort_model_type: Optional[str]) -> list[DecoderCell]:
    dims = binding(entry, seq, past)
    feeds = row_feeds(entry, dims)
    cells = {v: DecoderCell(v) for v in VARIANTS}
    paths = {"original": path}
    steps: list[tuple[str, Callable[[Path], Optional[str]]]] = [
        ("onnxscript", lambda d: run_onnxscript_decoder(path, d)),
        ("ort-opt", lambda d: run_ort_opt(entry, ort_model_type, path, d)),
        ("taso", lambda d: run_taso(path, d, feeds, guard_cap, True)),
        ("taso-own", lambda d: run_taso(path, d, feeds, guard_cap, False))]
    tag = f"{entry['name']}_{'past' if is_decode(entry) else 'seq'}{past if is_decode(entry) else seq}"
    for v, fn in steps:
        if v == "ort-opt" and not ort_model_type:
            cells[v].ok, cells[v].absent, cells[v].note = False, True, "left out by --ort-model-type none"
            continue
        dst = work / f"{tag}_{v}.onnx"
        t0 = time.monotonic()
        if run_tool(cells[v], fn, dst):
            paths[v] = dst
        log.info("%s %s: %.1f s %s", tag, v, time.monotonic() - t0, cells[v].note)

    def note(c: DecoderCell, p: Path) -> None:
        c.fused = census(p)

    order = [v for v in VARIANTS if v != "genai"]
    runners, names = checked_runners(cells, paths, order, feeds, note)
    g = cells["genai"]
    if genai is None:
        g.ok, g.absent, g.note = False, True, f"no {entry['family']} genai graph in the manifest"
    elif "original" in names:
        gpath = folder / genai["file"]
        try:
            gfeeds = genai_feeds(genai, genai_binding(entry, genai, seq, past), feeds)
        except ValueError as e:
            g.ok, g.note = False, _one_line(e)
        else:
            run = genai_runner(g, gpath, gfeeds, run_onnx(str(path), feeds))
            if run is not None:
                runners.append(run)
                names.append("genai")
    if "original" not in names:
        log.error("%s: the original does not run (%s)", tag, cells["original"].note)
        return list(cells.values())
    res = compare(*runners, names=names, time_cap=time_cap)
    fill_timing(cells, res)
    eligible = [p for p in PEERS if p in names and cells[p].within_tolerance]
    best = max(eligible, key=lambda p: cells[p].speedup, default="original")
    if cells[best].speedup < 1.0:
        best = "original"
    for v in TASO:
        if v not in names:
            continue
        c = cells[v]
        for other in ("original",) + PEERS:
            if other in names:
                r = res.between(names.index(other), names.index(v))
                c.vs[other] = [inverse(r.ratio), inverse(r.ci[1]), inverse(r.ci[0])]
        c.best_peer = best
        c.vs_best_peer, c.vs_best_peer_ci = c.vs[best][0], (c.vs[best][1], c.vs[best][2])
    log.info("%s: %s", tag, res.summary())
    return list(cells.values())


# ------------------------------------------------------------------------------------------- the report
def row_of(entry: dict, seq: int, past: int, cells: list[DecoderCell]) -> dict:
    cs = [asdict(c) for c in cells]
    taso = next(c for c in cells if c.variant == "taso")
    decode = is_decode(entry)
    return {"model": entry["name"], "family": entry.get("family", ""), "form": entry["form"], "batch": 1,
            "seq": 1 if decode else seq, "past": past if decode else 0,
            "binding": f"past {past}" if decode else f"seq {seq}", "cells": cs, "fewer_fused": fewer_fused(cs),
            "at_least_best_peer": bool(taso.vs_best_peer_ci[1] >= 1.0) if taso.ok and taso.best_peer else None}


def fewer_fused(cells: list) -> list:
    """The kinds where a peer's file (genai's included) runs more layers fused than taso-tvm's."""
    by = {c["variant"]: c for c in cells}
    taso = by.get("taso")
    if taso is None or not taso["ok"]:
        return []
    out = []
    for kind in sorted({k for c in cells if c["ok"] for k in c["fused"]}):
        mine = taso["fused"].get(kind, [0, 0])[0]
        most = max(((by[p]["fused"].get(kind, [0, 0])[0], p) for p in PEERS if by[p]["ok"]), default=(0, ""))
        if most[0] > mine:
            out.append(f"{kind} ({most[1]} {most[0]} > {mine})")
    return out


def _taso(r: dict, variant: str = "taso") -> Optional[dict]:
    c = next(c for c in r["cells"] if c["variant"] == variant)
    return c if c["ok"] and c["best_peer"] else None


def _median_line(rows: list, peer: str, label: str) -> str:
    vs = [c["vs"][peer] for r in rows for c in [_taso(r)] if c and peer in c["vs"]]
    if not vs:
        return f"- taso-tvm / {label}: no row with both timed"
    sp = [v[0] for v in vs]
    ahead = sum(v[1] > 1.0 for v in vs)
    behind = sum(v[2] < 1.0 for v in vs)
    return (f"- taso-tvm / {label}, median over {len(vs)} row(s): **{statistics.median(sp):.3f}x** (min {min(sp):.3f}, "
            f"max {max(sp):.3f}; faster on {ahead}, slower on {behind}, 95 % intervals)")


def summary(rows: list) -> list[str]:
    done = [r for r in rows if r["at_least_best_peer"] is not None]
    vs = [_taso(r)["vs_best_peer"] for r in done]
    own = [c["vs_best_peer"] for r in rows for c in [_taso(r, "taso-own")] if c]
    trails = [f"{r['model']} {r['binding']} ({c['vs_best_peer']:.3f}x {c['best_peer']}, up to "
              f"{c['vs_best_peer_ci'][1]:.3f})" for r in done for c in [_taso(r)] if c["vs_best_peer_ci"][1] < 1.0]
    fewer = [f"{r['model']}: {', '.join(r['fewer_fused'])}" for r in rows if r["fewer_fused"]]
    off = [f"{r['model']} ({c['note'][:80]})" for r in rows for c in r["cells"]
           if c["variant"] == "genai" and c["ok"] and not c["within_tolerance"]]
    return [f"- rows: {len(rows)}; taso-tvm's written file at least the best peer (its interval's upper end >= 1) "
            f"on {sum(r['at_least_best_peer'] for r in done)} of {len(done)}",
            f"- taso-tvm / best peer, median over the rows: **{statistics.median(vs):.3f}x** (min {min(vs):.3f}, "
            f"max {max(vs):.3f})" if vs else "- no taso-tvm cell",
            _median_line(rows, "genai", "the genai builder's graph"),
            _median_line(rows, "onnxscript", "onnxscript"),
            f"- searching from the original only (`--no-peer-starts`): median {statistics.median(own):.3f}x the "
            f"best peer" if own else "- no taso-own cell",
            "- rows where taso-tvm trails the best peer (interval below 1): " + ("; ".join(trails) or "none"),
            "- rows where a peer runs more layers of a kind fused than taso-tvm's file: "
            + ("; ".join(fewer) or "none"),
            "- genai graphs beyond the tolerance (timed, not a best peer): " + ("; ".join(off) or "none")]


def _cell_text(c: dict) -> str:
    if c.get("absent"):
        return f"n/a: {c['note'][:60]}"
    if not c["ok"]:
        return f"failed: {c['note'][:80]}"
    if c["variant"] == "original":
        head = f"{c['median_ms']:.3g} ms"
    else:
        head = f"{c['speedup']:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"
    if c["variant"] in TASO and c["best_peer"]:
        lo, hi = c["vs_best_peer_ci"]
        head += f", **{c['vs_best_peer']:.3f}x {c['best_peer']}** [{lo:.3f}, {hi:.3f}]"
    if c["variant"] in PEERS + TASO and c["variant"] != "genai":
        head += f", {c['tool_seconds']:.0f} s"
    parts = [head]
    if c["variant"] in TASO:
        parts += [", ".join(f"{c['vs'][p][0]:.3f}x {p}" for p in ("genai", "onnxscript")
                            if p in c["vs"] and p != c["best_peer"])]
    parts += [short_fused(c["fused"])] if c["fused"] else []
    if c["variant"] == "genai" and c["max_abs_diff"]:
        k, d = max(c["max_abs_diff"].items(), key=lambda kv: kv[1])
        parts += [f"max diff {d:.2g} ({k})" + ("" if c["within_tolerance"] else ": **beyond tolerance**")]
    if c["variant"] == "taso" and c["note"]:
        parts += [c["note"].split(":")[0][:40]]
    return "<br>".join(p for p in parts if p)


def table_row(r: dict) -> str:
    notes = "fewer fused: " + ", ".join(r["fewer_fused"]) if r["fewer_fused"] else ""
    return f"| {r['model']} | {r['binding']} | " + " | ".join(_cell_text(c) for c in r["cells"]) + f" | {notes} |"


def markdown(rows: list, cmd: str, ort_model_type: Optional[str]) -> str:
    lines = [f"Machine: {machine()}. Made by `{cmd}`.", ""] + summary(rows) + [
        "", "| model | binding | " + " | ".join(VARIANTS) + " | notes |", "|---|---|" + "---|" * len(VARIANTS) + "---|"]
    lines += [table_row(r) for r in rows]
    ort_line = (f"ort-opt: ONNX Runtime's transformer optimizer (opt_level 0) with model_type '{ort_model_type}': ONNX "
                "Runtime 1.32 has no Llama-family model type (its types: bert, gpt2, gpt_neox, phi (Phi-2), qwen3, t5, "
                "...); gpt2 is the type its own Llama recipe optimizes with, whose rotary attention fusion matches "
                "its own export's pattern" if ort_model_type else
                "ort-opt: left out (`--ort-model-type none`): ONNX Runtime 1.32 has no Llama-family model type")
    lines += ["", "Batch 1; prefill at `seq` tokens, a decode step at `past` cached positions (mask past + 1 long, all "
              "ones; past key/values random normal). Speedups: original latency / the variant's (median of per-round "
              "ratios, 95 % interval), all variants of a row in one alternating run (2 intra-op threads, spinning "
              "off), the tool's wall time after it. **x peer**: taso-tvm's speedup over the best peer (the fastest "
              "of onnxscript, ort-opt and genai within the tolerance, or the original when all are slower) with that "
              "ratio's own interval; the line under it: over genai and onnxscript (when not the best peer). attn / "
              "LN / GELU a/b: a of the b attention blocks, layer norms (RMS norms) and GELUs (QuickGelu: a fused "
              "SiLU) run as ONNX Runtime fused operators in the file (`taso_tvm.onnx_opt.fused_census`; any other "
              "kind it counts by its name). genai: onnxruntime-genai's model builder graph of the same "
              "checkpoint, fed the same input_ids, mask and past (a prefill: past of length 0), its logits (a decode "
              "step's presents too) compared with the original's. taso-own: taso-tvm with `--no-peer-starts`.",
              "", ort_line + "."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- main
def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="export names (default: every *_prefill and *_decode of the manifest)")
    p.add_argument("--tiny", action="store_true", help="the committed tiny copies (tests/data/decoders)")
    p.add_argument("--seq", type=int, default=128, help="prefill rows: tokens (batch 1)")
    p.add_argument("--past", type=int, default=128, help="decode rows: cached positions (the mask is past + 1 long)")
    p.add_argument("--time-cap", type=float, default=40.0, help="seconds of alternating timing per row")
    p.add_argument("--guard-cap", type=float, default=20.0, help="taso-tvm's own never-slower timing cap")
    p.add_argument("--ort-model-type", default=ORT_MODEL_TYPE,
                   help="model_type for ONNX Runtime's transformer optimizer ('none': leave the column out)")
    p.add_argument("--md", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--append", action="store_true", help="add to the rows in --json (a row re-run replaces its own)")
    p.add_argument("--keep", type=Path, help="keep the tools' files in this folder (default: deleted after each row)")
    a = p.parse_args(argv)
    stem = "decoders_tiny" if a.tiny else "decoders"
    a.md = a.md or ROOT / "benchmarks" / "results" / f"{stem}.md"
    a.json = a.json or ROOT / "benchmarks" / "results" / f"{stem}.json"
    ort_model_type = None if a.ort_model_type.lower() == "none" else a.ort_model_type
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = models_dir(a.tiny)
    entries = read_manifest(folder)
    rows_of = {n: e for n, e in entries.items() if e["form"] != "genai"}
    names = a.names or sorted(n for n, e in rows_of.items() if e["form"] in FORMS)
    unknown = [n for n in names if n not in rows_of]
    if unknown or not names:
        print(f"not a prefill or decode export of {folder}/manifest.json: {', '.join(unknown) or 'any model'} (run "
              "benchmarks/peers/make_decoder_models.py first)", file=sys.stderr)
        return 2
    rows = json.loads(a.json.read_text())["rows"] if a.append and a.json.exists() else []
    cmd = ("python benchmarks/bench_decoders.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    with tempfile.TemporaryDirectory(prefix="bench_decoders_") as tmp:
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
        for name in names:
            e = rows_of[name]
            t0 = time.monotonic()
            cells = bench(e, folder / e["file"], genai_entry(entries, e["family"]), folder, a.seq, a.past,
                          a.keep or Path(tmp), a.time_cap, a.guard_cap, ort_model_type)
            row = row_of(e, a.seq, a.past, cells)
            row["row_seconds"] = time.monotonic() - t0
            rows = [r for r in rows if (r["model"], r["binding"]) != (name, row["binding"])] + [row]
            write_results(a.md, a.json, markdown(rows, cmd, ort_model_type), rows, ort_model_type=ort_model_type)
            for f in Path(tmp).iterdir():  # the tools' files of a row are not needed again (full size: GBs)
                f.unlink()  # (unless --keep)
            print(table_row(row), flush=True)
            print(f"({name} {row['binding']}: {row['row_seconds']:.0f} s)", flush=True)
    print("\n".join(summary(rows)))
    print(f"wrote {a.md} and {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
