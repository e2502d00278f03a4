"""Device identity for cache keys: what the measured numbers depend on besides the kernel."""
from __future__ import annotations

import functools
import platform


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def cpu_identity(threads: int) -> str:
    return f"cpu:{cpu_model()}:{threads}t"


def cuda_identity() -> str:
    """GPU name of local device 0, or 'cuda:absent' when there is none."""
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        return "cuda:absent"
    return f"cuda:{dev.device_name}:sm_{str(dev.compute_version).replace('.', '')}"
