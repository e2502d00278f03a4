"""Time exported kernels on the device they are meant for: the device side of `cost.kernel_exchange`.

A standalone script, copied next to the kernels by `taso-tvm cost export-kernels`; it needs only numpy and TVM's
runtime (the folder's `runtime/`, loaded with TVM_USE_RUNTIME_LIB=1), never the project:

    TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime python3 time_kernels.py [--out timings.json]

Each kernel library is run in TVM's VirtualMachine the way the TVM cost backend times kernels (`time_evaluator`,
the fastest of the repeats, inputs drawn the same way), and the timings are written as JSON with the device's name,
for `taso-tvm cost import-timings`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

MANIFEST = "kernels.json"
KERNELS_FORMAT = "taso-tvm-kernels/1"
TIMINGS_FORMAT = "taso-tvm-kernel-timings/1"


def cpu_identity(threads: int) -> str:
    """The same name the cost package gives this machine's CPU (cost.device.cpu_identity)."""
    import platform

    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"cpu:{name or platform.processor() or platform.machine() or 'unknown-cpu'}:{threads}t"


def device_identity(tvm, kind: str, threads: int) -> str:
    """The cache's name of the device measured on (cost.device.cuda_identity / cpu_identity)."""
    if kind == "cuda":
        dev = tvm.cuda(0)
        return f"cuda:{dev.device_name}:sm_{str(dev.compute_version).replace('.', '')}"
    return cpu_identity(threads)


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


def make_input(np, shape, dtype: str, serial: int):
    """Inputs as the TVM cost backend draws them: N(0, 0.1) floats, zero integers, one generator per shape."""
    rng = np.random.default_rng(serial)
    if np.issubdtype(np.dtype(dtype), np.floating):
        return (rng.standard_normal(tuple(shape)) * 0.1).astype(dtype)
    return np.zeros(tuple(shape), dtype)


def time_one(tvm, np, path: Path, inputs: list, dev, settings: dict, arrays: dict) -> float:
    """Median time of one run in ms."""
    from tvm.runtime.vm import VirtualMachine

    vm = VirtualMachine(tvm.runtime.load_module(str(path)), dev)
    args = []
    for shape, dtype in inputs:
        key = (tuple(shape), dtype)
        if key not in arrays:
            arrays[key] = make_input(np, shape, dtype, len(arrays))
        args.append(tvm.runtime.tensor(arrays[key], dev))
    number = int(settings.get("number") or 1)
    min_ms = 0 if settings.get("number") else int(math.ceil(float(settings.get("min_repeat_ms", 0))))
    res = vm.time_evaluator("main", dev, number=number, repeat=max(3, int(settings.get("repeat", 3))),
                            min_repeat_ms=min_ms)(*args)
    return float(min(res.results)) * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Time the exported kernels of this folder on this machine's device.")
    p.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)), help="folder with kernels.json")
    p.add_argument("--out", help="timings JSON (default: DIR/timings.json)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="device to run on (auto: what the kernels were built for)")
    args = p.parse_args(argv)
    folder = Path(args.dir)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {folder / MANIFEST}: {e}", file=sys.stderr)
        return 2
    if manifest.get("format") != KERNELS_FORMAT:
        print(f"error: {folder / MANIFEST} is not a kernel export ({KERNELS_FORMAT})", file=sys.stderr)
        return 2
    made = ".".join(str(manifest.get("python", "")).split(".")[:2])
    if made and made != f"{sys.version_info[0]}.{sys.version_info[1]}":
        print(f"error: the runtime was made for Python {made} (its compiled extensions); run this with "
              f"python{made}", file=sys.stderr)
        return 2
    kind = manifest["target"]["kind"]
    use = ("cuda" if kind == "cuda" else "cpu") if args.device == "auto" else args.device
    if use == "cpu" and manifest.get("threads"):  # CPU timings hold for the thread count the cache names
        os.environ.setdefault("TVM_NUM_THREADS", str(manifest["threads"]))
    import numpy as np
    import tvm

    why = load_cuda_runtime(tvm) if use == "cuda" else ""
    dev = tvm.cuda(0) if use == "cuda" else tvm.cpu(0)
    if not dev.exist:
        print(f"error: no {use} device on this machine{': ' + why if why else ''}", file=sys.stderr)
        return 2
    threads = int(os.environ.get("TVM_NUM_THREADS") or manifest.get("threads") or os.cpu_count() or 1)
    rows, arrays, t0 = [], {}, time.monotonic()
    todo = [k for k in manifest["kernels"] if k.get("file")]
    for i, k in enumerate(todo):
        try:
            ms = time_one(tvm, np, folder / k["file"], k["inputs"], dev, manifest.get("timing", {}), arrays)
            rows.append({"key": k["key"], "cost_ms": ms, "status": "ok", "detail": ""})
        except Exception as e:  # noqa: BLE001  (a kernel that fails to run costs inf, as in the cost backend)
            reason = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
            rows.append({"key": k["key"], "cost_ms": None, "status": "run_failed", "detail": reason})
        last = rows[-1]
        shown = f"{last['cost_ms']:.4g} ms" if last["cost_ms"] is not None else last["detail"]
        print(f"[{i + 1}/{len(todo)}] {k['label']}: {shown}", file=sys.stderr)
    out = {"format": TIMINGS_FORMAT, "device": device_identity(tvm, use if use == "cuda" else "llvm", threads),
           "tvm_version": tvm.__version__, "tvm_file": tvm.__file__, "target": manifest["target"],
           "manifest_sha": manifest.get("id"), "seconds": round(time.monotonic() - t0, 3), "timings": rows}
    dest = Path(args.out) if args.out else folder / "timings.json"
    dest.write_text(json.dumps(out, indent=1))
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{ok}/{len(rows)} kernels timed on {out['device']}; wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
