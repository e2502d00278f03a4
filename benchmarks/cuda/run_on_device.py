"""Run a package made by package.py on the machine it was made for: check each model's outputs (original and
taso-optimized) against ONNX Runtime's, time the two, write a Markdown table and JSON.

    cd PACKAGE && TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime python3 run_on_device.py [--time-cap 20] [--models ...]

Needs Python (the version the package was made for: manifest.json's `python`) and numpy; TVM comes from `runtime/` in runtime-only mode
(no compiler). Timing is the project's helper (timing.py): single runs of the two libraries alternating in a
freshly shuffled order each round, the median per-round ratio with its confidence interval.
Exit status: 0 when every output matches, 1 when one does not, 2 when the package is damaged or cannot run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMAT = "taso-tvm-cuda-package/1"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_files(manifest: dict) -> list:
    """Files missing or changed since packaging."""
    bad = []
    for f in manifest["files"]:
        p = HERE / f["path"]
        if not p.is_file():
            bad.append(f"{f['path']} missing")
        elif p.stat().st_size != f["bytes"] or sha256(p) != f["sha256"]:
            bad.append(f"{f['path']} changed")
    return bad


def load_cuda_runtime(tvm) -> str:
    """Load TVM's CUDA runtime library (it registers the cuda device and the loader of CUDA modules): TVM's
    runtime-only mode loads no device backend itself. Returns why it failed ('' when it is loaded)."""
    import ctypes

    libs = tvm.base._LOADED_LIBS
    if "tvm_runtime_cuda" not in libs:
        lib = Path(libs["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"
        try:
            libs["tvm_runtime_cuda"] = ctypes.CDLL(str(lib), mode=ctypes.RTLD_LOCAL)
        except OSError as e:  # no driver (libcuda.so.1), or a CUDA library missing
            return str(e)
    return ""


def flat(out) -> list:
    """A VM result (a tensor or nested tuples of tensors) as a list of numpy arrays."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for o in out for a in flat(o)]


def scaled_error(got, ref) -> float:
    """Largest |got - ref| relative to the output's scale (max |ref|); inf for a shape mismatch or a NaN."""
    import numpy as np

    if got.shape != ref.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-30)
    err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
    return err / scale if np.isfinite(err) else float("inf")


def run_model(m: dict, dev, rtol: float, time_cap: float, max_rounds: int) -> dict:
    import numpy as np
    import tvm
    from tvm.runtime.vm import VirtualMachine

    import timing

    folder = HERE / m["dir"]
    with np.load(folder / "inputs.npz") as z:
        inputs = [z[f"arg{i}"] for i in range(len(m["inputs"]))]
    with np.load(folder / "reference.npz") as z:
        refs = [z[f"out{i}"] for i in range(len(m["outputs"]))]
    runs, errors = {}, {}
    for which in ("original", "optimized"):
        vm = VirtualMachine(tvm.runtime.load_module(str(folder / f"{which}.so")), dev)
        args = [tvm.runtime.tensor(np.ascontiguousarray(x), dev) for x in inputs]
        f = vm["main"]

        def run(f=f, args=args):
            out = f(*args)
            dev.sync()
            return out

        outs = flat(run())
        errors[which] = (max(scaled_error(o, r) for o, r in zip(outs, refs))
                         if len(outs) == len(refs) else float("inf"))
        runs[which] = run
    res = timing.compare(runs["original"], runs["optimized"], names=("original", "optimized"), time_cap=time_cap,
                         max_rounds=max_rounds)
    ok = all(e <= rtol for e in errors.values())
    return {"model": m["name"], "ok": ok, "max_scaled_error": errors, "rtol": rtol,
            "original_ms": res.median_a * 1e3, "optimized_ms": res.median_b * 1e3,
            "ratio": res.ratio, "ci": list(res.ci), "speedup": 1.0 / res.ratio if res.ratio > 0 else None,
            "verdict": res.verdict, "rounds": res.rounds, "stopped_by": res.stopped_by,
            "search": m.get("search", {})}


