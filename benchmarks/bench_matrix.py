"""Issue 33's matrix: every export form of every encoder family next to every peer a user would run, side by side in
ONNX Runtime, with how many layers of each kind each tool's file runs fused.

Rows: the exports of `benchmarks/peers/make_peer_models.py --set matrix` (BERT at MiniLM-L6 shape, RoBERTa, XLM-R,
DistilBERT, ELECTRA, DeBERTa-v2, ViT-S; eager and sdpa attention, the TorchScript exporter at opsets 14 and 17 and
the dynamo exporter, with and without a classification head), or with `--tiny` the committed tiny copies in
`tests/data/matrix`. Columns: the original; onnxsim; onnxslim; ONNX Runtime's transformer optimizer (opt_level 0,
the manifest's model type, heads and hidden size); onnxscript's ORT fusions (`optimize_for_ort`); taso-tvm as
`taso-tvm optimize` runs it (its guard included: the peers' outputs and the search from each are its candidates);
taso-tvm searching from the original only (`--no-peer-starts`). Every file is checked against the original's
outputs in ONNX Runtime, then all are timed in ONE alternating run per row (single runs in a fresh random order each
round, 2 intra-op threads, thread spinning off for every session, a padded attention mask).

    pip install -e ".[peers]"   # onnxslim
    python benchmarks/bench_matrix.py [NAMES] [--tiny] [--time-cap 40] [--guard-cap 20]
        [--md benchmarks/results/matrix.md] [--json benchmarks/results/matrix.json] [--append]

Each cell: speedup over the original [95 %], the layers it runs fused (`taso_tvm.onnx_opt.fused_census`: attention,
layer norm, GELU, fused of how many there are), the tool's wall time. taso-tvm's cells add its ratio to the best peer
(the fastest of the four peers; the original when all are slower) with that ratio's own interval. The summary: the
cells where taso-tvm's interval against the best peer reaches 1 (the goal: all), the median of that ratio over the
rows (the goal: >= 1.03), and the rows where a peer runs more layers of a kind fused than taso-tvm's file.
"""
from __future__ import annotations

import argparse
import copy
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

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_peers import (THREADS, Model, ToolCell, checked_runners, machine, manifest_models, run_onnxsim,  # noqa: E402
                         run_ort_opt, run_tool, write_results)
from taso_tvm.onnx_opt.fused_census import fused_census  # noqa: E402
from taso_tvm.runtime.timing import compare  # noqa: E402

log = logging.getLogger("bench_matrix")
PEERS = ("onnxsim", "onnxslim", "ort-opt", "onnxscript")
VARIANTS = ("original",) + PEERS + ("taso", "taso-own")
TINY = ROOT / "tests" / "data" / "matrix"


@dataclass
class Cell(ToolCell):
    speedup: float = float("nan")  # original latency / this one's (median of per-round ratios)
    ci: tuple = (float("nan"), float("nan"))  # its 95 % interval
    vs_best_peer: float = float("nan")  # speedup over the best peer (taso-tvm's cells)
    vs_best_peer_ci: tuple = (float("nan"), float("nan"))
    best_peer: str = ""
    fused: dict = field(default_factory=dict)  # kind -> [fused, of how many]


def run_onnxslim(src: Path, dst: Path) -> None:
    import onnxslim

    onnx.save(onnxslim.slim(onnx.load(str(src))), str(dst))


def run_onnxscript(src: Path, dst: Path) -> None:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, _ = optimize_for_ort(ir.load(str(src)))
    ir.save(model, str(dst))


def run_taso(src: Path, dst: Path, feeds: dict, guard_cap: float, peer_starts: bool) -> str:
    from taso_tvm.onnx_opt import optimize_onnx

    shapes = {k: list(v.shape) for k, v in feeds.items()}
    out, report = optimize_onnx(onnx.load(str(src)), shapes=shapes, inputs=feeds, time_cap=guard_cap,
                                threads=THREADS, peer_starts=peer_starts)
    onnx.save(out, str(dst))
    return report.decision


def inverse(x: float) -> float:
    """A latency ratio as a speedup (1 / x)."""
    return float("inf") if x == 0 else 1.0 / x


def fill_timing(cells: dict, res: Any) -> None:
    """Each cell's median latency and speedup over the original [95 %] from one alternating run (`compare`)."""
    for lat in res.latencies:
        cells[lat.name].median_ms = lat.median * 1e3
    cells["original"].speedup, cells["original"].ci = 1.0, (1.0, 1.0)
    for r in res.ratios:
        cells[r.candidate].speedup, cells[r.candidate].ci = inverse(r.ratio), (inverse(r.ci[1]), inverse(r.ci[0]))


