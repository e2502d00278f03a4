"""The fallback schedule, for a PrimFunc no rule matches: each top-level block gets its leading spatial loops fused
and parallel, and a spatial block its innermost loop vectorized. Always safe; not always fast (the pass logs it)."""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from .blocks import SPATIAL, func_facts
from .common import MIN_PARALLEL_WORK, dtype_bits, schedule_spatial, vector_lanes


def _parallel_prefix(sch: s_tir.Schedule, b) -> None:
    loops = sch.get_loops(b.rv)
    if len(loops) != len(b.kinds):
        return  # loops and iterators do not correspond one to one: leave the block as it is
    prefix = []
    work = 1
    for loop, kind, extent in zip(loops, b.kinds, b.extents):
        if kind != SPATIAL:
            break
        prefix.append(loop)
        work *= extent if extent is not None else MIN_PARALLEL_WORK
    if prefix and work >= 2:
        fused = sch.fuse(*prefix) if len(prefix) > 1 else prefix[0]
        sch.parallel(fused)


def schedule_fallback(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule:
    """Parallelize (and for spatial blocks vectorize) what can safely be; blocks that refuse stay as they are."""
    sch = s_tir.Schedule(func)
    facts = func_facts(sch)
    if facts is None:
        return sch
    for b in facts.blocks:
        try:
            if b.is_spatial:
                schedule_spatial(sch, b, vector_lanes(target, dtype_bits(sch, b)))
            else:
                _parallel_prefix(sch, b)
        except s_tir.ScheduleError:
            continue
    return sch
