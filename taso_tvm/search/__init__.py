"""The search for a cheaper equivalent graph over verified rules: TASO's cost-based backtracking, region by region
for large graphs (`backtrack.py`, `regions.py`), or equality saturation with extraction under the cost model
(`egraph/`, Tensat's method), or both (`SearchConfig.method`)."""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from ..graph import TensorGraph
from .backtrack import (NOISE_BAND, CostFn, RemeasureFn, RuleSource, SearchStats, SettleFn, backtracking_search,
                        normalize, remeasured)
from .config import METHODS, SearchConfig
from .regions import search_by_regions
from .stop import StopReason

log = logging.getLogger(__name__)


def optimize_graph(graph: TensorGraph, rules: RuleSource, cost: CostFn, config: Optional[SearchConfig] = None,
                   prefetch: Optional[Callable[[list], None]] = None) -> tuple[TensorGraph, SearchStats]:
    """Search for a cheaper equivalent of `graph`. Returns the best graph and aggregate statistics.

    `cost` may be a callable or a cost model object (its `graph_cost`, and its `prefetch` to batch new kernels).
    `config.method` picks the search: backtracking (region by region), the e-graph (`search.egraph`; `rules` must
    offer `pattern_rewrites()`, as a `RuleSet` does), or both, keeping the cheaper graph (the backtracking one on
    a tie)."""
    settle = remeasure = None
    if hasattr(cost, "graph_cost"):
        prefetch = prefetch or getattr(cost, "prefetch", None)
        if getattr(cost, "noisy", False):
            settle, remeasure = cost.settle, getattr(cost, "remeasure", None)
        cost = cost.graph_cost
    cfg = (config or SearchConfig()).validate()
    t0 = time.monotonic()
    deadline = None if cfg.time_limit is None else t0 + cfg.time_limit
    if cfg.method == "egraph":
        from .egraph import egraph_search

        return egraph_search(graph, rules, cost, cfg.egraph, prefetch=prefetch, deadline=deadline)
    best, total = _backtrack(graph, rules, cost, cfg, deadline, prefetch, settle, remeasure)
    if cfg.method == "both":
        from .egraph import egraph_search

        eg_best, eg_stats = egraph_search(graph, rules, cost, cfg.egraph, prefetch=prefetch, deadline=deadline)
        if eg_stats.cost_after < total.cost_after or (eg_stats.cost_after <= total.cost_after * (1 + 1e-12) and
                                                      eg_best.num_runtime_ops < best.num_runtime_ops):
            eg_stats.seconds = time.monotonic() - t0
            log.info("search (both): the e-graph's graph is cheaper (%.4g < %.4g)", eg_stats.cost_after,
                     total.cost_after)
            return eg_best, eg_stats
        total.egraph = eg_stats.egraph
        total.seconds = time.monotonic() - t0
    return best, total


def _backtrack(graph: TensorGraph, rules: RuleSource, cost: CostFn, cfg: SearchConfig, deadline: Optional[float],
               prefetch: Optional[Callable[[list], None]], settle: Optional[SettleFn] = None,
               remeasure: Optional[RemeasureFn] = None) -> tuple[TensorGraph, SearchStats]:
    """TASO's backtracking search, region by region (`settle`: see `backtracking_search`; `remeasure`: measure
    afresh the kernels that differ between graphs, `CostModel.remeasure`)."""
    t0 = time.monotonic()
    start_cost = cost(graph)
    total = SearchStats(start_cost, start_cost, graph.num_runtime_ops, graph.num_runtime_ops)

    def search_one(g: TensorGraph):
        return backtracking_search(g, rules, cost, cfg, deadline=deadline, prefetch=prefetch, settle=settle,
                                   remeasure=remeasure)

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() > deadline

    # the normal form first, on the whole graph: a region boundary must not cut a pattern the `normalize` rules
    # bring together (GELU's Div made a Mul in one region, its Erf left unfused in the next: a form no runtime fuses)
    normal, normal_path = normalize(graph, rules, cfg.normalize_steps) if cfg.budget > 0 else (graph, ())
    best, per_region = search_by_regions(normal, search_one, cfg.region_size, out_of_time)
    total.rules_applied.update(normal_path)
    for s in per_region:
        total.merge(s)
    if out_of_time() and total.stopped_by != StopReason.INTERRUPT:
        total.stopped_by = StopReason.TIME
    best_cost = cost(best)
    # regions are costed alone; never hand back a graph the model says is worse (beyond the noise, where a region's
    # graph was chosen by measuring candidates whole)
    band = NOISE_BAND if settle is not None else 0.0
    if best_cost > start_cost * (1 + band):
        start_cost, best_cost = remeasured(remeasure, cost, graph, best, start_cost, best_cost)
        total.cost_before = start_cost
    if best_cost > start_cost * (1 + band):
        log.warning("region splice raised the cost (%.4g > %.4g): keeping the original graph", best_cost, start_cost)
        best, best_cost = graph, start_cost
        total.rules_applied.clear()
    total.cost_after, total.ops_after = best_cost, best.num_runtime_ops
    total.seconds = time.monotonic() - t0
    log.info("search: cost %.4g -> %.4g, %d -> %d operators, %d graphs expanded, %.2f s (%s)", start_cost,
             best_cost, total.ops_before, total.ops_after, total.expanded, total.seconds, total.stopped_by)
    return best, total


__all__ = ["SearchConfig", "SearchStats", "StopReason", "optimize_graph", "backtracking_search", "CostFn", "RuleSource",
           "METHODS"]
