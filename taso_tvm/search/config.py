"""The search's settings and their defaults, written once: `SearchConfig`."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Optional

MAX_OPS_SLACK = 4  # operators a candidate may add beyond max_ops_ratio x the start (room on tiny graphs)

# the settings users set (config files, command line, API), with the words their messages use
USER_SETTINGS = {"alpha": "alpha", "budget": "budget", "time_limit": "time limit", "region_size": "region size",
                 "method": "search method"}
METHODS = ("backtrack", "egraph", "both")  # TASO's backtracking, equality saturation (Tensat's), both (the cheaper)


def check_setting(name: str, v: Any) -> str:
    """Why `v` is not a valid value of search setting `name` ('must be ...'), or ''."""
    num = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if name == "alpha" and not (num and 1.0 <= v <= 3.0):
        return f"must be a number in [1, 3], got {v!r}"
    if name == "budget" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return f"must be an integer >= 0, got {v!r}"
    if name == "time_limit" and not (v is None or (num and v > 0)):
        return f"must be a positive number of seconds, got {v!r}"
    if name == "region_size" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 4):
        return f"must be an integer >= 4, got {v!r}"
    if name == "method" and v not in METHODS:
        return f"must be one of {', '.join(METHODS)}, got {v!r}"
    return ""


@dataclass
class SearchConfig:
    """Search settings. `alpha`: keep a candidate costing below alpha x the best; `budget`: graphs expanded per
    region; `time_limit` (s): for the whole search; `region_size`: the operator count above which a graph is
    searched region by region; `max_ops_ratio`: candidates may grow to this many times the start's operators
    (plus `MAX_OPS_SLACK`); `descent_steps`: after the budget, improving rewrites taken one at a time from the best
    graph, at most this many (0: none); `normalize_steps`: rewrites by the rules of family `normalize` before the
    search, at most this many; `fuse_steps`: then rewrites into the runtime's fused operators and the packing of
    products of one input (families `attention`, `layernorm`, `gelu`, `packing`: `search.backtrack.FUSING_FAMILIES`),
    each the one that lowers the cost most, while one does, at most this many
    (0: none), so that every layer a verified rule can fuse is fused whatever the budget; `method`: `backtrack` (TASO's search, the settings above), `egraph` (equality
    saturation and extraction, `search.egraph`, whose limits are `egraph`, an `EGraphConfig`; None: its
    defaults) or `both` (each, keeping the graph the cost model prefers)."""

    alpha: float = 1.05
    budget: int = 10
    time_limit: Optional[float] = None
    region_size: int = 64
    max_ops_ratio: float = 1.5
    descent_steps: int = 32
    normalize_steps: int = 256
    fuse_steps: int = 256
    method: str = "backtrack"
    egraph: Any = None

    def validate(self) -> "SearchConfig":
        """Raise ValueError naming the first setting out of its range."""
        for name, label in USER_SETTINGS.items():
            why = check_setting(name, getattr(self, name))
            if why:
                raise ValueError(f"{label} {why}")
        return self

    def max_ops(self, start_ops: int) -> int:
        """The most operators a candidate grown from a graph of `start_ops` operators may have."""
        return int(start_ops * self.max_ops_ratio) + MAX_OPS_SLACK

    @classmethod
    def defaults(cls) -> dict:
        """{setting: default} for the settings users set (`USER_SETTINGS`)."""
        return {f.name: f.default for f in fields(cls) if f.name in USER_SETTINGS}
