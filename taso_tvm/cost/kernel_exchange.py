"""Kernel timings measured on another machine (a GPU machine without TVM's compiler) into the cost cache.

1. Record: a search runs with `recording_cost_model(cfg)`: kernels the cache already holds for the device cost
   what was measured there; the others cost the analytic estimate and are recorded (`backend.missing`).
2. Export: `export_kernels(sigs, cfg, folder)` builds each recorded kernel here for the target (nvcc for cuda),
   exports the libraries and writes `kernels.json` (cache scope and key per kernel), the device script
   (`time_kernels.py`) and TVM's runtime (`runtime/`).
3. On the device: `TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime python3 time_kernels.py` writes `timings.json`.
4. Import: `import_timings(folder, timings, cache_path)` stores them under the scope the TVM backend uses, with the
   device's own name; a search with `backend: tvm`, the same target and `device: <that name>` reads them as
   measured. Kernels its path needs beyond those (the search moves once real costs replace estimates) show up
   on the next record/export round; a round that records nothing means every kernel of the search was measured.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import CostError
from ..runtime.bundle import copy_runtime
from ..safe_read import UnsafeFileError, read_json
from .backends.analytic import AnalyticBackend
from .backends.base import Backend, Measurement
from .cache import CostCache
from .config import CostConfig
from .kernel import KernelSig
from .model import CostModel

log = logging.getLogger(__name__)

MANIFEST = "kernels.json"
DEVICE_SCRIPT = "time_kernels.py"
KERNELS_DIR = "kernels"
RUNTIME_DIR = "runtime"
KERNELS_FORMAT = "taso-tvm-kernels/1"
TIMINGS_FORMAT = "taso-tvm-kernel-timings/1"
EXPORTED_DEVICE = "exported"  # the device of an export's scope until its timings name theirs (`import_timings`)


class KernelExchangeError(CostError):
    """A kernel export folder or a timings file that cannot be used; one line naming the file."""


def tvm_config(cfg: CostConfig) -> CostConfig:
    """The config with the TVM backend (the one whose kernels travel)."""
    return dataclasses.replace(cfg, backend="tvm")


def tvm_scope(cfg: CostConfig) -> tuple:
    """The cache scope the TVM backend uses for `cfg` (its `device` setting names the measured device)."""
    from .backends.tvm_backend import TvmBackend

    backend = TvmBackend(tvm_config(cfg))
    try:
        return backend.scope(), dict(backend.target), backend.host
    finally:
        backend.close()


class RecordingBackend(Backend):
    """Stands in for the TVM backend during a search run here: estimates every kernel the cache lacks with the
    analytic model (never cached) and records it as a kernel to export."""

    name = "tvm"
    noisy = True  # as the TVM backend: the search measures near-equal graphs whole (`CostModel.settle`), and
    # those whole units are kernels to export too

    def __init__(self, config: CostConfig):
        super().__init__(config)
        self._scope, self.target, self.host = tvm_scope(config)
        self._analytic = AnalyticBackend(config)
        self.missing: dict[KernelSig, None] = {}  # in first-asked order

    def scope(self) -> tuple:
        return self._scope

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        out = {}
        for s in sigs:
            if not any(op == "opaque" for op in s.ops):
                self.missing.setdefault(s, None)
            out[s] = Measurement(self._analytic.cost(s), "analytic", "estimate: not measured on the device yet")
        return out


def recording_cost_model(cfg: CostConfig) -> CostModel:
    """A cost model for a search whose kernels are to be measured elsewhere: cached device timings where known,
    analytic estimates (recorded in `model.backend.missing`) elsewhere."""
    cfg = tvm_config(cfg)
    backend = RecordingBackend(cfg)
    cache = CostCache(cfg.cache_path)
    return CostModel(cfg, backend=backend, cache=cache)


@dataclass
class ExportReport:
    folder: Path
    kernels: int
    built: int
    failed: list = field(default_factory=list)  # (label, reason)
    bytes: int = 0


def _kernel_entry(sig: KernelSig, file: Optional[str], error: Optional[str], weights_bound: bool) -> dict:
    """The kernel's manifest entry; `inputs` are the arguments its built function takes (without the weights
    when the builder bound them as constants, as it does on llvm)."""
    bound = weights_bound and not all(w for _, _, w in sig.inputs)
    return {"key": sig.key, "label": sig.label(), "file": file, "error": error,
            "inputs": [[list(s), d] for s, d, w in sig.inputs if not (bound and w)]}


def export_kernels(sigs: Iterable[KernelSig], cfg: CostConfig, folder: Path, runtime: bool = True) -> ExportReport:
    """Build each kernel for the config's target with the TVM backend's builder (parallel, `build_jobs`), export
    the libraries to `folder/kernels/`, and write `folder/kernels.json`, the device script and (with `runtime`)
    TVM's runtime. The folder is written whole or not at all (a temporary folder renamed at the end)."""
    import tvm

    from .backends.tvm_backend import TvmBackend
    from .backends.tvm_build import weights_bound

    cfg = tvm_config(cfg)
    sigs = [s for s in dict.fromkeys(sigs) if not any(op == "opaque" for op in s.ops)]
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise KernelExchangeError(f"'{folder}' exists and is not empty: name a new folder for the export")
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / KERNELS_DIR).mkdir(parents=True)
    # the scope names the statistic of the device's timings (the timer's: the fastest repeat), the one a search
    # with `device` set reads, not this machine's own (on llvm: a quantile of single runs)
    backend = TvmBackend(dataclasses.replace(cfg, device=cfg.device or EXPORTED_DEVICE))
    try:
        scope, target, host = backend.scope(), dict(backend.target), backend.host
        bound = weights_bound(tvm.target.Target(target))  # llvm kernels hold their weights as constants
        built = backend.build(sigs)
        entries, failed = [], []
        for s in sigs:
            path, err, _ = built[s]
            name = None
            if path is not None:
                name = f"{KERNELS_DIR}/{s.key[:24]}.so"
                shutil.move(path, tmp / name)
            else:
                failed.append((s.label(), err or "build failed"))
            entries.append(_kernel_entry(s, name, None if path is not None else (err or "build failed"),
                                         bound))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        backend.close()
    manifest = {"format": KERNELS_FORMAT, "scope": {"backend": scope[0], "target": scope[1], "versions": scope[3]},
                "target": target, "host": host, "threads": cfg.num_threads, "python": platform.python_version(),
                "timing": {"repeat": cfg.repeat, "number": cfg.number, "min_repeat_ms": cfg.min_repeat_ms},
                "kernels": entries}
    manifest["id"] = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.copyfile(Path(__file__).with_name("device_timer.py"), tmp / DEVICE_SCRIPT)
    if runtime:
        copy_runtime(tmp / RUNTIME_DIR, cuda=target.get("kind") == "cuda")
    if folder.exists():
        folder.rmdir()
    tmp.rename(folder)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    log.info("exported %d kernels (%d failed to build) to %s, %.1f MiB", len(sigs), len(failed), folder,
             size / 2**20)
    return ExportReport(folder, len(sigs), len(sigs) - len(failed), failed, size)


