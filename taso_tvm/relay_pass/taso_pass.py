"""`TasoOptimize`: the TASO search as a TVM module pass over Relax IR, and the `"taso"` Relax pipeline.

    mod = TasoOptimize()(mod)                              # the default search settings (relay_pass.settings)
    mod = TasoOptimize(budget=50, time_limit=30.0)(mod)    # or settings of one's own
    ex = tvm.compile(mod, target, relax_pipeline="taso")   # TasoOptimize, then the build (CPU schedules on llvm)
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import tvm
import tvm_ffi
from tvm import relax

from ..runtime.check import DEFAULT_ATOL, DEFAULT_RTOL, CheckError, CheckFailed, check_relax, check_tolerances
from ..graph import TensorGraph, fold_weights
from ..graph.ops.decompose import lowering
from ..schedule import schedule_pipeline
from ..search import SearchStats, optimize_graph
from .lift import LiftedBlock
from .rewrite import rewrite_module
from .settings import Settings, resolve_cost, resolve_rules

log = logging.getLogger(__name__)

# a check's exception crosses TVM's FFI (the pass runs inside RunPass, Sequential, tvm.compile) with its own type;
# so does Ctrl-C (else TVM turns a KeyboardInterrupt raised in our callback into an empty RuntimeError)
for _err in (CheckError, CheckFailed, KeyboardInterrupt):
    tvm_ffi.register_error(_err)


@dataclass
class PassReport:
    """What the last run of a TasoOptimize pass did, block by block (summed in `total`)."""

    blocks: list = field(default_factory=list)  # SearchStats per optimized dataflow block
    check: Optional[dict] = None  # with check=True: {output: largest absolute difference} of the numeric check

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


@tvm.transform.module_pass(opt_level=0, name="TasoOptimize")
class TasoOptimize:
    """A module pass that lifts each dataflow block, searches for a cheaper equivalent under a cost model with
    verified rules, lowers the result with weight-only subgraphs folded, and removes dead code.

    rules: a RuleSet, rule file path(s), or None for the shipped library.
    cost: a cost model (object with `graph_cost`), a callable graph -> float, a backend name
          ("analytic", "tvm", "ort"), a config file path, or None for the configured default.
    config: a settings file (search, cost, rules sections); $TASO_TVM_CONFIG names one for every pass.
    runtime: what will run the result, for the `auto` cost backend: "tvm" (TVM kernels on the target) or
          "onnx" (ONNX Runtime kernels, for a module that will be exported to ONNX). It also decides how the
          runtime's fused operators the search may introduce are lowered (`graph.ops.decompose`): for "onnx", as
          calls the exporter writes as ONNX Runtime's fused nodes (unless `standard_ops`); for "tvm", as their
          decomposition, with attention as Relax's `R.nn.attention` on CUDA targets.
    standard_ops: the result will be written with default-domain ONNX operators only (no ONNX Runtime fused
          nodes): fused operators are lowered, and costed, as their decomposition.
    check: build the module before and after for llvm, run both on random inputs (symbolic dims bound to 1) and
           raise `taso_tvm.runtime.check.CheckFailed` (one line) when the outputs differ beyond check_rtol/check_atol
           (the rules of `taso_tvm.runtime.check`). Off by default: it costs two builds.
    method: the search, "backtrack" (TASO's, the default), "egraph" (equality saturation, needs the `egraph`
           extra) or "both" (the cheaper result); also `search: {method: ...}` in a settings file.
    settings: a `Settings` resolved by the caller (then `config` and $TASO_TVM_CONFIG are not read again; the
           other keywords, where given, override it).
    """

    def __init__(self, rules: Any = None, cost: Any = None, alpha: Optional[float] = None,
                 budget: Optional[int] = None, time_limit: Optional[float] = None, region_size: Optional[int] = None,
                 target: Union[str, dict, Any] = None, config: Optional[str] = None, runtime: str = "tvm",
                 check: bool = False, check_rtol: float = DEFAULT_RTOL, check_atol: float = DEFAULT_ATOL,
                 standard_ops: bool = False, method: Optional[str] = None, settings: Optional[Settings] = None):
        explicit = dict(rules=rules, cost=cost, alpha=alpha, budget=budget, time_limit=time_limit,
                        region_size=region_size, method=method)
        if settings is None:  # resolved here; a caller that resolved them already passes `settings`
            settings = Settings.resolve(config, overrides=explicit)
        else:
            settings = settings.replace(**explicit)
        self.settings = settings
        self.config = settings.search_config()
        if runtime not in ("tvm", "onnx"):
            raise ValueError(f"runtime must be 'tvm' or 'onnx', got {runtime!r}")
        target = target if target is not None else settings.target
        self._rules_arg, self._cost_arg, self._target, self._runtime = settings.rules, settings.cost, target, runtime
        self.standard_ops = bool(standard_ops)
        self._rules = None
        self._cost = None
        if check:
            check_tolerances(check_rtol, check_atol)
        self.check, self.check_rtol, self.check_atol = bool(check), check_rtol, check_atol
        self.report = PassReport()

    def _target_now(self) -> Optional[tvm.target.Target]:
        if self._target is not None:
            t = self._target
            return t if isinstance(t, tvm.target.Target) else tvm.target.Target(t)
        return tvm.target.Target.current(allow_none=True)

    def _search_block(self, lifted: LiftedBlock) -> TensorGraph:
        graph = lifted.graph
        if graph.num_ops == 0:
            return graph
        graph = fold_weights(graph)  # rules that ask for weights see folded ones (as after FoldConstant)
        best, stats = optimize_graph(graph, self._rules, self._cost, self.config)
        self.report.blocks.append(stats)
        return best

    def fused_lowering(self) -> str:
        """How this pass lowers fused operators (`graph.ops.decompose.lowering`)."""
        if self._runtime == "onnx":  # with standard_ops the exporter writes the standard forms (ONNX 23's Attention)
            return "composite"  # and inlines the other fused operators' decompositions
        target = self._target_now()
        return "relax_attention" if target is not None and target.kind.name == "cuda" else "decompose"

    def transform_module(self, mod: tvm.IRModule, ctx: Any = None) -> tvm.IRModule:
        if self._rules is None:
            self._rules = resolve_rules(self._rules_arg)
        self._cost, owned = resolve_cost(self._cost_arg, self._target_now(), self._runtime)
        self.report = PassReport()
        try:
            with lowering(self.fused_lowering()):  # the cost model's kernels and the result alike
                out = rewrite_module(mod, self._search_block, fold_weights=True)
        finally:
            if owned:
                self._cost.close()  # stops the cost model's build workers
            self._cost = None
        out = relax.transform.DeadCodeElimination()(out)
        if self.check:
            self._check(mod, out)
        applied = Counter()
        for s in self.report.blocks:
            applied.update(s.rules_applied)
        log.info("TasoOptimize: %d block(s), rules applied: %s", len(self.report.blocks), dict(applied))
        return out

    def _check(self, before: tvm.IRModule, after: tvm.IRModule) -> None:
        if tvm_ffi.structural_equal(before, after, map_free_vars=True):
            self.report.check = {}
            log.info("TasoOptimize: module unchanged, nothing to check")
            return
        self.report.check = check_relax(before, after, self.check_rtol, self.check_atol)


def taso_pipeline(target: Optional[tvm.target.Target] = None, **settings: Any) -> tvm.transform.Pass:
    """TasoOptimize followed by the target's Relax build pipeline: on llvm the one with CPU schedules
    ("taso-schedule", `taso_tvm.schedule`), elsewhere the target's default pipeline."""

    @tvm.transform.module_pass(opt_level=0, name="TasoPipeline")
    def _pipeline(mod: tvm.IRModule, ctx: Any) -> tvm.IRModule:
        tgt = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target({"kind": "llvm"})
        mod = TasoOptimize(target=tgt, **settings)(mod)
        if tgt.kind.name == "llvm":
            return schedule_pipeline(tgt)(mod)
        return relax.get_default_pipeline(tgt)(mod)

    return _pipeline


if "taso" not in relax.pipeline.PIPELINE_MAP:
    relax.register_pipeline("taso")(taso_pipeline)
