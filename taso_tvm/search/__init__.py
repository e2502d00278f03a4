"""Cost-based backtracking search over verified rules (TASO), region by region for large graphs."""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from ..graph import TensorGraph
from .backtrack import CostFn, RuleSource, SearchStats, backtracking_search
from .config import SearchConfig
from .regions import search_by_regions

log = logging.getLogger(__name__)


def optimize_graph(graph: TensorGraph, rules: RuleSource, cost: CostFn, config: Optional[SearchConfig] = None,
                   prefetch: Optional[Callable[[list], None]] = None) -> tuple[TensorGraph, SearchStats]:
    """Search for a cheaper equivalent of `graph`. Returns the best graph and aggregate statistics.

    `cost` may be a callable or a cost model object (its `graph_cost`, and its `prefetch` to batch new kernels)."""
    if hasattr(cost, "graph_cost"):
        prefetch = prefetch or getattr(cost, "prefetch", None)
        cost = cost.graph_cost
    cfg = (config or SearchConfig()).validate()
    t0 = time.monotonic()
    deadline = None if cfg.time_limit is None else t0 + cfg.time_limit
    start_cost = cost(graph)
    total = SearchStats(start_cost, start_cost, graph.num_runtime_ops, graph.num_runtime_ops)

    def search_one(g: TensorGraph):
        return backtracking_search(g, rules, cost, cfg, deadline=deadline, prefetch=prefetch)

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() > deadline

    best, per_region = search_by_regions(graph, search_one, cfg.region_size, out_of_time)
    for s in per_region:
        total.merge(s)
    if out_of_time() and total.stopped_by != "interrupt":
        total.stopped_by = "time"
    best_cost = cost(best)
    if best_cost > start_cost:  # regions are costed alone; never hand back a graph the model says is worse
        log.warning("region splice raised the cost (%.4g > %.4g): keeping the original graph", best_cost, start_cost)
        best, best_cost = graph, start_cost
        total.rules_applied.clear()
    total.cost_after, total.ops_after = best_cost, best.num_runtime_ops
    total.seconds = time.monotonic() - t0
    log.info("search: cost %.4g -> %.4g, %d -> %d operators, %d graphs expanded, %.2f s (%s)", start_cost,
             best_cost, total.ops_before, total.ops_after, total.expanded, total.seconds, total.stopped_by)
    return best, total


__all__ = ["SearchConfig", "SearchStats", "optimize_graph", "backtracking_search", "CostFn", "RuleSource"]
