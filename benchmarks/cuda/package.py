"""Build zoo models for CUDA here (nvcc; no GPU needed), original and taso-optimized, into a folder that carries
only what running them needs to a GPU machine without TVM's compiler.

    python benchmarks/cuda/package.py --out build/cuda_pkg [--models squeezenet nasrnn] [--bert-layers 2]
        [--target cuda|llvm] [--arch sm_90] [--cost analytic|tvm|CONFIG.yaml] [--cost-cache F] [--cost-device NAME]
        [--kernels] [--limit-mib 64] [--device-python 3.12 [--wheel-dir build/wheels]]

Per model: `models/NAME/original.so` (tvm.compile, the target's default Relax pipeline: dlight on CUDA) and
`optimized.so` (TasoOptimize, then the same pipeline), `inputs.npz` and `reference.npz` (ONNX Runtime's outputs).
With it: `runtime/` (TVM's runtime library and Python package, tvm_ffi), `run_on_device.py`, `timing.py` (the
project's timing helper) and `manifest.json` (files with sizes and sha256, models, search statistics). `--kernels`
adds `kernels/`: the kernels a search with the TVM cost backend would measure, for `time_kernels.py` on the
device (see taso_tvm.cost.kernel_exchange). `--target llvm` packages a CPU build for a dry run anywhere.
`--device-python 3.12` makes the runtime for the GPU machine's Python when it is not this one's: tvm_ffi's compiled
core comes from its wheel for that version (pip download, or a wheel already in `--wheel-dir`); manifest.json (and
kernels/kernels.json) record that version, and the device scripts refuse any other.

The folder is written whole or not at all; over `--limit-mib` (the GPU machine's upload limit) it is not written
and the error names the largest files.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # this checkout's taso_tvm, not another installed copy
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

DEVICE_SCRIPT = Path(__file__).with_name("run_on_device.py")
ASSEMBLE_SCRIPT = Path(__file__).with_name("assemble.py")
CHECK_SCRIPT = Path(__file__).with_name("device_check.sh")
FORMAT = "taso-tvm-cuda-package/1"
PARTS_FORMAT = "taso-tvm-cuda-parts/1"
PARTS_RESERVE = 1 << 20  # room kept in part00 for parts.json and assemble.py
DEFAULT_LIMIT_MIB = 64
DEFAULT_RTOL = {"cuda": 1e-3, "llvm": 1e-4}  # largest |out - ref| allowed, relative to max |ref|
DEFAULT_WHEEL_DIR = ROOT / "build" / "wheels"  # wheels for --device-python (git-ignored)


class PackageError(Exception):
    """The package cannot be made as asked; one line."""


def target_for(kind: str, arch: str):
    import tvm

    if kind == "cuda":
        from taso_tvm.runtime.cuda_build import enable_cuda_codegen

        enable_cuda_codegen()  # cubins in the libraries: the GPU machine needs no nvcc
        return tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})
    return tvm.target.Target({"kind": "llvm"})


def cost_for(args: argparse.Namespace, kind: str, arch: str) -> Any:
    """The search's cost: a backend name for TasoOptimize, or a CostModel reading GPU timings from a cache."""
    if args.cost == "analytic":
        return "analytic"
    from taso_tvm.cost import CostModel, load_cost_config

    target = json.dumps({"kind": "cuda", "arch": arch}) if kind == "cuda" else "llvm"
    config = None if args.cost == "tvm" else args.cost
    cfg = load_cost_config(config, backend="tvm", target=target, cache=args.cost_cache, device=args.cost_device)
    return CostModel(cfg)


def build(mod, target, path: Path) -> float:
    import tvm
    from tvm import relax

    t0 = time.perf_counter()
    with target:  # nvcc takes the architecture from the current target
        ex = tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
    ex.export_library(str(path))
    if target.kind.name == "cuda":
        from taso_tvm.runtime.cuda_build import device_code_formats

        formats = device_code_formats(path)
        if not formats or "cuda" in formats:
            raise PackageError(f"{path.name}: the CUDA kernels were not compiled (formats: "
                               f"{', '.join(sorted(formats)) or 'none'}); the GPU machine would need nvcc")
    return time.perf_counter() - t0


def search_stats(report: Any) -> dict:
    tot = report.total
    if tot is None:
        return {"blocks": 0}
    return {"blocks": len(report.blocks), "cost_before_ms": tot.cost_before, "cost_after_ms": tot.cost_after,
            "ops_before": tot.ops_before, "ops_after": tot.ops_after, "seconds": round(tot.seconds, 3),
            "stopped_by": tot.stopped_by, "rules_applied": dict(sorted(tot.rules_applied.items()))}


