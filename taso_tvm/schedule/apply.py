"""`CpuSchedule`: the module pass giving every PrimFunc of a legalized, fused module a CPU schedule by rule.

Place it after LegalizeOps, FuseOps and FuseTIR and before the dataflow lowering (where the CUDA pipeline puts
dlight's ApplyDefaultSchedule). Rules are tried in order; the first that returns a schedule wins. A rule that
hits a schedule error is skipped (the next one sees the untouched function). A function no rule matches gets the
fallback schedule and is named in the log and in `report.fallback`. Functions already marked
`tirx.is_scheduled` (tuned, or scheduled by another pass) are left alone; so are all functions on a target that
is not llvm.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import tvm
from tvm import s_tir, tirx
from tvm.target import Target

from .contraction import schedule_contraction
from .fallback import schedule_fallback
from .injective import schedule_injective

log = logging.getLogger(__name__)

SCHEDULED_ATTR = "tirx.is_scheduled"
Rule = Callable[[tirx.PrimFunc, Target], Optional[s_tir.Schedule]]


def _reduction(func: tirx.PrimFunc, target: Target) -> Optional[s_tir.Schedule]:
    """Row reductions with element-wise stages around them (softmax, layer norm, mean): TVM's own dlight CPU rule."""
    from tvm.s_tir.dlight.cpu import Reduction

    out = Reduction().apply(func, target, False)
    return out[0] if isinstance(out, list) else out


RULES: tuple = (
    ("contraction", schedule_contraction),
    ("reduction", _reduction),
    ("injective", schedule_injective),
)
FALLBACK = "fallback"


@dataclass
class ScheduleReport:
    """What one run of the pass did: functions per rule, the functions left to the fallback, rule errors."""

    rules: Counter = field(default_factory=Counter)
    fallback: list = field(default_factory=list)  # PrimFunc names
    errors: list = field(default_factory=list)  # (function, rule, first line of the error)
    seconds: float = 0.0

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.rules.items()))
        return f"{sum(self.rules.values())} PrimFunc(s) scheduled in {self.seconds:.2f} s ({parts})"


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def schedule_func(func: tirx.PrimFunc, target: Target, name: str = "", report: Optional[ScheduleReport] = None,
                  rules: tuple = RULES) -> tuple:
    """(schedule, rule name) for one PrimFunc: the first rule that applies, else the fallback."""
    for rule_name, rule in rules:
        try:
            sch = rule(func, target)
        except s_tir.ScheduleError as e:  # the rule's steps do not fit this function: the next rule
            if report is not None:
                report.errors.append((name, rule_name, _first_line(e)))
            log.debug("schedule rule %s does not fit %s: %s", rule_name, name, _first_line(e))
            continue
        except Exception as e:  # noqa: BLE001 - a rule's own failure must not fail the build: next rule
            if report is not None:
                report.errors.append((name, rule_name, _first_line(e)))
            log.warning("schedule rule %s failed on %s (%s: %s); trying the next rule", rule_name, name,
                        type(e).__name__, _first_line(e))
            continue
        if sch is not None:
            return sch, rule_name
    return schedule_fallback(func, target), FALLBACK


def _target(explicit: Optional[Target], func: tirx.PrimFunc) -> Optional[Target]:
    if explicit is not None:
        return explicit
    attr = func.attrs.get("target") if func.attrs is not None else None
    return attr if attr is not None else Target.current(allow_none=True)


@tvm.transform.module_pass(opt_level=0, name="TasoCpuSchedule")
class CpuSchedule:
    """Schedule every unscheduled PrimFunc of the module for an llvm target (the given one, else the function's
    `target` attribute, else the current target). `report` holds what the last run did."""

    def __init__(self, target: Optional[Target] = None, rules: tuple = RULES):
        self.target = Target(target) if isinstance(target, (str, dict)) else target
        self.rules = rules
        self.report = ScheduleReport()

    def transform_module(self, mod: tvm.IRModule, ctx: Any = None) -> tvm.IRModule:
        self.report = report = ScheduleReport()
        t0 = time.perf_counter()
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc):
                continue
            if func.attrs is not None and SCHEDULED_ATTR in func.attrs and int(func.attrs[SCHEDULED_ATTR]):
                continue
            target = _target(self.target, func)
            if target is None or target.kind.name != "llvm":
                continue
            sch, rule = schedule_func(func, target, gv.name_hint, report, self.rules)
            report.rules[rule] += 1
            if rule == FALLBACK:
                report.fallback.append(gv.name_hint)
                log.info("CpuSchedule: no rule matches %s; it gets the fallback schedule", gv.name_hint)
            updates[gv] = sch.mod["main"].with_attr(SCHEDULED_ATTR, True)
        for gv, func in updates.items():
            mod[gv] = func
        report.seconds = time.perf_counter() - t0
        log.info("CpuSchedule: %s", report.summary())
        return mod
