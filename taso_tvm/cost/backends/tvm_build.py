"""Build one kernel with TVM's default pipeline for the target and export it as a library.

Runs in worker processes (spawned, so each imports TVM once) and in the parent for single kernels; it must stay
importable and picklable at module level.
"""
from __future__ import annotations

import os
import re
import time
from typing import Optional


def one_line(err: BaseException) -> str:
    """The most telling line of an exception message (TVM errors carry tracebacks)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    pick = next((ln for ln in reversed(lines) if "Error" in ln or "Check failed" in ln), lines[-1] if lines else "")
    pick = re.sub(r'ir\.Op\(.*?name="([^"]+)".*?\) requires', r"\1 requires", pick)  # TVM prints the whole Op
    text = f"{type(err).__name__}: {pick}" if pick and not pick.startswith(type(err).__name__) else pick
    return (text or type(err).__name__)[:300]


def build_kernel(payload: tuple, target: dict, host: Optional[dict], out_path: str) \
        -> tuple[Optional[str], Optional[str], float]:
    """(library path, None, seconds) on success, (None, one-line reason, seconds) on failure."""
    t0 = time.perf_counter()
    try:
        if target.get("kind") == "cuda":
            os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
        import tvm
        from tvm import relax

        from ..kernel import KernelSig
        from ..relax_kernel import kernel_module

        mod = kernel_module(KernelSig.make(*payload))
        tgt = tvm.target.Target(target, host=host) if host else tvm.target.Target(target)
        ex = tvm.compile(mod, target=tgt, relax_pipeline=relax.get_default_pipeline(tgt))
        ex.export_library(out_path)
        return out_path, None, time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001  (any failure is a failed kernel, reported in one line)
        return None, one_line(e), time.perf_counter() - t0


def warm_up() -> None:
    """Pool initializer: import TVM and the registry once per worker. Ctrl-C is the parent's to handle (it stops
    the workers), so a worker ignores it rather than printing a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    import tvm  # noqa: F401

    from .. import relax_kernel  # noqa: F401
