"""What every cost backend provides."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence

from ..config import CostConfig
from ..cache import CostCache
from ..fusion import Partitioner
from ..kernel import Kernel, KernelSig


class Grouping(Protocol):
    """A graph's kernels as a runtime groups its operators."""

    def kernels(self, graph) -> tuple[Kernel, ...]: ...


@dataclass
class Measurement:
    """The cost of one kernel in milliseconds (inf when it failed), with a status and a one-line detail."""

    cost_ms: float
    status: str = "ok"  # ok | build_failed | build_timeout | run_failed | analytic
    detail: str = ""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.cost_ms)

    @property
    def persistent(self) -> bool:
        """Whether the result holds on a later run (a measurement or a failure), so the cache may keep it; an
        analytic estimate or a build that ran out of time on a busy machine does not."""
        return self.status in ("ok", "build_failed", "run_failed")


@dataclass
class Counters:
    builds: int = 0
    build_failures: int = 0
    measurements: int = 0
    run_failures: int = 0
    extra: dict = field(default_factory=dict)


class Backend:
    """Measures kernels. `scope()` names everything a measurement depends on besides the kernel."""

    name = "base"
    cacheable = True
    noisy = False  # whether its costs are measurements (noisy: near-equal graphs are measured whole before choosing)

    def __init__(self, config: CostConfig):
        self.config = config
        self.counters = Counters()

    def scope(self) -> tuple[str, str, str, str]:
        """(backend, target, device identity, library versions): the cache key besides the kernel."""
        raise NotImplementedError

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        raise NotImplementedError

    def grouping(self, partitioner: Partitioner, cache: Optional[CostCache]) -> Grouping:
        """How this backend's runtime groups a graph's operators into kernels (`kernels(graph)`): TVM's FuseOps
        (the partitioner) unless the runtime fuses otherwise."""
        return partitioner

    def close(self) -> None:
        pass