def _read_json(path: Path, what: str) -> dict:
    try:
        data = read_json(path, what)
    except UnsafeFileError as e:
        raise KernelExchangeError(str(e)) from None
    if not isinstance(data, dict):
        raise KernelExchangeError(f"{what} '{path}' is not a JSON object")
    return data


@dataclass
class ImportReport:
    device: str
    scope: tuple
    measured: int
    run_failed: int
    build_failed: int


def import_timings(folder: Path, timings: Path, cache_path: Optional[Path]) -> ImportReport:
    """Store the device's timings of an export (`folder/kernels.json`) in the cost cache at `cache_path`, under
    the TVM backend's scope for the export's target and the device's name. Kernels that failed to build here
    are stored as failed. Refuses timings of another export, target or TVM version."""
    if cache_path is None:
        raise KernelExchangeError("importing kernel timings needs a cost cache file; none is set")
    folder = Path(folder)
    manifest = _read_json(folder / MANIFEST, "kernel export")
    data = _read_json(Path(timings), "kernel timings")
    if manifest.get("format") != KERNELS_FORMAT:
        raise KernelExchangeError(f"'{folder / MANIFEST}' is not a kernel export ({KERNELS_FORMAT})")
    if data.get("format") != TIMINGS_FORMAT:
        raise KernelExchangeError(f"'{timings}' is not a kernel timings file ({TIMINGS_FORMAT})")
    if data.get("manifest_sha") != manifest.get("id"):
        raise KernelExchangeError(f"'{timings}' times another export (id {data.get('manifest_sha')}) than "
                                  f"'{folder}' (id {manifest.get('id')})")
    versions = manifest["scope"]["versions"]
    if f"tvm={data.get('tvm_version')}" not in versions.split(";"):  # versions: "tvm=X;schedule=N"
        raise KernelExchangeError(f"'{timings}' was measured with tvm {data.get('tvm_version')}, the export is "
                                  f"for {versions}")
    device = str(data.get("device") or "")
    if not device or device.endswith(":absent"):
        raise KernelExchangeError(f"'{timings}' names no device")
    entries = {k["key"]: k for k in manifest["kernels"]}
    rows, measured, run_failed = [], 0, 0
    for t in data.get("timings", []):
        k = entries.get(t.get("key"))
        if k is None:
            raise KernelExchangeError(f"'{timings}' holds kernel {str(t.get('key'))[:16]} that the export lacks")
        cost = t.get("cost_ms")
        ok = t.get("status") == "ok" and isinstance(cost, (int, float)) and math.isfinite(cost) and cost >= 0
        rows.append((k["key"], k["label"], float(cost) if ok else math.inf, "ok" if ok else "run_failed",
                     "" if ok else str(t.get("detail") or "run failed")))
        measured += ok
        run_failed += not ok
    failed_here = [k for k in manifest["kernels"] if not k.get("file")]
    rows += [(k["key"], k["label"], math.inf, "build_failed", k.get("error") or "") for k in failed_here]
    scope = (manifest["scope"]["backend"], manifest["scope"]["target"], device, versions)
    cache = CostCache(cache_path)
    try:
        cache.put_many(scope, rows)
    finally:
        cache.close()
    log.info("imported %d kernel timings of %s (%d failed to run, %d to build)", measured, device, run_failed,
             len(failed_here))
    return ImportReport(device, scope, measured, run_failed, len(failed_here))
