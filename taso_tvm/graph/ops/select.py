"""Selection: `isnan` and `where`, the guard exporters put after an attention softmax (a row whose every key is
masked with -inf gives NaN, replaced by 0).

In the verifier's real-number model there is no NaN, so both are uninterpreted: `isnan(x)` is an unknown function of
x and `where(c, a, b)` an unknown function of its three arguments. A rule can carry the guard through (its target
computes the same `where(isnan(...))`) but never prove it away, which would be false in IEEE arithmetic.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, broadcast_shapes, register
from .elementwise import z3_apply, z3_apply_n
from ..types import GraphError, TensorType

R = relax.op


def _isnan_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    v = np.asarray(x[0], dtype=object)
    out = np.empty(v.shape, dtype=object)
    for i, e in np.ndenumerate(v):
        out[i] = z3_apply("isnan", e)
    return [out]


ISNAN = register(OpDef(
    "isnan", 1, lambda t, a: [TensorType(t[0].shape, "bool")], lambda x, a: [np.isnan(x[0])],
    relax=("relax.isnan",), lift=lambda call: (list(call.args), {}), lower=lambda bb, args, a, t: R.isnan(args[0]),
    z3=_isnan_z3, doc="element-wise: is the value NaN (bool)"))


def _where_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    c, x, y = t
    if c.dtype != "bool":
        raise GraphError(f"where: condition of type {c.dtype}, not bool")
    if x.dtype != y.dtype:
        raise GraphError(f"where: mixed dtypes {x.dtype} and {y.dtype}")
    shape = broadcast_shapes(c.shape, broadcast_shapes(x.shape, y.shape, "where"), "where")
    return [TensorType(shape, x.dtype)]


def _where_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    c, p, q = np.broadcast_arrays(*(np.asarray(v, dtype=object) for v in x))
    out = np.empty(c.shape, dtype=object)
    for i in np.ndindex(c.shape):
        out[i] = z3_apply_n("where", c[i], p[i], q[i])
    return [out]


WHERE = register(OpDef(
    "where", 3, _where_infer, lambda x, a: [np.where(x[0], x[1], x[2]).astype(np.asarray(x[1]).dtype)],
    relax=("relax.where",), lift=lambda call: (list(call.args), {}),
    lower=lambda bb, args, a, t: R.where(args[0], args[1], args[2]), z3=_where_z3,
    doc="element-wise select: x where the condition holds, else y (broadcasting)"))

__all__ = ["ISNAN", "WHERE"]
