"""Roofline costs: max(FLOPs / peak FLOP/s, bytes / peak bandwidth) + launch overhead, peaks from the config."""
from __future__ import annotations

import json
from typing import Sequence

from ..config import CostConfig
from ..flops import kernel_flops_bytes, opaque_bytes
from ..kernel import KernelSig
from .base import Backend, Measurement


class AnalyticBackend(Backend):
    """Instant; for tests, as a prior that orders measurements, and for kernels other backends cannot run."""

    name = "analytic"
    cacheable = False

    def __init__(self, config: CostConfig):
        super().__init__(config)
        self.peaks = config.peaks()

    def scope(self) -> tuple[str, str, str, str]:
        return (self.name, json.dumps(self.config.target_dict, sort_keys=True), "roofline",
                json.dumps(self.peaks, sort_keys=True))

    def cost(self, sig: KernelSig) -> float:
        """Milliseconds. A lone reshape is a view: launch overhead only."""
        launch = self.peaks["launch_us"] * 1e-3
        if sig.is_view_only:
            return launch
        if any(op == "opaque" for op in sig.ops):
            flops, nbytes = 0.0, opaque_bytes(sig)
        else:
            flops, nbytes = kernel_flops_bytes(sig)
        compute = flops / (self.peaks["peak_gflops"] * 1e9)
        memory = nbytes / (self.peaks["peak_gbps"] * 1e9)
        return max(compute, memory) * 1e3 + launch

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        return {s: Measurement(self.cost(s), "analytic") for s in sigs}
