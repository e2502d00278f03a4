"""TASO's cost-based backtracking search over verified rewrite rules.

A priority queue ordered by cost; pop the cheapest graph; apply every rule at every match; keep a candidate whose
cost is below alpha * best (alpha > 1 lets a step up lead further down); drop graphs seen before; bound the growth
in operator count; stop at the budget of expanded graphs, the time limit, or Ctrl-C, returning the best graph.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from ..graph import TensorGraph
from .config import SearchConfig
from .stop import StopReason

log = logging.getLogger(__name__)

CostFn = Callable[[TensorGraph], float]
# graphs whose summed costs are this close (relative) are within the noise of each other: measured whole before one
# is chosen (`settle`), and the same band decides that measurement
NOISE_BAND = 0.03
SETTLE_CANDIDATES = 4  # at most this many of the cheapest graphs are measured whole
SettleFn = Callable[[list, float], int]
RemeasureFn = Callable[[list], int]  # measure afresh the kernels that differ between graphs; how many it measured


class RuleSource(Protocol):
    """What the search needs of a rule set: every (rule, match) of a graph, and a way to apply one (a rule has a
    `name`, which the statistics count)."""

    def matches(self, graph: TensorGraph) -> list: ...

    def apply(self, graph: TensorGraph, rule: Any, match: Any) -> Optional[TensorGraph]:
        """The graph with the match rewritten; None when the rule's target does not build there or would make a
        cycle."""


@dataclass
class SearchStats:
    """What one search did."""

    cost_before: float
    cost_after: float
    ops_before: int
    ops_after: int
    expanded: int = 0
    candidates: int = 0
    seconds: float = 0.0
    stopped_by: StopReason = StopReason.EXHAUSTED
    rules_applied: Counter = field(default_factory=Counter)  # along the path to the best graph
    egraph: Any = None  # the e-graph search's report (`egraph.EGraphReport`), when it ran

    def merge(self, other: "SearchStats") -> None:
        self.expanded += other.expanded
        self.candidates += other.candidates
        self.rules_applied.update(other.rules_applied)
        if other.stopped_by in (StopReason.TIME, StopReason.INTERRUPT):
            self.stopped_by = other.stopped_by
        elif other.stopped_by == StopReason.BUDGET and self.stopped_by == StopReason.EXHAUSTED:
            self.stopped_by = StopReason.BUDGET


def backtracking_search(graph: TensorGraph, rules: RuleSource, cost: CostFn, config: Optional[SearchConfig] = None,
                        deadline: Optional[float] = None,
                        prefetch: Optional[Callable[[list], None]] = None,
                        settle: Optional[SettleFn] = None,
                        remeasure: Optional[RemeasureFn] = None) -> tuple[TensorGraph, SearchStats]:
    """Search from `graph`; returns the cheapest graph found and statistics.

    From `config` (default `SearchConfig()`): `alpha`, `budget` (graphs expanded) and the bound on candidates'
    operator count (`max_ops`); `deadline` is a `time.monotonic()` instant. `prefetch(graphs)`, if given, is called
    with each expansion's new candidates before they are costed one by one (a measuring cost model builds their new
    kernels in one parallel batch). Deterministic: ties are broken by discovery order. `settle(graphs, band)`, if
    given, picks among the cheapest graphs (the given graph first, then by cost) when their costs are within
    NOISE_BAND of each other (a cost model measures them whole), so noise in the summed costs does not decide.
    With `settle` (measured costs), the route is noise-tolerant too: costs within NOISE_BAND of each other are
    ordered by a key that does not depend on the measurements (`_better`, `_priority`). `remeasure(graphs)`, if
    given, measures afresh the kernels that differ between graphs (`CostModel.remeasure`): called before the graph
    found is dropped for costing more than the given one, so that a measurement kept from a busy moment does not
    decide.
    """
    cfg = config or SearchConfig()
    band = NOISE_BAND if settle is not None else 0.0
    alpha, budget = cfg.alpha, cfg.budget
    t0 = time.monotonic()
    start_cost = cost(graph)
    ops0 = graph.num_runtime_ops
    max_ops = cfg.max_ops(ops0)
    # the search tree grows from the normal form (the `normalize` rules applied to a fixpoint); the graph as given
    # stays the answer unless something cheaper is found
    root, root_path = normalize(graph, rules, cfg.normalize_steps) if budget > 0 else (graph, ())
    root_cost = start_cost if root is graph else cost(root)
    # the reference `settle` keeps unless another graph is faster beyond the noise: the given graph, or its fused
    # form when the fusing step took a rewrite (each fusion was accepted by the cost model one kernel at a time: a
    # region whose time is its large products measures them in its noise, which must not undo them)
    ref = (graph, start_cost, ())
    if budget > 0 and cfg.fuse_steps:  # then every fusion the cost model accepts, before the budget is spent
        root, root_cost, fused = fuse(root, root_cost, rules, cost, cfg.fuse_steps, max_ops, deadline, prefetch,
                                      band, cfg.normalize_steps)
        root_path += fused
        if fused:
            ref = (root, root_cost, root_path)
    best, best_cost, best_path = root, root_cost, root_path
    counter = itertools.count()
    heap = [(_priority(root_cost, root, band), next(counter), root_cost, root, root_path)]
    seen = {graph, root}
    stats = SearchStats(start_cost, start_cost, ops0, ops0)
    leaders: list = [(root_cost, -1, root, root_path)]  # the cheapest graphs met, for `settle`
    try:
        while heap:
            if stats.expanded >= budget:
                stats.stopped_by = StopReason.BUDGET
                break
            if deadline is not None and time.monotonic() > deadline:
                stats.stopped_by = StopReason.TIME
                break
            _, _, c, g, path = heapq.heappop(heap)
            stats.expanded += 1
            fresh = []
            for rule, match in rules.matches(g):
                new = rules.apply(g, rule, match)
                if new is None or new in seen:
                    continue
                seen.add(new)
                if new.num_runtime_ops <= max_ops:
                    fresh.append((rule, new))
            if prefetch is not None and fresh:
                prefetch([new for _, new in fresh])
            for rule, new in fresh:
                stats.candidates += 1
                nc = cost(new)
                _lead(leaders, (nc, stats.candidates, new, path + (rule.name,)))
                if _better(nc, new, best_cost, best, band):
                    best, best_cost, best_path = new, nc, path + (rule.name,)
                    log.info("cost %.4g -> %.4g (%s)", c, nc, rule.name)
                if nc < alpha * best_cost:
                    heapq.heappush(heap, (_priority(nc, new, band), next(counter), nc, new, path + (rule.name,)))
        if cfg.descent_steps and budget > 0 and stats.stopped_by == StopReason.BUDGET:
            best, best_cost, best_path = _descend(best, best_cost, best_path, rules, cost, cfg, max_ops, seen,
                                                  deadline, stats, prefetch, band)
    except KeyboardInterrupt:
        stats.stopped_by = StopReason.INTERRUPT
        log.warning("search interrupted: returning the best graph found so far")
    if settle is not None and stats.stopped_by != "interrupt":
        best, best_cost, best_path = _settle(settle, ref, best, best_cost, best_path, leaders)
    # the normal form led nowhere cheaper (within the band too: a rewrite the model says costs more is not kept for
    # having fewer operators)
    if not _better(best_cost, best, start_cost, graph):
        start_cost, best_cost = remeasured(remeasure, cost, graph, best, start_cost, best_cost)
        stats.cost_before = start_cost
    if not _better(best_cost, best, start_cost, graph):
        best, best_cost, best_path = graph, start_cost, ()
    stats.cost_after = best_cost
    stats.ops_after = best.num_runtime_ops
    stats.rules_applied = Counter(best_path)
    stats.seconds = time.monotonic() - t0
    return best, stats


def remeasured(remeasure: Optional[RemeasureFn], cost: CostFn, graph: TensorGraph, best: TensorGraph,
               graph_cost: float, best_cost: float) -> tuple[float, float]:
    """The costs of `graph` and of `best`, the graph found instead, after `remeasure` measured afresh the kernels
    that differ between them (a measurement the persistent cache kept from a busy moment must not drop what the
    search found); the costs given where there is no `remeasure` or nothing to measure."""
    if remeasure is None or best is graph or not remeasure([graph, best]):
        return graph_cost, best_cost
    graph_cost, best_cost = cost(graph), cost(best)
    log.info("remeasured: %.4g -> %.4g", graph_cost, best_cost)
    return graph_cost, best_cost


def _lead(leaders: list, entry: tuple) -> None:
    """Keep `entry` (cost, order, graph, path) if it is among the SETTLE_CANDIDATES cheapest."""
    leaders.append(entry)
    leaders.sort(key=lambda e: (e[0], e[1]))
    del leaders[SETTLE_CANDIDATES:]


def _settle(settle: SettleFn, ref: tuple, best: TensorGraph, best_cost: float, best_path: tuple,
            leaders: list) -> tuple:
    """Among the reference graph `ref` (graph, cost, path) and the cheapest graphs met whose costs are within
    NOISE_BAND of the best, the one `settle` picks. The preference it keeps unless another is faster beyond the
    noise does not depend on the noisy costs: the reference first (a rewrite must pay beyond the noise), then fewer
    operators."""
    graph, start_cost, start_path = ref
    bound = best_cost * (1 + NOISE_BAND)
    near = {id(g): (c, g, p) for c, _, g, p in leaders if c <= bound}
    near[id(best)] = (best_cost, best, best_path)
    if start_cost <= bound:
        near[id(graph)] = (start_cost, graph, start_path)
    cands = sorted(near.values(), key=lambda e: (e[1] is not graph, e[1].num_runtime_ops, e[0]))
    if len(cands) < 2 or not all(math.isfinite(c) for c, _, _ in cands):
        return best, best_cost, best_path
    c, g, p = cands[settle([g for _, g, _ in cands], NOISE_BAND)]
    return g, c, p


NORMALIZE = "normalize"  # the family of rules applied eagerly, whatever they cost: they bring exporters' forms to one
DEAD_ROWS = "dead_rows"  # also eager: a slice moved towards the inputs, so no operator computes rows nothing reads
EAGER_FAMILIES = (NORMALIZE, DEAD_ROWS)


FUSING_FAMILIES = ("attention", "layernorm", "gelu", "packing")  # rewrites into the runtime's fused operators and
# the packing of products of one input (`fuse`)

_FAMILY_SETS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # rule set -> {families: its rules of them}


def _family_rules(rules: RuleSource, families: tuple) -> RuleSource:
    """The rules of `families` of a rule set as a rule set of its own (same class, same order), so that each step
    matches those rules only; `rules` itself where it is not a set of rules (a test's stand-in)."""
    members = getattr(rules, "rules", None)
    if not isinstance(members, tuple):
        return rules
    try:
        sets = _FAMILY_SETS.get(rules)
        if sets is None:
            sets = _FAMILY_SETS[rules] = {}
        hit = sets.get(families)
        if hit is None:
            hit = sets[families] = type(rules)([r for r in members if getattr(r, "family", "") in families])
    except TypeError:  # a rule set that cannot be weakly referenced or rebuilt from its rules
        return rules
    return hit


def normalize(graph: TensorGraph, rules: RuleSource, max_steps: int) -> tuple[TensorGraph, tuple]:
    """`graph` with the rules of the eager families (`normalize`, `dead_rows`) applied while one applies (at most
    `max_steps`), and the names of those applied. They are terminating by design (they remove operators, move a
    scalar factor or a slice towards the inputs), so the normal form of a region does not depend on the order of
    the matches."""
    path: tuple = ()
    rules = _family_rules(rules, EAGER_FAMILIES)
    for _ in range(max_steps):
        for rule, match in rules.matches(graph):
            if getattr(rule, "family", "") not in EAGER_FAMILIES:
                continue
            new = rules.apply(graph, rule, match)
            if new is not None and new != graph:
                graph, path = new, path + (rule.name,)
                break
        else:
            break
    return graph, path


def fuse(graph: TensorGraph, graph_cost: float, rules: RuleSource, cost: CostFn, max_steps: int, max_ops: int,
         deadline: Optional[float] = None, prefetch: Optional[Callable[[list], None]] = None,
         band: float = 0.0, normalize_steps: int = 0) -> tuple[TensorGraph, float, tuple]:
    """(graph, cost, rules applied) after the rewrites of the fusing families (`FUSING_FAMILIES`) taken one at a
    time, each step the one the cost model prefers (`_better`: cheaper, or within the noise band with fewer
    operators), while one is (at most `max_steps`). Every layer a verified rule can fuse is fused before the
    budgeted search, wherever it sits in the region: the budget no longer decides which layers are. After each
    step the graph is brought back to its normal form (`normalize`, at most `normalize_steps` rewrites): a fused
    operator may form a pattern of those rules (a rotary embedding moved before the heads split), which a later
    fusion reads (the attention on 3-D inputs)."""
    fusing = _family_rules(rules, FUSING_FAMILIES)
    path: tuple = ()
    for _ in range(max_steps):
        if deadline is not None and time.monotonic() > deadline:
            break
        step = _best_step(graph, graph_cost, fusing, cost, max_ops, prefetch, band,
                          keep=lambda rule: getattr(rule, "family", "") in FUSING_FAMILIES)
        if step is None:
            break
        log.info("fuse: cost %.4g -> %.4g (%s)", graph_cost, step[0], step[2].name)
        graph_cost, graph, path = step[0], step[1], path + (step[2].name,)
        normal, normal_path = normalize(graph, rules, normalize_steps)
        if normal_path:
            graph, graph_cost, path = normal, cost(normal), path + normal_path
            log.info("fuse: normal form, cost %.4g (%s)", graph_cost, ", ".join(normal_path))
    return graph, graph_cost, path


def _best_step(graph: TensorGraph, graph_cost: float, rules: RuleSource, cost: CostFn, max_ops: int,
               prefetch: Optional[Callable[[list], None]], band: float,
               keep: Callable[[Any], bool] = lambda rule: True, seen: Optional[set] = None,
               stats: Optional[SearchStats] = None) -> Optional[tuple]:
    """(cost, graph, rule) of the one rewrite of `graph` (by the rules `keep` accepts, within `max_ops`) that the
    cost model prefers to it and to every other (`_better`), or None. New candidates are prefetched together;
    those not in `seen` are added to it and counted in `stats`."""
    fresh = []
    for rule, match in rules.matches(graph):
        if not keep(rule):
            continue
        new = rules.apply(graph, rule, match)
        if new is not None and new.num_runtime_ops <= max_ops:
            fresh.append((rule, new))
    if prefetch is not None and fresh:
        prefetch([new for _, new in fresh if seen is None or new not in seen])
    step = None
    for rule, new in fresh:
        if seen is not None and new not in seen:
            seen.add(new)
            if stats is not None:
                stats.candidates += 1
        nc = cost(new)
        if _better(nc, new, graph_cost if step is None else step[0], graph if step is None else step[1], band):
            step = (nc, new, rule)
    return step


def _better(nc: float, new: TensorGraph, best_cost: float, best: TensorGraph, band: float = 0.0) -> bool:
    """Cheaper wins; at an equal cost, fewer operators do (e.g. a ReLU fused into its conv, which FuseOps would
    fuse anyway, so a fusion-aware cost model sees no difference). With a noise `band` (relative), cheaper means
    cheaper beyond it; within it the graph with fewer operators, then the smaller operator census wins, whatever
    the measurements say, so that two runs measuring a little apart take the same step."""
    if band <= 0.0:
        return nc < best_cost or (nc <= best_cost * (1 + 1e-12) and new.num_runtime_ops < best.num_runtime_ops)
    if nc < best_cost * (1 - band):
        return True
    if nc > best_cost * (1 + band):
        return False
    return _census(new) < _census(best)


def _census(g: TensorGraph) -> tuple:
    """A key of a graph that no measurement moves: its runtime operator count, then its operators by name."""
    return g.num_runtime_ops, tuple(sorted(n.op for n in g.topo_order()))


def _priority(c: float, g: TensorGraph, band: float) -> tuple:
    """The search queue's order: by cost, costs in one NOISE_BAND-wide step of a log scale taken as equal, then
    fewer operators (without a band: by cost)."""
    if band <= 0.0 or not (c > 0 and math.isfinite(c)):
        return (c, 0)
    return (math.floor(math.log(c) / math.log1p(band)), g.num_runtime_ops)


def _descend(best: TensorGraph, best_cost: float, best_path: tuple, rules: RuleSource, cost: CostFn,
             cfg: SearchConfig, max_ops: int, seen: set, deadline: Optional[float], stats: SearchStats,
             prefetch: Optional[Callable[[list], None]], band: float = 0.0) -> tuple:
    """After the budget: from the best graph, take the best improving rewrite while there is one (at most
    `descent_steps`). A chain of rewrites that each pay (normalize an attention block, fuse it, fold its scale)
    is reached even when the budget went to exploring alternatives elsewhere in the region."""
    for _ in range(cfg.descent_steps):
        if deadline is not None and time.monotonic() > deadline:
            stats.stopped_by = StopReason.TIME
            break
        step = _best_step(best, best_cost, rules, cost, max_ops, prefetch, band, seen=seen, stats=stats)
        if step is None:
            break
        stats.expanded += 1
        log.info("descent: cost %.4g -> %.4g (%s)", best_cost, step[0], step[2].name)
        best_cost, best, best_path = step[0], step[1], best_path + (step[2].name,)
    return best, best_cost, best_path
