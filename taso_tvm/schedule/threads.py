"""The TVM runtime's thread count. TVM sizes its thread pool once, from TVM_NUM_THREADS or else the number of
physical cores (1 on a 2-vCPU machine), when the pool is first used; later requests can lower the count but never
raise it above that size. `set_num_threads` sets both the variable and the live pool and returns the count the
runtime really uses, which callers report."""
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