def model_kwargs(name: str, args: argparse.Namespace) -> dict:
    """The zoo builder's keyword arguments for `name`: --model-kwargs, and --bert-layers for bert."""
    kwargs = dict(args.model_kwargs.get(name, {}))
    if name == "bert" and args.bert_layers:
        kwargs["layers"] = args.bert_layers
    return kwargs


def package_model(name: str, args: argparse.Namespace, folder: Path, target, cost: Any) -> dict:
    """Build one zoo model both ways into folder/models/NAME; returns its manifest entry."""
    from taso_tvm import load_onnx, zoo
    from taso_tvm.relay_pass import TasoOptimize
    from taso_tvm.runtime.timing import ort_session

    kwargs = model_kwargs(name, args)
    model = zoo.get_model(name, **kwargs)
    feeds = zoo.random_inputs(model)
    session = ort_session(model, threads=2)
    out_names = [o.name for o in session.get_outputs()]
    refs = session.run(None, feeds)
    mod = load_onnx(model)
    params = [p.name for p in mod["main"].params]
    if len(params) != len(feeds):
        raise PackageError(f"{name}: the module takes {len(params)} inputs, the model {len(feeds)}")
    dest = folder / "models" / name
    dest.mkdir(parents=True)
    np.savez(dest / "inputs.npz", **{f"arg{i}": v for i, v in enumerate(feeds.values())})
    np.savez(dest / "reference.npz", **{f"out{i}": v for i, v in enumerate(refs)})
    t_orig = build(mod, target, dest / "original.so")
    opt = TasoOptimize(cost=cost, target=target, config=args.config)
    t0 = time.perf_counter()
    mod_opt = opt(mod)
    t_search = time.perf_counter() - t0
    t_opt = build(mod_opt, target, dest / "optimized.so")
    stats = search_stats(opt.report)
    print(f"{name}: built in {t_orig:.1f} s / searched in {t_search:.1f} s + {t_opt:.1f} s; cost "
          f"{stats.get('cost_before_ms', 0):.4g} -> {stats.get('cost_after_ms', 0):.4g} ms; "
          f"{sum(stats.get('rules_applied', {}).values())} rewrites", flush=True)
    return {"name": name, "kwargs": kwargs, "dir": f"models/{name}",
            "inputs": [{"name": n, "onnx_name": k, "shape": list(v.shape), "dtype": str(v.dtype)}
                       for n, (k, v) in zip(params, feeds.items())],
            "outputs": [{"name": n, "shape": list(r.shape), "dtype": str(r.dtype)} for n, r in zip(out_names, refs)],
            "search": stats, "build_seconds": {"original": round(t_orig, 2), "optimized": round(t_opt, 2),
                                                "search": round(t_search, 2)}}


def export_search_kernels(names: list, args: argparse.Namespace, folder: Path, kind: str, arch: str) -> dict:
    """The kernels a search with the TVM backend would measure for the models, into folder/kernels."""
    from taso_tvm import load_onnx, zoo
    from taso_tvm.cost import load_cost_config
    from taso_tvm.cost.kernel_exchange import export_kernels, recording_cost_model
    from taso_tvm.relay_pass import TasoOptimize

    target = json.dumps({"kind": "cuda", "arch": arch}) if kind == "cuda" else "llvm"
    cfg = load_cost_config(None if args.cost in ("analytic", "tvm") else args.cost, backend="tvm", target=target,
                           cache=args.cost_cache, device=args.cost_device, progress=False)
    sigs: dict = {}
    for name in names:
        kwargs = model_kwargs(name, args)
        with recording_cost_model(cfg) as cm:
            TasoOptimize(cost=cm, config=args.config)(load_onnx(zoo.get_model(name, **kwargs)))
            sigs.update(dict.fromkeys(cm.backend.missing))
    rep = export_kernels(sigs, cfg, folder / "kernels", runtime=False)
    kernels_json = folder / "kernels" / "kernels.json"
    exported = json.loads(kernels_json.read_text())
    exported["python"] = device_python(args)  # time_kernels.py runs on the package's runtime: the device's Python
    kernels_json.write_text(json.dumps(exported, indent=1))
    print(f"kernels: {rep.built} built for the device ({len(rep.failed)} failed to build)", flush=True)
    return {"dir": "kernels", "kernels": rep.kernels, "built": rep.built, "build_failed": len(rep.failed)}


def copy_support(folder: Path, cuda: bool, python: str, wheel_dir: Path) -> None:
    """The device scripts, the timing helper (standalone: numpy, and tvm imported lazily) and TVM's runtime for
    Python `python` (MAJOR.MINOR)."""
    from taso_tvm.runtime import bundle as runtime_bundle, timing

    shutil.copyfile(DEVICE_SCRIPT, folder / "run_on_device.py")
    shutil.copyfile(CHECK_SCRIPT, folder / "device_check.sh")
    shutil.copyfile(timing.__file__, folder / "timing.py")
    runtime_bundle.copy_runtime(folder / "runtime", cuda=cuda, python=python, wheel_dir=wheel_dir)


