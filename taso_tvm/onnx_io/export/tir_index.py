"""Exact evaluation of TIR index expressions over numpy arrays of loop positions.

The ``call_tir`` PrimFuncs that TVM's ONNX frontend emits for Pad (``mirror_pad``,
``replicate_pad``, ``circular_pad``) are gathers ``out[v0, v1, ...] = x[f0(v0), f1(v1), ...]``
whose per-axis index functions ``fi`` are nests of ``if_then_else`` / ``min`` / ``max`` /
``%``.  Rather than pattern-match one TOPI version's formulas, the exporter evaluates every
``fi`` at every output position and compares it with the index map of each ONNX Pad mode.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

import tvm
from tvm import tirx

_BIN = {
    tirx.Add: np.add,
    tirx.Sub: np.subtract,
    tirx.Mul: np.multiply,
    tirx.Min: np.minimum,
    tirx.Max: np.maximum,
    tirx.FloorDiv: np.floor_divide,
    tirx.FloorMod: np.mod,
    tirx.LT: np.less,
    tirx.LE: np.less_equal,
    tirx.GT: np.greater,
    tirx.GE: np.greater_equal,
    tirx.EQ: np.equal,
    tirx.NE: np.not_equal,
    tirx.And: np.logical_and,
    tirx.Or: np.logical_or,
}


class NotEvaluable(ValueError):
    """The expression uses something other than integer arithmetic on the given variables."""


def eval_index(expr, env: Dict[object, np.ndarray]) -> np.ndarray:
    """Value of integer TIR expression ``expr`` with variables bound to numpy arrays.

    ``env`` maps ``tirx.Var`` -> int64 array; unknown variables raise :class:`NotEvaluable`.
    Division and modulo are floor semantics for ``FloorDiv``/``FloorMod`` and truncating
    for ``Div``/``Mod`` (TIR's definitions).
    """
    if isinstance(expr, tirx.IntImm):
        return np.int64(expr.value)
    if tvm.ir.is_prim_var(expr):
        if expr not in env:
            raise NotEvaluable(f"free variable '{expr}'")
        return env[expr]
    for cls, fn in _BIN.items():
        if type(expr) is cls:
            return fn(eval_index(expr.a, env), eval_index(expr.b, env))
    if isinstance(expr, tirx.Div):
        a, b = eval_index(expr.a, env), eval_index(expr.b, env)
        return np.trunc(np.true_divide(a, b)).astype(np.int64)
    if isinstance(expr, tirx.Mod):
        a, b = eval_index(expr.a, env), eval_index(expr.b, env)
        return np.fmod(a, b)
    if isinstance(expr, tirx.Not):
        return np.logical_not(eval_index(expr.a, env))
    if isinstance(expr, tirx.Cast):
        return eval_index(expr.value, env)
    if isinstance(expr, tirx.Select):
        return np.where(eval_index(expr.condition, env), eval_index(expr.true_value, env),
                        eval_index(expr.false_value, env))
    if type(expr).__name__ == "Call" and getattr(expr.op, "name", "") in ("prim.if_then_else", "tirx.if_then_else",
                                                                          "tir.if_then_else"):
        c, t, f = (eval_index(a, env) for a in expr.args)
        return np.where(c, t, f)
    raise NotEvaluable(f"{type(expr).__name__} in index expression")


def axis_map(expr, var, extent: int) -> Optional[np.ndarray]:
    """Index function ``expr(var)`` over ``var = 0 .. extent-1`` (None if it is not one)."""
    pos = np.arange(extent, dtype=np.int64)
    env = {var: pos} if var is not None else {}
    try:
        out = eval_index(expr, env)
    except NotEvaluable:
        return None
    return np.broadcast_to(np.asarray(out, dtype=np.int64), pos.shape).copy()


# ----------------------------------------------------------------------------- ONNX Pad modes
def onnx_pad_map(mode: str, n: int, before: int, out: int) -> Optional[np.ndarray]:
    """Source index of each output position of ONNX Pad ``mode`` on an axis of size ``n``.

    Only the pad widths ONNX Runtime accepts are modelled: reflect needs ``before`` and
    ``after`` below ``n`` (and ``n > 1``), edge needs ``n > 0``.
    """
    after = out - n - before
    if before < 0 or after < 0 or n <= 0:
        return None
    p = np.arange(out, dtype=np.int64) - before
    if mode == "edge":
        return np.clip(p, 0, n - 1)
    if mode == "reflect":
        if (before or after) and (n < 2 or before >= n or after >= n):
            return None
        p = np.abs(p)
        return np.where(p > n - 1, 2 * (n - 1) - p, p)
    if mode == "wrap":
        return np.mod(p, n)
    return None


def match_pad_axis(mode: str, f: np.ndarray, n: int) -> Optional[int]:
    """The pad-before width for which ONNX Pad ``mode`` reproduces index map ``f``."""
    out = len(f)
    if out == n and np.array_equal(f, np.arange(n)):
        return 0
    for before in range(0, out - n + 1):
        ref = onnx_pad_map(mode, n, before, out)
        if ref is not None and np.array_equal(ref, f):
            return before
    return None
