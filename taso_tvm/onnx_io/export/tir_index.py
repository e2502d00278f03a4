"""Evaluation of TIR expressions over numpy arrays of loop positions.

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


_FLOAT_CALLS = {"floor": np.floor, "ceil": np.ceil, "fabs": np.abs, "trunc": np.trunc,
                "round": np.rint, "nearbyint": np.rint}


def _dtype_of(expr) -> str:
    dt = getattr(expr, "dtype", None)
    if dt is None:
        dt = getattr(expr, "ty", "")
    return str(dt)


def _cast(v, dtype: str):
    if dtype.startswith(("int", "uint")):
        return np.trunc(v).astype(np.int64) if np.asarray(v).dtype.kind == "f" else np.asarray(v, np.int64)
    if dtype == "bool":
        return np.asarray(v).astype(bool)
    if dtype.startswith("float"):
        return np.asarray(v).astype(np.dtype(dtype) if dtype in ("float16", "float32", "float64") else np.float32)
    raise NotEvaluable(f"cast to {dtype}")


def eval_index(expr, env: Dict[object, np.ndarray], buffers: Optional[Dict[str, np.ndarray]] = None) -> np.ndarray:
    """Value of TIR expression ``expr`` with variables bound to numpy arrays.

    ``env`` maps ``tirx.Var`` -> int64 array; ``buffers`` maps a buffer name to the array its
    loads read (indices wrap nothing: out-of-range loads raise :class:`NotEvaluable`).
    Unknown variables, buffers or operations raise :class:`NotEvaluable`.  Integer division
    and modulo follow TIR: floor semantics for ``FloorDiv``/``FloorMod``, truncation for
    ``Div``/``Mod``; float arithmetic runs in the expression's float type.
    """
    ev = lambda e: eval_index(e, env, buffers)  # noqa: E731
    if isinstance(expr, tirx.IntImm):
        return np.int64(expr.value)
    if isinstance(expr, tirx.FloatImm):
        return _cast(np.float64(expr.value), _dtype_of(expr))
    if tvm.ir.is_prim_var(expr):
        if expr not in env:
            raise NotEvaluable(f"free variable '{expr}'")
        return env[expr]
    for cls, fn in _BIN.items():
        if type(expr) is cls:
            return fn(ev(expr.a), ev(expr.b))
    if isinstance(expr, tirx.Div):
        a, b = ev(expr.a), ev(expr.b)
        if _dtype_of(expr).startswith("float"):
            return _cast(np.true_divide(a, b), _dtype_of(expr))
        return np.trunc(np.true_divide(a, b)).astype(np.int64)
    if isinstance(expr, tirx.Mod):
        return np.fmod(ev(expr.a), ev(expr.b))
    if isinstance(expr, tirx.Not):
        return np.logical_not(ev(expr.a))
    if isinstance(expr, tirx.Cast):
        return _cast(ev(expr.value), _dtype_of(expr))
    if isinstance(expr, tirx.Select):
        return np.where(ev(expr.condition), ev(expr.true_value), ev(expr.false_value))
    name = getattr(getattr(expr, "op", None), "name", "") if type(expr).__name__ == "Call" else ""
    if name in ("prim.if_then_else", "tirx.if_then_else", "tir.if_then_else"):
        c, t, f = (ev(a) for a in expr.args)
        return np.where(c, t, f)
    if name.split(".")[-1] in _FLOAT_CALLS and len(expr.args) == 1:
        return _FLOAT_CALLS[name.split(".")[-1]](ev(expr.args[0]))
    if type(expr).__name__ in ("TensorLoad", "BufferLoad") and buffers is not None:
        src = getattr(expr, "source", None)
        if src is None:
            src = getattr(expr, "buffer", None)
        arr = buffers.get(getattr(src, "name", None))
        if arr is None:
            raise NotEvaluable(f"load of unknown buffer '{getattr(src, 'name', src)}'")
        idx = np.broadcast_arrays(*[np.asarray(ev(i), np.int64) for i in expr.indices])
        for ax, ix in enumerate(idx):
            if ix.size and (ix.min() < 0 or ix.max() >= arr.shape[ax]):
                raise NotEvaluable("load out of bounds")
        return arr[tuple(idx)]
    raise NotEvaluable(f"{type(expr).__name__} {name} in expression")


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

    Negative widths crop first (as ONNX Runtime does), then the positive widths pad the
    cropped axis.  Only the widths ONNX Runtime accepts are modelled: reflect needs each
    positive width below the (cropped) size and a size above 1, edge a non-empty axis.
    """
    after = out - n - before
    start = max(-before, 0)
    n -= start + max(-after, 0)
    before, after = max(before, 0), max(after, 0)
    if n <= 0:
        return None
    p = np.arange(out, dtype=np.int64) - before
    if mode == "edge":
        return start + np.clip(p, 0, n - 1)
    if mode == "reflect":
        if (before or after) and (n < 2 or before >= n or after >= n):
            return None
        p = np.abs(p)
        return start + np.where(p > n - 1, 2 * (n - 1) - p, p)
    if mode == "wrap":
        return start + np.mod(p, n)
    return None


