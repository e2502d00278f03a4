"""The e-graph search: saturate, cost the e-nodes, extract, and keep the result only if the cost model agrees."""
from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ... import errors
from ...graph import TensorGraph
from ..backtrack import SearchStats, backtracking_search
from .config import EGraphConfig
from .costs import ENodeCoster
from .egraph_view import EGraphView
from .engine import EGraphStats, TensorEGraph
from .extract import Extraction, fixed_classes, greedy, ilp, materialize, refine

log = logging.getLogger(__name__)

REFINE_SHARE = 1.0  # the local search takes at most this share of the time the search took before it
REFINE_MIN = 0.25  # ... and at least these seconds (within `EGraphConfig.refine_time`)
ILP_MIN_SECONDS = 0.5  # the solver's time when the search's time limit has run out (its start is the greedy one)


@dataclass
class EGraphReport:
    """What the e-graph search did, beyond `SearchStats`."""

    saturation: EGraphStats
    rewrites: int = 0  # rules run as e-graph rewrites
    untranslated: list = field(default_factory=list)  # rule names left to the backtracking search
    extraction: str = ""  # the extraction whose graph was kept: greedy | ilp
    ilp_status: str = ""
    predicted: float = math.nan  # sum of the kept extraction's e-node costs
    greedy_cost: float = math.nan  # the cost model's cost of the greedy extraction's graph
    ilp_cost: float = math.nan  # ... and of the ILP's (nan when not run)
    refined_cost: float = math.nan  # ... and of the cheaper of the two after the local search (`extract.refine`)
    refine_moves: int = 0
    seconds_saturate: float = 0.0
    seconds_cost: float = 0.0
    seconds_extract: float = 0.0
    seconds_refine: float = 0.0

    @property
    def prediction_error(self) -> float:
        """(e-node cost sum - cost model's cost) / cost model's cost, for the kept extraction."""
        actual = self.refined_cost if self.extraction.endswith("refine") else (
            self.ilp_cost if self.extraction == "ilp" else self.greedy_cost)
        return (self.predicted - actual) / actual if actual and math.isfinite(actual) else math.nan


class EGraphUnavailable(errors.SettingsError):
    """The e-graph search was asked for and its libraries are not installed."""


def _require_libraries() -> None:
    import importlib.util

    missing = [m for m in ("egglog", "highspy") if importlib.util.find_spec(m) is None]
    if missing:
        raise EGraphUnavailable(f"the e-graph search needs {' and '.join(missing)}: pip install 'taso-tvm[egraph]' "
                                "(or use the backtracking search: search method 'backtrack')")


def _closure(rewrites: list, graph: TensorGraph) -> list:
    """The rewrites whose source operators can occur: in the graph, or made by a rewrite that can run."""
    present = {n.op for n in graph.ops()}
    grew = True
    while grew:
        grew = False
        for rw in rewrites:
            if rw.source_ops <= present and not rw.target_ops <= present:
                present |= rw.target_ops
                grew = True
    return [rw for rw in rewrites if rw.source_ops <= present]


