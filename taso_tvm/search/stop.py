"""Why a search stopped: one enumeration for the backtracking search and the e-graph's saturation (egg's runner
reports its reasons the same way). A `str` Enum: it compares equal to, and prints as, its value ("time",
"budget", ...), so summaries and reports read as before."""
from __future__ import annotations

import enum


class StopReason(str, enum.Enum):
    """The reason a search (or one region of it) stopped."""

    EXHAUSTED = "exhausted"  # backtracking: no candidate left below alpha x the best
    BUDGET = "budget"  # backtracking: the graphs-expanded budget ran out
    TIME = "time"  # the whole search's time limit
    INTERRUPT = "interrupt"  # Ctrl-C: the best graph so far is kept
    SATURATED = "saturated"  # e-graph: no rule adds anything
    NODE_LIMIT = "node_limit"
    ITERATION_LIMIT = "iteration_limit"
    TIME_LIMIT = "time_limit"  # e-graph: saturation's own time limit

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
