"""The "taso-schedule" Relax pipeline: the target's default pipeline with `CpuSchedule` after LegalizeOps, FuseOps
and FuseTIR, on llvm targets (other targets get their default pipeline unchanged). No graph search: the fair
baseline for the search, and fast CPU builds for users.

    ex = tvm.compile(mod, target, relax_pipeline="taso-schedule")   # after `import taso_tvm.schedule`
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import tvm
from tvm import relax
from tvm.target import Target

from .apply import CpuSchedule
from .common import vector_lanes
from .conv_layout import ConvWeightsIHWO
from .fast_erf import legalize_passes
from .pad_width import PadConvWidth

PIPELINE_NAME = "taso-schedule"


def _resolve(target: Optional[Target]) -> Target:
    return target or Target.current(allow_none=True) or Target({"kind": "llvm"})


def graph_passes(target: Target) -> list:
    """The Relax-level layout passes the schedules want on llvm: conv weights in IHWO where the output channels
    vectorize better, then the remaining conv widths padded to whole vector halves."""
    granule = max(vector_lanes(target) // 2, 1)
    return [ConvWeightsIHWO(granule), PadConvWidth(granule)]


def schedule_passes(target: Target, scheduler: Optional[CpuSchedule] = None, pre_schedule: Sequence = ()) -> list:
    """The default Relax passes for `target`; on llvm with conv2d widths padded to whole vector halves first
    (`PadConvWidth`), erf as a vectorizable polynomial (`fast_erf`) and the CPU schedule pass after FuseTIR (preceded by `pre_schedule`, e.g. a tuning database
    that schedules some PrimFuncs first)."""
    # the CPU backend's own module (its package forgets to export dataflow_lower_passes in TVM 0.27)
    from tvm.relax.backend.cpu_generic import pipeline as P

    if target.kind.name != "llvm":
        return [relax.get_default_pipeline(target)]
    return (graph_passes(target) + P.library_dispatch_passes(target) + legalize_passes(target)
            + list(pre_schedule) + [scheduler or CpuSchedule(target)]
            + P.dataflow_lower_passes(target) + P.finalize_passes(target))


def schedule_module(mod: tvm.IRModule, target: Target) -> tuple:
    """(module, ScheduleReport): `mod` widened, legalized, fused and scheduled for an llvm `target`, not yet
    lowered to the VM (for inspecting what the rules did)."""
    from tvm.relax.backend.cpu_generic import pipeline as P

    scheduler = CpuSchedule(target)
    with target:
        out = tvm.transform.Sequential(graph_passes(target) + P.library_dispatch_passes(target)
                                       + legalize_passes(target) + [scheduler])(mod)
    return out, scheduler.report


def schedule_pipeline(target: Optional[Target] = None, scheduler: Optional[CpuSchedule] = None,
                      pre_schedule: Sequence = (), **_: Any) -> tvm.transform.Pass:
    """The Relax pipeline with CPU schedules (see the module doc). `scheduler`: a CpuSchedule instance whose
    `report` the caller wants to read afterwards; `pre_schedule`: passes run right before it (on llvm)."""

    @tvm.transform.module_pass(opt_level=0, name="TasoSchedulePipeline")
    def _pipeline(mod: tvm.IRModule, ctx: Any) -> tvm.IRModule:
        tgt = _resolve(target)
        with tgt:
            return tvm.transform.Sequential(schedule_passes(tgt, scheduler, pre_schedule))(mod)

    return _pipeline


if PIPELINE_NAME not in relax.pipeline.PIPELINE_MAP:
    relax.register_pipeline(PIPELINE_NAME)(schedule_pipeline)