def egraph_search(graph: TensorGraph, rules: Any, cost: Callable, config: Optional[EGraphConfig] = None,
                  prefetch: Optional[Callable] = None,
                  deadline: Optional[float] = None) -> tuple[TensorGraph, SearchStats]:
    """Equality saturation over `rules` (a rule set with `pattern_rewrites()`), then extraction under `cost`.

    Returns the best graph (the input itself when nothing extracted is cheaper by `cost`) and statistics whose
    `egraph` field is an `EGraphReport`. Rules that cannot be e-graph rewrites run afterwards as a backtracking search
    over the extracted graph; on a graph larger than `small_graph`, rules with more source operators than
    `max_pattern_nodes` are left to that search too, which then runs every rule."""
    _require_libraries()
    cfg = (config or EGraphConfig()).validate()
    if deadline is not None:
        cfg = cfg.with_deadline(deadline - time.monotonic())
    t0 = time.monotonic()
    rewrites, others = rules.pattern_rewrites()
    if graph.num_ops > cfg.small_graph and any(len(r.nodes) > cfg.max_pattern_nodes for r in rewrites):
        # the large rules are left to a backtracking search over the extracted graph, with every rule (the
        # normalizing steps they need may not be in the extracted graph: they cost nothing by themselves)
        rewrites = [r for r in rewrites if len(r.nodes) <= cfg.max_pattern_nodes]
        others = rules
    active = _closure(list(rewrites), graph)
    start_cost = cost(graph)
    stats = SearchStats(start_cost, start_cost, graph.num_runtime_ops, graph.num_runtime_ops)
    teg = TensorEGraph(graph, active, cfg)
    sat = teg.saturate(deadline)
    rep = EGraphReport(sat, len(active), [r.name for r in others], seconds_saturate=sat.seconds)
    stats.egraph = rep
    stats.stopped_by = sat.stop
    stats.expanded = sat.iterations
    stats.candidates = sat.matches

    t1 = time.monotonic()
    view = EGraphView(teg)
    sat.eclasses = view.num_classes
    sat.enodes = len(view.enodes)
    costs = ENodeCoster(view, cost, prefetch, cfg.fusion_costs).costs()
    rep.seconds_cost = time.monotonic() - t1

    t2 = time.monotonic()
    fixed = fixed_classes(view)
    candidates: list[Extraction] = [greedy(view, costs, fixed)]
    if cfg.extraction == "ilp":
        limit = cfg.ilp_time_limit if deadline is None else max(min(cfg.ilp_time_limit, deadline - time.monotonic()),
                                                                  ILP_MIN_SECONDS)
        candidates.append(ilp(view, costs, limit, candidates[0], fixed, cfg.ilp_cycles))
        rep.ilp_status = candidates[1].status
    best, best_cost, kept, kept_graph, kept_cost = graph, start_cost, None, None, math.inf
    for ex in candidates:
        g = materialize(view, ex.choice, graph.store)
        c = cost(g)
        if ex.method == "greedy":
            rep.greedy_cost = c
        else:
            rep.ilp_cost = c
        if c < kept_cost:
            kept, kept_graph, kept_cost = ex, g, c
    rep.seconds_extract = time.monotonic() - t2
    if cfg.refine_time > 0 and kept is not None:
        t3 = time.monotonic()
        budget = min(cfg.refine_time, max(REFINE_SHARE * (t3 - t0), REFINE_MIN))
        end = t3 + budget if deadline is None else min(t3 + budget, deadline)
        kept, kept_graph, kept_cost, rep.refine_moves = refine(view, costs, kept, candidates[0], cost, graph.store,
                                                               end, fixed)
        rep.refined_cost = kept_cost
        rep.seconds_refine = time.monotonic() - t3
    if kept is not None and (kept_cost < best_cost or (kept_cost <= best_cost * (1 + 1e-12) and
                                                       kept_graph.num_runtime_ops < best.num_runtime_ops)):
        best, best_cost = kept_graph, kept_cost
        rep.extraction, rep.predicted = kept.method, kept.cost
        stats.rules_applied = _applied(view, kept, graph, best, teg)
    else:
        rep.extraction = "none (no extraction is cheaper than the input)"
    if len(others):  # rules the e-graph cannot run: a backtracking search over the extracted graph
        best2, st2 = backtracking_search(best, others, cost, deadline=deadline, prefetch=prefetch)
        if st2.cost_after < best_cost:
            best, best_cost = best2, st2.cost_after
            stats.rules_applied.update(st2.rules_applied)
    stats.cost_after, stats.ops_after = best_cost, best.num_runtime_ops
    stats.seconds = time.monotonic() - t0
    log.info("e-graph search: %d rewrites, %d iterations (%s), %d e-nodes in %d classes; cost %.4g -> %.4g "
             "(%s extraction, predicted %.4g), %.2f s", len(active), sat.iterations, sat.stop.value, sat.enodes,
             sat.eclasses, start_cost, best_cost, rep.extraction, rep.predicted, stats.seconds)
    return best, stats


def _applied(view: EGraphView, ex: Extraction, graph: TensorGraph, result: TensorGraph, teg: TensorEGraph) -> Counter:
    """Rules behind the extracted graph, counted once per application: the applications that made its e-nodes,
    and those that made none (an alias target: `split(concat(a, b)) -> a, b`) where the class they joined is
    computed by another e-node than the one they matched."""
    if result == graph:
        return Counter()
    apps: set = set()
    for c, i in ex.choice.items():
        if view.enodes[i].kind in ("op", "weight"):
            o = view.origin(view.enodes[i])
            if o is not None:
                apps.add(o)
    made = set(teg.origin.values())
    index = view.class_index
    for app, k_old, src in teg.unions:
        if app in made or app in apps or src is None:
            continue
        c = index.get(view.snap.cls_of.get(k_old))
        if c is None or c not in ex.choice:
            continue
        n = view.enodes[ex.choice[c]]
        ctor, ks, payload = src
        if (n.ctor, tuple(view.class_k[h] for h in n.children), n.payload) != (ctor, tuple(view.snap.k(k) for k in ks),
                                                                               payload):
            apps.add(app)
    return Counter(rule for rule, _ in apps)