def bench(m: Model, seq: int, work: Path, time_cap: float, guard_cap: float) -> list[Cell]:
    feeds = m.feeds(seq)
    cells = {v: Cell(v) for v in VARIANTS}
    paths = {"original": m.path}
    steps: list[tuple[str, Callable[[Path], Optional[str]]]] = [
        ("onnxsim", lambda d: run_onnxsim(m.path, d)), ("onnxslim", lambda d: run_onnxslim(m.path, d)),
        ("ort-opt", lambda d: run_ort_opt(m, m.path, d)), ("onnxscript", lambda d: run_onnxscript(m.path, d)),
        ("taso", lambda d: run_taso(m.path, d, feeds, guard_cap, True)),
        ("taso-own", lambda d: run_taso(m.path, d, feeds, guard_cap, False))]
    for v, fn in steps:
        dst = work / f"{m.name}_{seq}_{v}.onnx"
        if run_tool(cells[v], fn, dst):
            paths[v] = dst
    def note(c: Cell, path: Path) -> None:
        c.fused = {k: list(t) for k, t in fused_census(onnx.load(str(path))).items()}

    runners, names = checked_runners(cells, paths, VARIANTS, feeds, note)
    res = compare(*runners, names=names, time_cap=time_cap)
    fill_timing(cells, res)
    best = max((p for p in PEERS if p in names), key=lambda p: cells[p].speedup, default="original")
    if cells[best].speedup < 1.0:
        best = "original"
    for v in ("taso", "taso-own"):
        if v in names:
            r = res.between(names.index(best), names.index(v))
            c = cells[v]
            c.best_peer, c.vs_best_peer, c.vs_best_peer_ci = best, inverse(r.ratio), (inverse(r.ci[1]), inverse(r.ci[0]))
    log.info("%s seq %s: %s", m.name, seq, res.summary())
    return list(cells.values())


def short_fused(fused: dict) -> str:
    """'attn 6/6, LN 13/13, GELU 6/6'."""
    short = {"attention": "attn", "layer norm": "LN", "GELU": "GELU"}
    return ", ".join(f"{short.get(k, k)} {a}/{b}" for k, (a, b) in fused.items())


def fewer_fused(cells: list) -> list:
    """The kinds where a peer's file runs more layers fused than taso-tvm's: ['LN (onnxscript 12 > 10)']."""
    by = {c["variant"]: c for c in cells}
    taso = by.get("taso")
    if taso is None or not taso["ok"]:
        return []
    out = []
    for kind in {k for c in cells if c["ok"] for k in c["fused"]}:
        mine = taso["fused"].get(kind, [0, 0])[0]
        best = max(((by[p]["fused"].get(kind, [0, 0])[0], p) for p in PEERS if p in by and by[p]["ok"]),
                   default=(0, ""))
        if best[0] > mine:
            out.append(f"{kind} ({best[1]} {best[0]} > {mine})")
    return sorted(out)


def row_of(m: Model, seq: int, cells: list[Cell], entry: dict) -> dict:
    cs = [asdict(c) for c in cells]
    taso = cells[VARIANTS.index("taso")]
    return {"model": m.name, "seq": seq, "family": entry.get("family", ""), "form": entry.get("form", ""),
            "cells": cs, "fewer_fused": fewer_fused(cs),
            "at_least_best_peer": bool(taso.ok and taso.vs_best_peer_ci[1] >= 1.0) if taso.ok else None}


def summary(rows: list) -> list[str]:
    done = [r for r in rows if r["at_least_best_peer"] is not None]
    vs = [next(c for c in r["cells"] if c["variant"] == "taso")["vs_best_peer"] for r in done]
    own = [c["vs_best_peer"] for r in done for c in r["cells"] if c["variant"] == "taso-own" and c["ok"]]
    fewer = [f"{r['model']}: {', '.join(r['fewer_fused'])}" for r in rows if r["fewer_fused"]]
    lines = [f"- rows: {len(rows)}; taso-tvm's written file at least the best peer (its interval's upper end "
             f">= 1) on {sum(r['at_least_best_peer'] for r in done)} of {len(done)}",
             f"- taso-tvm / best peer, median over the rows: **{statistics.median(vs):.3f}x** (min {min(vs):.3f}, "
             f"max {max(vs):.3f})" if vs else "- no taso-tvm cell",
             f"- searching from the original only (`--no-peer-starts`): median {statistics.median(own):.3f}x the "
             f"best peer" if own else "- no taso-own cell",
             "- rows where a peer runs more layers of a kind fused than taso-tvm's file: "
             + ("; ".join(fewer) if fewer else "none")]
    return lines


def _cell_text(c: dict) -> str:
    """A cell of the table: the speedup [interval] (taso-tvm's: and over the best peer), tool seconds, fused layers."""
    if not c["ok"]:
        return f"failed: {c['note'][:60]}"
    head = f"{c['median_ms']:.3g} ms" if c["variant"] == "original" else \
        f"{c['speedup']:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"
    if c["variant"].startswith("taso"):
        lo, hi = c["vs_best_peer_ci"]
        head += f", **{c['vs_best_peer']:.3f}x {c['best_peer']}** [{lo:.3f}, {hi:.3f}]"
    parts = [head + ("" if c["variant"] == "original" else f", {c['tool_seconds']:.0f} s")]
    parts += [short_fused(c["fused"])] if c["fused"] else []
    parts += [c["note"].split(":")[0][:40]] if c["variant"] == "taso" and c["note"] else []
    return "<br>".join(parts)


