"""Cost backends: measured TVM kernels (`tvm`), measured ONNX Runtime kernels (`ort`), roofline (`analytic`)."""
from __future__ import annotations

from ..config import CostConfig
from .analytic import AnalyticBackend
from .base import Backend, Counters, Measurement
from .rpc import RpcError


def make_backend(config: CostConfig) -> Backend:
    """The backend the config names (`auto` alone, with no runtime named, measures with TVM)."""
    if config.backend == "analytic":
        return AnalyticBackend(config)
    if config.backend in ("tvm", "auto"):
        from .tvm_backend import TvmBackend

        return TvmBackend(config)
    if config.backend == "ort":
        from .ort_backend import OrtBackend

        return OrtBackend(config)
    from ..config import BACKENDS

    raise ValueError(f"unknown backend '{config.backend}': use {', '.join(BACKENDS)}")


__all__ = ["Backend", "Counters", "Measurement", "RpcError", "make_backend", "AnalyticBackend"]