def table(rows: list, device: str) -> str:
    lines = [f"Device: {device}", "",
             "| model | original ms | optimized ms | speedup | optimized/original [95% CI] | verdict | outputs "
             "(max err / scale) | predicted cost ms before -> after | rewrites |",
             "|---|---:|---:|---:|---|---|---|---|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | | | | | failed: {r['error']} | | | |")
            continue
        s = r["search"]
        err = "ok" if r["ok"] else "MISMATCH"
        lines.append(
            f"| {r['model']} | {r['original_ms']:.4g} | {r['optimized_ms']:.4g} | {r['speedup']:.3f}x | "
            f"{r['ratio']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['verdict']} | {err} "
            f"({r['max_scaled_error']['original']:.1e} / {r['max_scaled_error']['optimized']:.1e}) | "
            f"{s.get('cost_before_ms', float('nan')):.4g} -> {s.get('cost_after_ms', float('nan')):.4g} | "
            f"{sum(s.get('rules_applied', {}).values())} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check and time the packaged models on this machine.")
    ap.add_argument("--models", nargs="+", help="only these models")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: what the package was built for")
    ap.add_argument("--time-cap", type=float, default=20.0, help="seconds of timing per model")
    ap.add_argument("--max-rounds", type=int, default=10_000, help="most timing rounds per model")
    ap.add_argument("--out", default=str(HERE / "results"), help="writes OUT.md and OUT.json")
    ap.add_argument("--no-verify", action="store_true", help="skip the sha256 check of the package's files")
    args = ap.parse_args(argv)
    try:
        manifest = json.loads((HERE / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {HERE / 'manifest.json'}: {e}", file=sys.stderr)
        return 2
    if manifest.get("format") != FORMAT:
        print(f"error: {HERE / 'manifest.json'} is not a package of this format ({FORMAT})", file=sys.stderr)
        return 2
    bad = [] if args.no_verify else check_files(manifest)
    if bad:
        print(f"error: the package is damaged: {', '.join(bad[:5])}", file=sys.stderr)
        return 2
    made = ".".join(str(manifest.get("python", "")).split(".")[:2])
    if made and made != f"{sys.version_info[0]}.{sys.version_info[1]}":
        print(f"error: the package's runtime was made for Python {made} (its compiled extensions); this is "
              f"Python {platform.python_version()}: run it with python{made}, or make the package with "
              f"--device-python {sys.version_info[0]}.{sys.version_info[1]}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))  # timing.py
    import tvm

    print(f"tvm {tvm.__version__} from {tvm.__file__} (runtime only: {bool(getattr(tvm, '_RUNTIME_ONLY', False))})")
    if os.environ.get("TVM_USE_RUNTIME_LIB") != "1":
        print("note: TVM_USE_RUNTIME_LIB is not 1", file=sys.stderr)
    kind = manifest["device"] if args.device == "auto" else args.device
    why = load_cuda_runtime(tvm) if kind == "cuda" else ""
    dev = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    if not dev.exist:
        print(f"error: no {kind} device on this machine{': ' + why if why else ''}", file=sys.stderr)
        return 2
    device = (f"{dev.device_name} (sm_{str(dev.compute_version).replace('.', '')})" if kind == "cuda"
              else f"cpu {platform.processor() or platform.machine()}, TVM_NUM_THREADS="
                   f"{os.environ.get('TVM_NUM_THREADS', 'default')}")
    wanted = set(args.models or [m["name"] for m in manifest["models"]])
    rows = []
    for m in manifest["models"]:
        if m["name"] not in wanted:
            continue
        t0 = time.monotonic()
        try:
            rows.append(run_model(m, dev, float(manifest["rtol"]), args.time_cap, args.max_rounds))
        except Exception as e:  # noqa: BLE001  (one model failing does not stop the others)
            rows.append({"model": m["name"], "ok": False,
                         "error": (str(e).strip().splitlines() or [type(e).__name__])[-1][:200]})
        print(f"{m['name']}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    text = table(rows, device)
    print(text)
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps(
        {"device": device, "tvm_file": tvm.__file__, "tvm_version": tvm.__version__,
         "python": platform.python_version(), "results": rows},
        indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
