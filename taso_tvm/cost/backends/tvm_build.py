"""Build one kernel the way the target's modules are built and export it as a library: with the CPU schedules
("taso-schedule" pipeline, `taso_tvm.schedule`) on llvm, TVM's default pipeline (dlight) on CUDA.

Runs in worker processes (spawned, so each imports TVM once) and in the parent for single kernels; it must stay
importable and picklable at module level.
"""
from __future__ import annotations

import os
import re
import time
from typing import Optional

_OP_DUMP = re.compile(r'ir\.Op\(.*?name="([^"]+)".*?\) requires')  # TVM prints the whole Op
MAX_REASON = 300


def failure_reason(err: BaseException) -> str:
    """A failed kernel's reason in one line: the error's class and `errors.one_line` of it, with the whole `ir.Op`
    object TVM prints cut down to the operator's name."""
    from ...errors import one_line

    pick = _OP_DUMP.sub(r"\1 requires", one_line(err))
    text = pick if pick.startswith(type(err).__name__) else f"{type(err).__name__}: {pick}"
    return text[:MAX_REASON]


def kernel_pipeline(tgt):
    """The Relax pipeline a kernel of `tgt` is built with: the one its whole modules are built with."""
    from tvm import relax

    if tgt.kind.name == "llvm":
        from ...schedule import schedule_pipeline

        return schedule_pipeline(tgt)
    return relax.get_default_pipeline(tgt)


WEIGHT_SEED = 0


def weights_bound(tgt) -> bool:
    """Whether kernels for `tgt` are built with their weights as constants: on llvm, where the CPU schedules'
    layout passes fold into constant weights (conv weights in IHWO) as in the whole-model build."""
    return tgt.kind.name == "llvm"


def bind_weights(mod, sig):
    """`mod` with the kernel's weight parameters bound to seeded random constants (the data stays parameters)."""
    import numpy as np
    import tvm
    from tvm import relax

    rng = np.random.default_rng(WEIGHT_SEED)
    values = {}
    for i, (shape, dtype, is_weight) in enumerate(sig.inputs):
        if is_weight:
            arr = rng.standard_normal(shape) * 0.1 if np.issubdtype(np.dtype(dtype), np.floating) \
                else np.zeros(shape)
            values[f"p{i}"] = tvm.runtime.tensor(arr.astype(dtype))
    if not values or len(values) == len(sig.inputs):
        return mod  # a kernel of weights only is folded away in a real build; keep it measurable
    return relax.transform.BindParams("main", values)(mod)


def build_kernel(payload: tuple, target: dict, host: Optional[dict], out_path: str) \
        -> tuple[Optional[str], Optional[str], float]:
    """(library path, None, seconds) on success, (None, one-line reason, seconds) on failure."""
    t0 = time.perf_counter()
    try:
        if target.get("kind") == "cuda":
            from ...runtime.cuda_build import enable_cuda_codegen

            enable_cuda_codegen()  # kernels compiled now (cubin), also on a machine without a GPU
        import tvm

        from ..kernel import KernelSig
        from ..relax_kernel import kernel_module

        sig = KernelSig.make(*payload)
        mod = kernel_module(sig)
        tgt = tvm.target.Target(target, host=host) if host else tvm.target.Target(target)
        if weights_bound(tgt):
            mod = bind_weights(mod, sig)
        with tgt:  # nvcc takes the architecture from the current target when there is no GPU to ask
            ex = tvm.compile(mod, target=tgt, relax_pipeline=kernel_pipeline(tgt))
        ex.export_library(out_path)
        return out_path, None, time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001  (any failure is a failed kernel, reported in one line)
        return None, failure_reason(e), time.perf_counter() - t0


def warm_up() -> None:
    """Pool initializer: import TVM and the registry once per worker. Ctrl-C is the parent's to handle (it stops
    the workers), so a worker ignores it rather than printing a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    import tvm  # noqa: F401

    from .. import relax_kernel  # noqa: F401