def match_pad_axis(mode: str, f: np.ndarray, n: int) -> Optional[int]:
    """The pad-before width for which ONNX Pad ``mode`` reproduces index map ``f``."""
    out = len(f)
    if out == n and np.array_equal(f, np.arange(n)):
        return 0
    # plain padding first; negative widths (crops) only if no padding reproduces the map
    for before in list(range(0, max(out - n, -1) + 1)) + [b for b in range(-n + 1, out) if b < 0 or b > out - n]:
        ref = onnx_pad_map(mode, n, before, out)
        if ref is not None and np.array_equal(ref, f):
            return before
    return None


# ----------------------------------------------------------------------------- symbolic axes
def _to_z3(expr, names: Dict[object, object]):
    """Integer TIR expression -> z3 term (variables looked up / created in ``names``)."""
    import z3

    if isinstance(expr, tirx.IntImm):
        return z3.IntVal(int(expr.value))
    if tvm.ir.is_prim_var(expr):
        if expr not in names:
            names[expr] = z3.Int(f"{expr}_{len(names)}")
        return names[expr]
    if isinstance(expr, tirx.Cast) and _dtype_of(expr).startswith(("int", "uint")) \
            and _dtype_of(expr.value).startswith(("int", "uint")):
        return _to_z3(expr.value, names)
    t = type(expr)
    if t in (tirx.Add, tirx.Sub, tirx.Mul, tirx.Min, tirx.Max, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ,
             tirx.NE, tirx.And, tirx.Or, tirx.FloorDiv, tirx.FloorMod):
        a, b = _to_z3(expr.a, names), _to_z3(expr.b, names)
        return {
            tirx.Add: lambda: a + b, tirx.Sub: lambda: a - b, tirx.Mul: lambda: a * b,
            tirx.Min: lambda: z3.If(a < b, a, b), tirx.Max: lambda: z3.If(a > b, a, b),
            tirx.LT: lambda: a < b, tirx.LE: lambda: a <= b, tirx.GT: lambda: a > b, tirx.GE: lambda: a >= b,
            tirx.EQ: lambda: a == b, tirx.NE: lambda: a != b, tirx.And: lambda: z3.And(a, b),
            tirx.Or: lambda: z3.Or(a, b),
            # z3's Int division is Euclidean: it is floor division for b > 0, and
            # floor(a / b) = floor(-a / -b) turns b < 0 into that case
            tirx.FloorDiv: lambda: _floordiv(a, b),
            tirx.FloorMod: lambda: a - b * _floordiv(a, b),
        }[t]()
    if isinstance(expr, tirx.Not):
        return z3.Not(_to_z3(expr.a, names))
    if isinstance(expr, tirx.Select):
        return z3.If(_to_z3(expr.condition, names), _to_z3(expr.true_value, names), _to_z3(expr.false_value, names))
    if type(expr).__name__ == "Call" and getattr(expr.op, "name", "") in ("prim.if_then_else", "tirx.if_then_else"):
        c, a, b = (_to_z3(x, names) for x in expr.args)
        return z3.If(c, a, b)
    raise NotEvaluable(f"{type(expr).__name__} in symbolic index expression")


def _floordiv(a, b):
    import z3

    return z3.If(b > 0, a / b, (0 - a) / (0 - b))


def proves_identity(expr, var, extent) -> bool:
    """Z3 proof that ``expr(var) == var`` for every ``0 <= var < extent`` and every value >= 1
    of the symbolic dims in ``extent`` (the copy of a symbolic, unpadded axis)."""
    import z3

    if extent is None:
        return False
    names: Dict[object, object] = {}
    try:
        v = _to_z3(var, names)
        e = _to_z3(expr, names)
        n = _to_z3(extent, names)
    except NotEvaluable:
        return False
    s = z3.Solver()
    s.set("timeout", 5000)
    for tv, zv in names.items():
        if tv is not var and not tv.same_as(var):
            s.add(zv >= 1)
    s.add(v >= 0, v < n, e != v)
    return s.check() == z3.unsat