def device_python(args: argparse.Namespace) -> str:
    """The Python version (MAJOR.MINOR) that runs the package: --device-python, else this one's."""
    from taso_tvm.runtime.bundle import python_version, this_python

    return python_version(args.device_python) if args.device_python else this_python()


def cost_counters(cost: Any) -> dict:
    """With a measuring cost model: how many kernel costs came from the cache and how many were measured here."""
    if not hasattr(cost, "backend"):
        return {}
    c = cost.backend.counters
    return {"kernels_from_cache": cost.cache_hits, "kernels_built_here": c.builds,
            "kernels_measured_here": c.measurements}


def write_manifest(folder: Path, entries: list, kernels: Optional[dict], args: argparse.Namespace, kind: str,
                   arch: str, cost: Any) -> dict:
    import tvm
    from taso_tvm.runtime.bundle import sha256

    files = sorted(p for p in folder.rglob("*") if p.is_file())
    table = [{"path": str(p.relative_to(folder)), "bytes": p.stat().st_size, "sha256": sha256(p)} for p in files]
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "target": {"kind": kind, "arch": arch if kind == "cuda" else None},
                "device": "cuda" if kind == "cuda" else "cpu", "rtol": args.rtol or DEFAULT_RTOL[kind],
                "tvm_version": tvm.__version__,
                "python": device_python(args) if args.device_python else platform.python_version(),
                "built_with_python": platform.python_version(),
                "search": {"cost": args.cost, "cost_device": args.cost_device, "config": args.config,
                           **cost_counters(cost)},
                "models": entries, "kernels": kernels,
                "total_bytes": sum(r["bytes"] for r in table), "files": table}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def check_size(folder: Path, limit_mib: float, done: list) -> int:
    files = [p for p in folder.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    if total > limit_mib * 2**20:
        top = sorted(files, key=lambda p: -p.stat().st_size)[:5]
        largest = ", ".join(f"{p.relative_to(folder)} {p.stat().st_size / 2**20:.1f} MiB" for p in top)
        per_model = ", ".join(f"{m} {sum(p.stat().st_size for p in (folder / 'models' / m).rglob('*')) / 2**20:.1f}"
                              f" MiB" for m in done)
        raise PackageError(f"the package would hold {total / 2**20:.1f} MiB, over the limit of {limit_mib:g} MiB "
                           f"(models so far: {per_model or 'none'}); largest files: {largest}. Package fewer models "
                           f"(--models) or fewer BERT layers (--bert-layers)")
    return total


def write_parts(pkg: Path, limit_bytes: int) -> Path:
    """Cut the package into folders PKG.parts/part00, part01, ... of at most `limit_bytes` each (a file larger
    than the room left is cut into chunks), for uploads one part at a time; part00 holds assemble.py, which joins
    them on the device, and parts.json."""
    from taso_tvm.runtime import bundle as runtime_bundle

    dest = pkg.with_name(pkg.name + ".parts")
    tmp = pkg.with_name(pkg.name + ".parts.partial")
    for d in (dest, tmp):
        shutil.rmtree(d, ignore_errors=True)
    part, room, index = 0, limit_bytes - PARTS_RESERVE, []
    for f in sorted(p for p in pkg.rglob("*") if p.is_file()):
        rel, size, off, chunks = str(f.relative_to(pkg)), f.stat().st_size, 0, []
        with open(f, "rb") as r:
            while True:
                if room <= 0:
                    part, room = part + 1, limit_bytes
                n = min(room, size - off)
                name = rel if off == 0 and n == size else f"{rel}.chunk{len(chunks):03d}"
                out = tmp / f"part{part:02d}" / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(r.read(n))
                chunks.append([f"part{part:02d}", name])
                room, off = room - n, off + n
                if off >= size:
                    break
        index.append({"path": rel, "bytes": size, "sha256": runtime_bundle.sha256(f),
                      "mode": f.stat().st_mode & 0o777, "chunks": chunks})
    shutil.copyfile(ASSEMBLE_SCRIPT, tmp / "part00" / "assemble.py")
    (tmp / "part00" / "parts.json").write_text(json.dumps({"format": PARTS_FORMAT, "parts": part + 1,
                                                           "files": index}))
    tmp.rename(dest)
    return dest


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    from taso_tvm import zoo

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="package folder to write (must not exist, or be empty)")
    ap.add_argument("--models", nargs="+", default=zoo.list_models(), choices=zoo.list_models())
    ap.add_argument("--bert-layers", type=int, default=None, help="BERT encoder layers (default: the zoo's 12)")
    ap.add_argument("--model-kwargs", type=json.loads, default={},
                    help='zoo builder arguments per model as JSON, e.g. \'{"seed_example": {"channels": 16}}\'')
    ap.add_argument("--target", choices=["cuda", "llvm"], default="cuda", help="llvm: a CPU build for a dry run")
    ap.add_argument("--arch", default="sm_90", help="CUDA architecture (sm_90: H100/H200)")
    ap.add_argument("--cost", default="analytic",
                    help="the search's cost: analytic (default), tvm (kernel timings from the cost cache, e.g. "
                         "imported from the GPU machine), or a cost config YAML")
    ap.add_argument("--cost-cache", help="cost cache file with the device's kernel timings (--cost tvm)")
    ap.add_argument("--cost-device", help="the device's name in the cache, as time_kernels.py printed it")
    ap.add_argument("--config", help="settings file whose search section the search uses")
    ap.add_argument("--kernels", action="store_true",
                    help="also export the kernels a TVM-backend search would measure (for time_kernels.py)")
    ap.add_argument("--rtol", type=float, help="output tolerance relative to the output scale (default: 1e-3 "
                                               "cuda, 1e-4 llvm)")
    ap.add_argument("--device-python", metavar="X.Y",
                    help="the GPU machine's Python version when it is not this one's (e.g. 3.12): the runtime's "
                         "compiled parts come from wheels for it")
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR,
                    help="where --device-python finds wheels or downloads them to (default: build/wheels)")
    ap.add_argument("--limit-mib", type=float, default=DEFAULT_LIMIT_MIB,
                    help="largest package allowed (with --parts: largest part)")
    ap.add_argument("--parts", action="store_true",
                    help="no size limit on the package; also write OUT.parts/partNN, each under the limit, to be "
                         "uploaded one at a time and joined on the device by part00/assemble.py")
    args = ap.parse_args(argv)
    if not isinstance(args.model_kwargs, dict) or not all(isinstance(v, dict) for v in args.model_kwargs.values()):
        ap.error("--model-kwargs must be a JSON object of model name -> object of arguments")
    if args.device_python:
        from taso_tvm.runtime.bundle import python_version

        try:
            python_version(args.device_python)
        except ValueError as e:
            ap.error(f"--device-python: {e}")
    return args


