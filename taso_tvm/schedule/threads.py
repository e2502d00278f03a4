"""The TVM runtime's thread count. TVM sizes its thread pool once, from TVM_NUM_THREADS or else the number of
physical cores (1 on a 2-vCPU machine), when the pool is first used; later requests can lower the count but never
raise it above that size. `set_num_threads` sets both the variable and the live pool and returns the count the
runtime really uses, which callers report. A command sets the count with `request_threads` before anything
touches the runtime (the pool is then sized as asked), from the user's number or `physical_cores()`."""
from __future__ import annotations

import logging
import os
from typing import Optional

log = logging.getLogger(__name__)

ENV = "TVM_NUM_THREADS"
BIG_CORES = 1  # runtime.config_threadpool's mode: 1 = big cores (all cores on a homogeneous CPU)


def set_num_threads(n: Optional[int]) -> int:
    """Ask the TVM runtime for `n` threads (None or 0: leave TVM's choice); return the count in use."""
    import tvm

    if n:
        os.environ[ENV] = str(int(n))
        config = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if config is not None:
            config(BIG_CORES, int(n))
    used = num_threads()
    if n and used != int(n):
        log.warning("TVM runtime uses %d thread(s), not the %d asked for (its pool was sized earlier in this "
                    "process; set %s before the first run)", used, int(n), ENV)
    return used


def num_threads() -> int:
    """The number of threads the TVM runtime's parallel loops use now."""
    import tvm

    fn = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
    return int(fn()) if fn is not None else int(os.environ.get(ENV, "1") or 1)


def physical_cores() -> int:
    """The physical cores this process may run on (hyper-threads not counted): psutil's count where installed,
    else the distinct (package, core) pairs of the CPUs in our affinity mask, else the logical CPUs."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except ImportError:
        n = None
    if not n and cpus:
        cores = set()
        for c in cpus:
            base = f"/sys/devices/system/cpu/cpu{c}/topology/"
            try:
                with open(base + "physical_package_id") as f, open(base + "core_id") as g:
                    cores.add((f.read().strip(), g.read().strip()))
            except OSError:
                cores.add(("cpu", str(c)))
        n = len(cores)
    n = n or os.cpu_count() or 1
    return max(1, min(n, len(cpus))) if cpus else max(1, n)


def request_threads(n: Optional[int] = None) -> int:
    """The thread count for this process's TVM runtime, `n` or (None, 0) the physical cores, put in
    TVM_NUM_THREADS for the pool to be sized from when it starts; returns it. Call before anything runs TVM
    code, then `set_num_threads` with the same count (it also resizes a pool that already started, downwards)."""
    count = int(n) if n else physical_cores()
    os.environ[ENV] = str(count)
    return count