def markdown(rows: list, cmd: str) -> str:
    lines = [f"Machine: {machine()}. Made by `{cmd}`.", ""] + summary(rows) + [
        "", "| model | seq | " + " | ".join(VARIANTS) + " | notes |", "|---|---|" + "---|" * len(VARIANTS) + "---|"]
    for r in rows:
        out = [_cell_text(c) for c in r["cells"]]
        notes = "fewer fused: " + ", ".join(r["fewer_fused"]) if r["fewer_fused"] else ""
        lines.append(f"| {r['model']} | {r['seq']} | " + " | ".join(out) + f" | {notes} |")
    lines += ["", "Speedups: original latency / the variant's (median of per-round ratios, 95 % interval), all "
              "variants of a row in one alternating run. **x peer**: taso-tvm's speedup over the best peer (the "
              "fastest of onnxsim, onnxslim, ORT's optimizer and onnxscript, or the original when all are slower) "
              "with that ratio's own interval. attn / LN / GELU a/b: a of the b attention blocks, layer norms and "
              "GELUs run as ONNX Runtime fused operators in the file the tool wrote "
              "(`taso_tvm.onnx_opt.fused_census`). taso-own: taso-tvm with `--no-peer-starts`."]
    return "\n".join(lines) + "\n"


def _distinct(names: list, entries: dict) -> list:
    """The names whose file is not byte-identical to an earlier one's (with one seed, XLM-R's cut-vocabulary export
    is RoBERTa's, ELECTRA's encoder BERT's: counted once)."""
    seen, out = {}, []
    for n in names:
        sha = entries[n].get("sha256")
        if sha in seen:
            log.info("%s: the same file as %s, not benched again", n, seen[sha])
            continue
        seen[sha] = n
        out.append(n)
    return out


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="model names (default: every matrix model there is)")
    p.add_argument("--tiny", action="store_true", help="the committed tiny copies (tests/data/matrix)")
    p.add_argument("--time-cap", type=float, default=40.0, help="seconds of alternating timing per row")
    p.add_argument("--guard-cap", type=float, default=20.0, help="taso-tvm's own never-slower timing cap")
    p.add_argument("--md", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--seq", type=int, help="this sequence length only (default: each model's own)")
    p.add_argument("--append", action="store_true", help="add to the rows in --json (a row re-run replaces its own)")
    a = p.parse_args(argv)
    stem = "matrix_tiny" if a.tiny else "matrix"
    a.md = a.md or ROOT / "benchmarks" / "results" / f"{stem}.md"
    a.json = a.json or ROOT / "benchmarks" / "results" / f"{stem}.json"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = TINY if a.tiny else Path(os.environ.get("TASO_TVM_PEER_MODELS",
                                                     Path.home() / ".cache" / "taso_tvm" / "peer_models"))
    entries = {e["name"]: e for e in json.loads((folder / "manifest.json").read_text())["models"]
               if e.get("form")} if (folder / "manifest.json").exists() else {}
    models = {m.name: m for m in manifest_models(folder, classifiers=None) if m.name in entries}
    names = a.names or _distinct(sorted(models), entries)
    unknown = [n for n in names if n not in models]
    if unknown or not names:
        print(f"not in {folder}/manifest.json's matrix: {', '.join(unknown) or 'any model'} (run "
              "benchmarks/peers/make_peer_models.py --set matrix first)", file=sys.stderr)
        return 2
    rows = json.loads(a.json.read_text())["rows"] if a.append and a.json.exists() else []
    cmd = "python benchmarks/bench_matrix.py " + " ".join(copy.copy(argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="bench_matrix_") as tmp:
        for name in names:
            m = models[name]
            for seq in [a.seq] if a.seq and m.has_seq else m.seqs[:1] if a.tiny else m.seqs:
                t0 = time.monotonic()
                cells = bench(m, seq, Path(tmp), a.time_cap, a.guard_cap)
                rows = [r for r in rows if (r["model"], r["seq"]) != (name, seq)] + [row_of(m, seq, cells,
                                                                                          entries[name])]
                rows[-1]["row_seconds"] = time.monotonic() - t0
                write_results(a.md, a.json, markdown(rows, cmd.strip()), rows)
                print(markdown(rows[-1:], cmd).splitlines()[-3], flush=True)
                print(f"({name} seq {seq}: {rows[-1]['row_seconds']:.0f} s)", flush=True)
    print("\n".join(summary(rows)))
    print(f"wrote {a.md} and {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