def make_package(args: argparse.Namespace) -> dict:
    """Write the package folder; returns the manifest."""
    kind = args.target
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PackageError(f"'{out}' exists and is not an empty folder: name a new one")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cost = None
    try:
        target = target_for(kind, args.arch)
        cost = cost_for(args, kind, args.arch)
        copy_support(tmp, kind == "cuda", device_python(args), args.wheel_dir)
        limit = math.inf if args.parts else args.limit_mib
        check_size(tmp, limit, [])  # the runtime alone may not fit
        entries, done = [], []
        for name in dict.fromkeys(args.models):
            entries.append(package_model(name, args, tmp, target, cost))
            done.append(name)
            check_size(tmp, limit, done)
        kernels = export_search_kernels(done, args, tmp, kind, args.arch) if args.kernels else None
        check_size(tmp, limit, done)
        manifest = write_manifest(tmp, entries, kernels, args, kind, args.arch, cost)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if hasattr(cost, "close"):
            cost.close()
    if out.exists():
        out.rmdir()
    tmp.rename(out)
    if args.parts:
        write_parts(out, int(args.limit_mib * 2**20))
    return manifest


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    from taso_tvm.errors import TasoError, one_line

    try:
        manifest = make_package(args)
    except (PackageError, TasoError, RuntimeError, ValueError, OSError) as e:  # TVM's errors are RuntimeErrors
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    total = manifest["total_bytes"]
    print(f"wrote {args.out}: {len(manifest['models'])} models, {len(manifest['files'])} files, "
          f"{total / 2**20:.1f} MiB (limit {args.limit_mib:g} MiB), for Python {manifest['python']}")
    for m in manifest["models"]:
        size = sum(f["bytes"] for f in manifest["files"] if f["path"].startswith(m["dir"] + "/"))
        print(f"  {m['name']}: {size / 2**20:.1f} MiB")
    if args.parts:
        parts = sorted(Path(args.out + ".parts").iterdir())
        sizes = ", ".join(f"{p.name} {sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 2**20:.1f} MiB"
                          for p in parts)
        print(f"parts in {args.out}.parts: {sizes}; on the device, with every part uploaded: python3 "
              f"part00/assemble.py --out PACKAGE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
