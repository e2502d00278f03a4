"""Build targets from what users write: `llvm` (this machine's CPU), `cuda` (arch `DEFAULT_CUDA_ARCH` unless
named), a JSON target dict, or a `tvm.target.Target`. The kinds and the default arch come from the cost model's
registry (`taso_tvm.cost.config`), so every parser and message names the same ones."""
from __future__ import annotations

from typing import Any

from .. import errors as _errors


class TargetError(_errors.SettingsError, ValueError):
    """A target that is not llvm, cuda or a valid JSON target dict."""


def make_target(target: Any) -> Any:
    """A `tvm.target.Target` for `target` (None: llvm). A bare llvm target is built for this CPU (else TVM emits
    generic x86-64 code); a CUDA target gets an llvm host."""
    import tvm

    from ..cost.config import DEFAULT_CUDA_ARCH, CostConfigError
    from ..cost.config import parse_target as target_dict

    if isinstance(target, tvm.target.Target):
        return target
    try:
        spec = target_dict(target or "llvm")
    except CostConfigError as e:
        raise TargetError(str(e)) from None
    host = spec.pop("host", None)
    if spec["kind"] == "llvm":
        from ..schedule import with_host_cpu

        spec = with_host_cpu(spec)
    if spec["kind"] == "cuda":
        spec.setdefault("arch", DEFAULT_CUDA_ARCH)
        host = host or {"kind": "llvm"}
    try:
        return tvm.target.Target(spec, host=host) if host else tvm.target.Target(spec)
    except Exception as e:  # noqa: BLE001  (TVM raises several types for bad target dicts)
        raise TargetError(f"unknown target {target}: {str(e).splitlines()[-1]}") from None
