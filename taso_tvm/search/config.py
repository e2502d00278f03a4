"""The search's settings and their defaults, written once: `SearchConfig`."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

MAX_OPS_SLACK = 4  # operators a candidate may add beyond max_ops_ratio x the start (room on tiny graphs)


@dataclass
class SearchConfig:
    """Search settings. `alpha`: keep a candidate costing below alpha x the best; `budget`: graphs expanded per
    region; `time_limit` (s): for the whole search; `region_size`: the operator count above which a graph is
    searched region by region; `max_ops_ratio`: candidates may grow to this many times the start's operators
    (plus `MAX_OPS_SLACK`)."""

    alpha: float = 1.05
    budget: int = 10
    time_limit: Optional[float] = None
    region_size: int = 32
    max_ops_ratio: float = 1.5

    def validate(self) -> "SearchConfig":
        if not (isinstance(self.alpha, (int, float)) and 1.0 <= self.alpha <= 3.0):
            raise ValueError(f"alpha must be a number in [1, 3], got {self.alpha!r}")
        if not (isinstance(self.budget, int) and self.budget >= 0):
            raise ValueError(f"budget must be a non-negative integer, got {self.budget!r}")
        if self.time_limit is not None and not (isinstance(self.time_limit, (int, float)) and self.time_limit > 0):
            raise ValueError(f"time limit must be a positive number of seconds, got {self.time_limit!r}")
        if not (isinstance(self.region_size, int) and self.region_size >= 4):
            raise ValueError(f"region size must be an integer >= 4, got {self.region_size!r}")
        return self

    def max_ops(self, start_ops: int) -> int:
        """The most operators a candidate grown from a graph of `start_ops` operators may have."""
        return int(start_ops * self.max_ops_ratio) + MAX_OPS_SLACK

    @classmethod
    def defaults(cls, names: Optional[tuple] = None) -> dict:
        """{setting: default} for the named settings (default: all)."""
        return {f.name: f.default for f in fields(cls) if names is None or f.name in names}
