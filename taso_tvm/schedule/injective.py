"""The injective rule: functions of spatial blocks only (element-wise, broadcast, layout ops: reshape, transpose,
concatenate, padding, batch norm in inference form). Every block that is not a function output is inlined into
its consumers; each remaining block runs its outer loops fused and parallel and its innermost loop vectorized."""
from __future__ import annotations

from typing import Optional

from tvm import s_tir, tirx
from tvm.target import Target

from .blocks import func_facts
from .common import dtype_bits, inline_spatial, schedule_spatial, vector_lanes


def schedule_injective(func: tirx.PrimFunc, target: Target) -> Optional[s_tir.Schedule]:
    """Schedule a PrimFunc whose blocks are all spatial; None otherwise."""
    sch = s_tir.Schedule(func)
    facts = func_facts(sch)
    if facts is None or not all(b.is_spatial for b in facts.blocks):
        return None
    remaining = inline_spatial(sch, facts, facts.blocks)
    for b in remaining:
        lanes = vector_lanes(target, dtype_bits(sch, b))
        schedule_spatial(sch, b, lanes)
    return sch
