"""`take`: rows of a table picked by integer indices (ONNX Gather on axis 0, Relax's `take`): embedding lookups.

In the verifier's real-number model an index is a number, not a position: a constant index picks its row, and a
symbolic one gives, per column, an uninterpreted function of the index and that column's entries (so a rule can
regroup lookups, and a lookup of a constant range is its table, but nothing more is assumed about a lookup).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, register
from .elementwise import z3_apply_n
from .gather_form import normalized_indices
from .slice import scalar_index_lift
from ..types import GraphError, TensorType

R = relax.op


def _take_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    table, ids = t
    if table.ndim != 2:
        raise GraphError(f"take: the table must be [rows, width], got {table.shape}")
    return [TensorType(tuple(ids.shape) + (table.shape[1],), table.dtype)]


def _take_numpy(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    """ONNX's Gather (a negative index counts from the end); made total for the random numbers rule checks draw
    (floored, taken modulo the rows), which every valid index is left as it is by."""
    return [np.take(x[0], np.floor(np.asarray(x[1])).astype(np.int64), axis=0, mode="wrap")]


def _const_index(v: Any) -> Optional[int]:
    """The integer value of a concrete index (a number or a z3 numeral), else None."""
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    if hasattr(v, "is_const") and v.is_const():  # the verifier's exact polynomials (duck-typed: no import)
        c = v.const_value()
        return int(c) if c == int(c) else None
    try:
        import z3

        if z3.is_rational_value(v) and v.denominator_as_long() == 1:
            return int(v.numerator_as_long())
        if z3.is_int_value(v):
            return int(v.as_long())
    except Exception:  # not a z3 value: symbolic
        return None
    return None


def _take_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    table, ids = (np.asarray(v, dtype=object) for v in x)
    rows, width = table.shape
    out = np.empty(ids.shape + (width,), dtype=object)
    for idx in np.ndindex(*ids.shape):
        k = _const_index(ids[idx])
        for j in range(width):
            if k is not None and 0 <= k < rows:
                out[idx + (j,)] = table[k, j]
            else:
                out[idx + (j,)] = z3_apply_n("take", ids[idx], *table[:, j])
    return [out]


def _take_lift(call: relax.Call) -> Optional[tuple]:
    """A take in Relax's "fast" mode only: "clip" and "wrap" define indices out of [-rows, rows) as ONNX does not.
    A constant scalar index on another axis than 0 (a classifier's `hidden[:, 0]`) lifts as `pick`."""
    if str(call.attrs.mode) == "fast":
        picked = scalar_index_lift(call)
        if picked is not None:
            return picked[0], picked[1], "pick"
    axis = call.attrs.axis
    if axis is None or int(axis) != 0 or str(call.attrs.mode) != "fast":
        return None
    return [call.args[0], call.args[1]], {}


def _take_lower(bb: Any, args: Sequence[Any], a: dict, t: Sequence[TensorType]) -> Any:
    """ONNX's Gather in the frontend's own form (negative ids count from the end), written back as one Gather."""
    ids = normalized_indices(bb, args[1], int(t[0].shape[0]), str(t[1].dtype))
    return R.take(args[0], ids, axis=0)


TAKE = register(OpDef(
    "take", 2, _take_infer, _take_numpy, relax=("relax.take",), lift=_take_lift, lower=_take_lower, z3=_take_z3,
    doc="rows of a [rows, width] table at integer indices of any shape: [*indices, width] (embedding lookup)"))

__all__ = ["TAKE"]
