"""Where the time goes, per operator type: ONNX Runtime's profiler on the original export, ORT's transformer
optimizer's output and taso-tvm's output of one model (issue 28's profile table).

    python benchmarks/profile_ops.py MODEL [--seq 128] [--runs 200] [--from DIR] [--guard-cap 20] [--out F.md]

MODEL: a name in the peers' manifest (`benchmarks/peers/make_peer_models.py`, `$TASO_TVM_PEER_MODELS`) or in
tests/data/real_models. The variants come from `--from DIR` when `benchmarks/bench_peers.py --keep DIR` wrote them
there (NAME_SEQ_ort-opt.onnx, NAME_SEQ_taso.onnx), else the tools are run here as bench_peers runs them. Each
variant gets one session as bench_peers times it (CPU, 2 intra-op threads, sequential, all graph optimizations,
spinning off) with ONNX Runtime's profiler on; after the warm-up, the sessions run in turn, one run each per round,
`--runs` rounds. The table: each operator type's kernel time in us per run (the profiler's node events, summed over
the timed runs and divided by their count) and its node count per run, per variant; and each variant's run time as
the profiler saw it. Written as markdown to benchmarks/results/profile_MODEL_SEQ.md (and .json).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402

THREADS = bench_peers.THREADS
VARIANTS = ("original", "ort-opt", "taso")


def profiled_session(path: Path, prefix: str, threads: int = THREADS) -> Any:
    """A session as bench_peers times one (spinning off), with ONNX Runtime's profiler writing to `prefix`*.json."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 4
    opts.enable_profiling = True
    opts.profile_file_prefix = prefix
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def op_totals(events: list, runs: int) -> dict:
    """From a profile's events: the last `runs` runs' kernel time per op type.
    Returns {"ops": {op: {"us": per run, "nodes": per run}}, "run_us": mean model_run duration, "runs": n}."""
    model_runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                        key=lambda e: e["ts"])[-runs:]
    if not model_runs:
        raise RuntimeError("the profile has no model_run event")
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in model_runs]
    start = windows[0][0]
    ops: dict = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < start:
            continue
        if not any(lo <= e["ts"] <= hi for lo, hi in windows):
            continue
        op = e.get("args", {}).get("op_name", "?")
        t = ops.setdefault(op, {"us": 0.0, "nodes": 0.0})
        t["us"] += e["dur"]
        t["nodes"] += 1
    n = len(windows)
    for t in ops.values():
        t["us"] /= n
        t["nodes"] /= n
    return {"ops": ops, "run_us": sum(hi - lo for lo, hi in windows) / n, "runs": n}


def profile(paths: dict, feeds: dict, runs: int, warmup: int = 5) -> dict:
    """variant -> op_totals, the sessions run in turn (one run each per round)."""
    with tempfile.TemporaryDirectory(prefix="profile_ops_") as tmp:
        sessions = {v: profiled_session(p, os.path.join(tmp, v)) for v, p in paths.items()}
        runners = {v: bench_peers.ort_runner(s, feeds) for v, s in sessions.items()}
        for _ in range(warmup):
            for r in runners.values():
                r()
        for _ in range(runs):
            for r in runners.values():
                r()
        out = {}
        for v, s in sessions.items():
            prof = s.end_profiling()
            out[v] = op_totals(json.loads(Path(prof).read_text()), runs)
        return out


