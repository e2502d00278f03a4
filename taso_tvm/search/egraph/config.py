"""The e-graph search's limits and choices, and why saturation stopped."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..stop import StopReason  # noqa: F401  (the e-graph's reasons are members of the search's enum)


EXTRACTIONS = ("ilp", "greedy")


@dataclass
class EGraphConfig:
    """`node_limit`: stop growing past this many e-nodes; `iter_limit`: rounds of matching and applying;
    `time_limit`: seconds of saturation; `multi_iters`: rounds in which multi-pattern rules (several source roots,
    e.g. merging two convolutions that share an input) run, Tensat's k_multi (they grow the e-graph fastest);
    `extraction`: `ilp` (exact, HiGHS, Tensat's formulation) or `greedy`; `ilp_time_limit`: seconds for the
    solver, after which its best solution or the greedy one is used; `fusion_costs`: cost an e-node by what it adds
    to a kernel fused with its producer (see `costs.py`) instead of as a kernel of its own; `refine_time`: seconds
    of local search over the extracted graph under the cost model itself (`extract.refine`; 0: none), at most as
    long as the search before it took; `ilp_cycles`: `order` (Tensat's ordering constraints) or `lazy` (cycles
    cut as the solver meets them; the same optimum, faster where few cycles are chosen: `extract.ilp`);
    `max_pattern_nodes`: on graphs of more than `small_graph` operators, rules whose source has more operators than
    this (the attention fusions, 11-20) are left to the backtracking search over the extracted graph: egglog's join
    of such queries stalls saturation there (BERT's 396 operators: one round in 30 s); on smaller graphs every rule
    runs in the e-graph (the committed sentence encoder, 80 operators: 1 s, 13 % cheaper with ORT's costs)."""

    node_limit: int = 20000
    iter_limit: int = 12
    time_limit: float = 20.0
    multi_iters: int = 1
    extraction: str = "ilp"
    ilp_time_limit: float = 10.0
    fusion_costs: bool = True
    refine_time: float = 2.0
    ilp_cycles: str = "lazy"
    max_pattern_nodes: int = 10
    small_graph: int = 128

    def validate(self) -> "EGraphConfig":
        """Raise ValueError naming the first setting out of its range."""
        if not (isinstance(self.node_limit, int) and self.node_limit > 0):
            raise ValueError(f"e-graph node limit must be a positive integer, got {self.node_limit!r}")
        if not (isinstance(self.iter_limit, int) and self.iter_limit > 0):
            raise ValueError(f"e-graph iteration limit must be a positive integer, got {self.iter_limit!r}")
        if not (isinstance(self.multi_iters, int) and self.multi_iters >= 0):
            raise ValueError(f"e-graph multi-pattern iterations must be an integer >= 0, got {self.multi_iters!r}")
        if not (isinstance(self.refine_time, (int, float)) and self.refine_time >= 0):
            raise ValueError(f"e-graph refine time must be a number of seconds >= 0, got {self.refine_time!r}")
        for name in ("time_limit", "ilp_time_limit"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"e-graph {name.replace('_', ' ')} must be a positive number of seconds, got {v!r}")
        for name in ("max_pattern_nodes", "small_graph"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                raise ValueError(f"e-graph {name.replace('_', ' ')} must be a positive integer, got {v!r}")
        if self.ilp_cycles not in ("order", "lazy"):
            raise ValueError(f"e-graph ILP cycles must be order or lazy, got {self.ilp_cycles!r}")
        if self.extraction not in EXTRACTIONS:
            raise ValueError(f"e-graph extraction must be one of {', '.join(EXTRACTIONS)}, got {self.extraction!r}")
        return self

    def with_deadline(self, seconds_left: Optional[float]) -> "EGraphConfig":
        """A copy whose saturation time is at most `seconds_left` (the search's own time limit)."""
        if seconds_left is None or seconds_left >= self.time_limit:
            return self
        from dataclasses import replace

        return replace(self, time_limit=max(seconds_left, 1e-3))
