"""`TasoOptimize`: the TASO search as a TVM module pass, and the `"taso"` Relax pipeline.

    mod = TasoOptimize(budget=100)(mod)
    ex = tvm.compile(mod, target, relax_pipeline="taso")   # TasoOptimize, then the target's default pipeline
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import tvm
from tvm import relax

from ..graph import TensorGraph
from ..search import SearchConfig, SearchStats, optimize_graph
from .lift import LiftedBlock
from .rewrite import rewrite_module

log = logging.getLogger(__name__)


@dataclass
class PassReport:
    """What the last run of a TasoOptimize pass did, block by block (summed in `total`)."""

    blocks: list = field(default_factory=list)  # SearchStats per optimized dataflow block

    @property
    def total(self) -> Optional[SearchStats]:
        if not self.blocks:
            return None
        first = self.blocks[0]
        tot = SearchStats(0.0, 0.0, 0, 0)
        tot.stopped_by = first.stopped_by
        for s in self.blocks:
            tot.cost_before += s.cost_before
            tot.cost_after += s.cost_after
            tot.ops_before += s.ops_before
            tot.ops_after += s.ops_after
            tot.seconds += s.seconds
            tot.merge(s)
        return tot


def _resolve_rules(rules: Any):
    from ..rules import load_rules

    if rules is None:
        return load_rules()
    if isinstance(rules, (str, list, tuple)) and not hasattr(rules, "matches"):
        return load_rules(rules)
    return rules


def _resolve_cost(cost: Any, target: Optional[tvm.target.Target]):
    """A callable graph -> cost: a cost model object, a backend name, or a config file path."""
    if callable(cost) and not isinstance(cost, str):
        return cost
    if hasattr(cost, "graph_cost"):
        return cost.graph_cost
    from ..cost import make_cost_model

    model = make_cost_model(cost, target=target)
    return model.graph_cost


class TasoOptimize:
    """A module pass that lifts each dataflow block, searches for a cheaper equivalent under a cost model with
    verified rules, lowers the result with weight-only subgraphs folded, and removes dead code.

    rules: a RuleSet, rule file path(s), or None for the shipped library.
    cost: a cost model (object with `graph_cost`), a callable graph -> float, a backend name
          ("analytic", "tvm", "ort"), a config file path, or None for the configured default.
    """

    def __init__(self, rules: Any = None, cost: Any = None, alpha: float = 1.05, budget: int = 64,
                 time_limit: Optional[float] = None, region_size: int = 48, target: Union[str, dict, Any] = None):
        self.config = SearchConfig(alpha=alpha, budget=budget, time_limit=time_limit,
                                   region_size=region_size).validate()
        self._rules_arg, self._cost_arg, self._target = rules, cost, target
        self._rules = None
        self._cost = None
        self.report = PassReport()
        self._pass = tvm.transform.module_pass(self._transform, opt_level=0, name="TasoOptimize")

    # a tvm.transform.Pass is what Sequential and tvm.compile take
    def __call__(self, mod: tvm.IRModule) -> tvm.IRModule:
        return self._pass(mod)

    @property
    def pass_(self) -> tvm.transform.Pass:
        return self._pass

    def _target_now(self) -> Optional[tvm.target.Target]:
        if self._target is not None:
            t = self._target
            return t if isinstance(t, tvm.target.Target) else tvm.target.Target(t)
        return tvm.target.Target.current(allow_none=True)

    def _search_block(self, lifted: LiftedBlock) -> TensorGraph:
        graph = lifted.graph
        if graph.num_ops == 0:
            return graph
        best, stats = optimize_graph(graph, self._rules, self._cost, self.config)
        self.report.blocks.append(stats)
        return best

    def _transform(self, mod: tvm.IRModule, ctx: Any = None) -> tvm.IRModule:
        if self._rules is None:
            self._rules = _resolve_rules(self._rules_arg)
        if self._cost is None:
            self._cost = _resolve_cost(self._cost_arg, self._target_now())
        self.report = PassReport()
        out = rewrite_module(mod, self._search_block, fold_weights=True)
        out = relax.transform.DeadCodeElimination()(out)
        applied = Counter()
        for s in self.report.blocks:
            applied.update(s.rules_applied)
        log.info("TasoOptimize: %d block(s), rules applied: %s", len(self.report.blocks), dict(applied))
        return out


def taso_pipeline(target: Optional[tvm.target.Target] = None, **settings: Any) -> tvm.transform.Pass:
    """TasoOptimize followed by the target's default Relax pipeline."""

    @tvm.transform.module_pass(opt_level=0, name="TasoPipeline")
    def _pipeline(mod: tvm.IRModule, ctx: Any) -> tvm.IRModule:
        tgt = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target({"kind": "llvm"})
        mod = TasoOptimize(target=tgt, **settings)(mod)
        return relax.get_default_pipeline(tgt)(mod)

    return _pipeline


if "taso" not in relax.pipeline.PIPELINE_MAP:
    relax.register_pipeline("taso")(taso_pipeline)