def markdown(title: str, result: dict, note: str = "") -> str:
    variants = list(result)
    ops = sorted({op for r in result.values() for op in r["ops"]},
                 key=lambda op: -max(r["ops"].get(op, {"us": 0.0})["us"] for r in result.values()))
    lines = [f"### {title}", "", note, "" if note else None,
             "| op type | " + " | ".join(f"{v}: us/run (nodes)" for v in variants) + " |",
             "|---|" + "---|" * len(variants)]
    lines = [x for x in lines if x is not None]
    for op in ops:
        cells = []
        for v in variants:
            t = result[v]["ops"].get(op)
            cells.append(f"{t['us']:.0f} ({t['nodes']:g})" if t else "")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    kernel = {v: sum(t["us"] for t in result[v]["ops"].values()) for v in variants}
    nodes = {v: sum(t["nodes"] for t in result[v]["ops"].values()) for v in variants}
    lines.append("| **kernels, total** | " + " | ".join(f"**{kernel[v]:.0f}** ({nodes[v]:g})" for v in variants)
                 + " |")
    lines.append("| run (model_run) | " + " | ".join(f"{result[v]['run_us']:.0f}" for v in variants) + " |")
    return "\n".join(lines) + "\n"


def find_model(name: str) -> bench_peers.Model:
    peer_dir = Path(os.environ.get("TASO_TVM_PEER_MODELS", Path.home() / ".cache" / "taso_tvm" / "peer_models"))
    for m in bench_peers.manifest_models(peer_dir) + bench_peers.manifest_models(ROOT / "tests" / "data"
                                                                                  / "real_models"):
        if m.name == name:
            return m
    raise SystemExit(f"{name}: not in {peer_dir}/manifest.json nor tests/data/real_models "
                     "(run benchmarks/peers/make_peer_models.py first)")


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--seq", type=int, help="sequence length (default: the model's first)")
    p.add_argument("--runs", type=int, default=200, help="timed runs of each variant")
    p.add_argument("--from", dest="src", type=Path, help="bench_peers.py --keep folder with the tools' outputs")
    p.add_argument("--guard-cap", type=float, default=20.0, help="taso-tvm's never-slower timing cap (when run here)")
    p.add_argument("--out", type=Path, help="markdown file (default benchmarks/results/profile_MODEL_SEQ.md)")
    a = p.parse_args(argv)
    m = find_model(a.model)
    seq = a.seq if (a.seq and m.has_seq) else m.seqs[0]
    feeds = m.feeds(seq)
    out = a.out or ROOT / "benchmarks" / "results" / f"profile_{m.name}_{seq}.md"
    with tempfile.TemporaryDirectory(prefix="profile_ops_models_") as tmp:
        paths, tools = {"original": m.path}, {}
        for v in ("ort-opt", "taso"):
            kept = a.src / f"{m.name}_{seq}_{v}.onnx" if a.src else None
            if kept is not None and kept.exists():
                paths[v], tools[v] = kept, f"from {kept}"
                continue
            dst = Path(tmp) / f"{v}.onnx"
            t0 = time.monotonic()
            if v == "ort-opt":
                bench_peers.run_ort_opt(m, m.path, dst)
                tools[v] = "ORT's transformer optimizer"
            else:
                tools[v] = f"taso-tvm ({bench_peers.run_taso(m.path, dst, feeds, a.guard_cap)})"
            tools[v] += f", {time.monotonic() - t0:.0f} s"
            paths[v] = dst
        for v, path in paths.items():
            print(f"{v}: {tools.get(v, path)}; wrote {bench_peers.fused_counts(path) or 'no com.microsoft op'}",
                  flush=True)
        result = profile(paths, feeds, a.runs)
    note = (f"ONNX Runtime profiler, {THREADS} intra-op threads, spinning off, all graph optimizations; "
            f"{a.runs} runs of each variant in turn after 5 warm-up runs; batch 1, seq {seq}. "
            + "; ".join(f"{v}: {t}" for v, t in tools.items()) + f". Machine: {bench_peers.machine()}.")
    md = markdown(f"{m.name}, seq {seq}: kernel time per operator type", result, note)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    out.with_suffix(".json").write_text(json.dumps({"model": m.name, "seq": seq, "runs": a.runs, "tools": tools,
                                                    "machine": bench_peers.machine(), "variants": result},
                                                   indent=1) + "\n")
    print(md)
    print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
