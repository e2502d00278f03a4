"""How each TensorGraph operator looks to TVM's FuseOps after LegalizeOps and AnnotateTIROpPattern.

A registry operator lowers to one or more Relax calls, each legalized to one `call_tir` whose PrimFunc gets an
`op_pattern` from TVM's TIR analysis, plus a `TupleGetItem` binding (pattern INJECTIVE) per output of a
tuple-valued call. `expand(...)` gives that chain of *sub-nodes*, from the operator's `cost.fusion` facet
(`op_facets.py`); the fusion model works on sub-nodes.
"""
from __future__ import annotations

from typing import Sequence

from ..graph.ops import facet
from ..graph.types import TensorType

# TVM's OpPatternKind, which FuseOps uses to decide what fuses into what.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8

__all__ = ["ELEMWISE", "BROADCAST", "INJECTIVE", "COMM_REDUCE", "OUT_EWISE_FUSABLE", "TUPLE", "OPAQUE",
           "expand", "tvm_names"]


def expand(op: str, attrs: dict, in_types: Sequence[TensorType], out_types: Sequence[TensorType]) \
        -> tuple[tuple[int, ...], int]:
    """(patterns of the chained calls, number of TupleGetItem sub-nodes reading the last call's tuple)."""
    return facet(op, "cost.fusion")(attrs, in_types, out_types)


def tvm_names(op: str, attrs: dict) -> tuple[str, ...]:
    """PrimFunc base names for one node, in binding order (for comparing groupings with FuseTIR's names); a fused
    activation is its own call, named as that operator."""
    act = attrs.get("activation", "none")
    names = facet(op, "cost.tvm_names")
    return names + (facet(act, "cost.tvm_names") if act not in (None, "none") else ())
