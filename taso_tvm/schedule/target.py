"""The host CPU as an llvm target. A bare {"kind": "llvm"} makes LLVM emit generic x86-64 code (SSE2): the
schedules' vectors then run at a quarter of AVX-512's width (measured 3x slower on a conv). Builds that run on
this machine name its CPU."""
from __future__ import annotations

from typing import Optional

SCHEDULE_VERSION = 2  # bump when the rules change what a kernel runs (the cost cache keys on it)


def host_mcpu() -> Optional[str]:
    """LLVM's name for this machine's CPU (e.g. znver4), or None when TVM cannot tell."""
    import tvm

    try:
        mcpu = tvm.target.Target.from_device(tvm.cpu()).attrs.get("mcpu")
    except Exception:  # noqa: BLE001 - no LLVM in this TVM build, or an unknown host
        return None
    return str(mcpu) if mcpu else None


def with_host_cpu(spec: dict) -> dict:
    """An llvm target dict with this machine's mcpu added when it names no CPU, triple or features of its own;
    other targets unchanged."""
    if spec.get("kind") != "llvm" or any(k in spec for k in ("mcpu", "mtriple", "mattr")):
        return dict(spec)
    mcpu = host_mcpu()
    return {**spec, "mcpu": mcpu} if mcpu else dict(spec)
