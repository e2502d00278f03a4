"""Cost-model settings: a dataclass, a YAML loader and the target parser.

A config file is YAML with the settings under a top-level `cost:` key (or at the top level). Precedence:
keyword overrides > environment (`TASO_TVM_COST_CACHE` for the cache path) > file > defaults.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from .. import errors as _errors
from ..safe_read import UnsafeFileError, read_yaml

# The one registry of cost backends and target kinds: every parser (--cost-backend, cost --backend, --target) and
# every message reads these.
BACKENDS = ("auto", "tvm", "ort", "analytic")
# "auto": measure on the runtime that will run the result (ORT for an ONNX output, TVM on the build target)
AUTO = "auto"
TARGET_KINDS = ("llvm", "cuda")
DEFAULT_CUDA_ARCH = "sm_90"  # a CUDA target's arch when neither the user nor a local GPU names one
DEFAULT_CACHE = "~/.cache/taso_tvm/costs.sqlite"
CACHE_ENV = "TASO_TVM_COST_CACHE"

# Roofline peaks per target kind: sustained GFLOP/s, GB/s, and per-kernel launch overhead in microseconds.
DEFAULT_ROOFLINE: dict[str, dict[str, float]] = {
    "llvm": {"peak_gflops": 50.0, "peak_gbps": 15.0, "launch_us": 3.0},
    "cuda": {"peak_gflops": 40000.0, "peak_gbps": 3000.0, "launch_us": 4.0},
}


class CostConfigError(_errors.SettingsError, ValueError):
    """A cost setting is missing, unreadable or wrong; the message is one line."""


@dataclass
class CostConfig:
    """Everything the cost model needs to know; see `configs/cpu.yaml` for what each field means."""

    backend: str = AUTO
    target: Union[str, dict] = "llvm"
    threads: int = 0  # 0: all cores of this machine
    repeat: int = 3
    number: int = 0  # 0: adaptive, enough runs per repeat to fill min_repeat_ms
    min_repeat_ms: float = 20.0
    build_jobs: int = 0  # 0: one per core
    build_timeout_s: float = 600.0
    rpc: Optional[str] = None  # "HOST:PORT:KEY" of a TVM RPC tracker
    rpc_timeout_s: float = 60.0
    # the cache's name for the device measured on, e.g. "cuda:NVIDIA H200:sm_90" for kernel timings imported from
    # a GPU machine (cost.kernel_exchange); None: this machine's device (or the rpc key)
    device: Optional[str] = None
    cache: Optional[str] = DEFAULT_CACHE  # None or "": no persistent cache
    progress: bool = True
    roofline: dict[str, dict[str, float]] = field(default_factory=lambda: {k: dict(v) for k, v in
                                                                            DEFAULT_ROOFLINE.items()})

    @property
    def target_dict(self) -> dict:
        return parse_target(self.target)

    @property
    def target_kind(self) -> str:
        return str(self.target_dict["kind"])

    @property
    def num_threads(self) -> int:
        return self.threads if self.threads > 0 else (os.cpu_count() or 1)

    @property
    def num_build_jobs(self) -> int:
        return self.build_jobs if self.build_jobs > 0 else (os.cpu_count() or 1)

    @property
    def cache_path(self) -> Optional[Path]:
        return Path(os.path.expanduser(self.cache)) if self.cache else None

    def peaks(self) -> dict[str, float]:
        kind = self.target_kind
        base = dict(DEFAULT_ROOFLINE.get(kind, DEFAULT_ROOFLINE["llvm"]))
        base.update(self.roofline.get(kind, {}))
        return base


_KINDS = ", ".join(TARGET_KINDS)


def parse_target(target: Union[str, dict]) -> dict:
    """'llvm', 'cuda' or a JSON target dict (string or mapping) -> a target dict for `tvm.target.Target`."""
    if isinstance(target, dict):
        d = dict(target)
    elif not isinstance(target, str):
        raise CostConfigError(f"unknown target {target!r}: use {_KINDS} or a JSON target dict")
    elif target.strip().startswith("{"):
        try:
            d = json.loads(target)
        except json.JSONDecodeError as e:
            raise CostConfigError(f"target is not valid JSON: {e}") from None
        if not isinstance(d, dict):
            raise CostConfigError(f"unknown target {target!r}: use {_KINDS} or a JSON target dict")
    elif target.strip() in TARGET_KINDS:
        d = {"kind": target.strip()}
    else:
        raise CostConfigError(f"unknown target '{target}': use {_KINDS} or a JSON target dict")
    if d.get("kind") not in TARGET_KINDS:
        raise CostConfigError(f"unknown target kind {d.get('kind')!r}: use {' or '.join(TARGET_KINDS)}")
    return d


_INTS = {"threads": 0, "repeat": 1, "number": 0, "build_jobs": 0}  # name -> smallest allowed value
_FLOATS = {"min_repeat_ms": 0.0, "build_timeout_s": 1e-9, "rpc_timeout_s": 1e-9}
_PEAKS = ("peak_gflops", "peak_gbps", "launch_us")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_type(name: str, v: Any, where: str) -> None:
    """Raise CostConfigError unless setting `name` has a value of the right type and range."""
    bad = None
    if name in _INTS:
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= _INTS[name]):
            bad = f"an integer >= {_INTS[name]}"
    elif name in _FLOATS:
        if not (_number(v) and v >= _FLOATS[name]):
            bad = "a finite number >= 0" if _FLOATS[name] == 0 else "a finite number > 0"
    elif name in ("backend", "rpc", "cache", "device"):
        if not (isinstance(v, str) or (v is None and name != "backend")):
            bad = "a string"
    elif name == "target":
        if not isinstance(v, (str, dict)):
            bad = "llvm, cuda or a target mapping"
    elif name == "progress":
        if not isinstance(v, bool):
            bad = "true or false"
    elif name == "roofline":
        if v is not None and not isinstance(v, dict):
            raise CostConfigError(f"cost setting 'roofline'{where} must be a mapping of target kind to peaks, got "
                                  f"{v!r}")
        for kind, peaks in (v or {}).items():
            if peaks is None:
                continue
            if not isinstance(peaks, dict):
                raise CostConfigError(f"cost setting 'roofline.{kind}'{where} must be a mapping of "
                                      f"{', '.join(_PEAKS)}")
            for p, x in peaks.items():
                if p not in _PEAKS:
                    raise CostConfigError(_errors.unknown_key("roofline peak", f"{kind}.{p}", _PEAKS, where))
                if not (_number(x) and x > 0):
                    raise CostConfigError(f"cost setting 'roofline.{kind}.{p}'{where} must be a finite number > 0, "
                                          f"got {x!r}")
    if bad:
        raise CostConfigError(f"cost setting '{name}'{where} must be {bad}, got {v!r}")


def _check(cfg: CostConfig, where: str) -> CostConfig:
    if cfg.backend not in BACKENDS:
        raise CostConfigError(f"unknown backend '{cfg.backend}'{where}: use {', '.join(BACKENDS[:-1])} or "
                              f"{BACKENDS[-1]}")
    parse_target(cfg.target)
    if cfg.repeat < 1 or cfg.number < 0 or cfg.min_repeat_ms < 0:
        raise CostConfigError(f"repeat must be >= 1, number >= 0, min_repeat_ms >= 0{where}")
    if cfg.rpc:
        parse_rpc(cfg.rpc)
    from .cache import check_cache_path

    check_cache_path(cfg.cache_path)  # a directory or a file not ours is an error now, before any work
    return cfg


def resolve_backend(cfg: CostConfig, runtime: str) -> CostConfig:
    """The config with `auto` made concrete for the runtime that will run the result ("onnx" or "tvm")."""
    if cfg.backend != AUTO:
        return cfg
    return dataclasses.replace(cfg, backend="ort" if runtime == "onnx" else "tvm")


def parse_rpc(rpc: str) -> tuple[str, int, str]:
    """'HOST:PORT:KEY' -> (host, port, key)."""
    parts = str(rpc).rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[0] or not parts[2]:
        raise CostConfigError(f"rpc must be HOST:PORT:KEY, got {rpc!r}")
    return parts[0], int(parts[1]), parts[2]


def load_cost_config(path: Optional[Union[str, Path]] = None, **overrides: Any) -> CostConfig:
    """Settings from a YAML file (or the defaults), then the environment, then `overrides` (None values skipped)."""
    data: dict[str, Any] = {}
    where = ""
    if path is not None:
        where = f" in {path}"
        try:
            loaded = read_yaml(path, "cost config")
        except UnsafeFileError as e:
            raise CostConfigError(str(e)) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise CostConfigError(f"cannot read cost config {path}: expected a mapping")
        if "cost" in loaded:
            data = loaded["cost"] or {}
            if not isinstance(data, dict):
                raise CostConfigError(f"cannot read cost config {path}: 'cost' must be a mapping")
        else:  # settings at the top level; other sections of a shared config file are not ours
            data = {k: v for k, v in loaded.items() if k not in ("search", "rules")}
        data = dict(data)
    env_cache = os.environ.get(CACHE_ENV)
    if env_cache is not None:
        data["cache"] = env_cache
    data.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(CostConfig)}
    for k in data:
        if k not in names:
            raise CostConfigError(_errors.unknown_key("cost setting", k, names, where))
    for k, v in data.items():
        _check_type(k, v, where)
    if "roofline" in data:
        roof = {k: dict(v) for k, v in DEFAULT_ROOFLINE.items()}
        for kind, peaks in (data["roofline"] or {}).items():
            roof.setdefault(kind, {}).update(peaks or {})
        data["roofline"] = roof
    cfg = CostConfig(**data)
    for k in _FLOATS:
        setattr(cfg, k, float(getattr(cfg, k)))
    return _check(cfg, where)
