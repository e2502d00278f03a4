"""Matrix multiplication with NumPy's batched/broadcast semantics and TASO's fused activation."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, broadcast_shapes, register, same_dtype
from .elementwise import apply_activation, check_activation, lower_activation, z3_activation
from ..types import GraphError, TensorType


def _matmul_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x, y = t[0].shape, t[1].shape
    if not x or not y:
        raise GraphError("matmul: scalar operand")
    xs = (1,) + x if len(x) == 1 else x
    ys = y + (1,) if len(y) == 1 else y
    if xs[-1] != ys[-2]:
        raise GraphError(f"matmul: inner dimensions differ: {x} @ {y}")
    batch = broadcast_shapes(xs[:-2], ys[:-2], "matmul")
    out = batch + (xs[-2], ys[-1])
    if len(x) == 1:
        out = out[:-2] + out[-1:]
    if len(y) == 1:
        out = out[:-1]
    return [TensorType(out, same_dtype(t, "matmul"))]


def _matmul_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    return [apply_activation(a["activation"], np.matmul(x[0], x[1]))]


def _matmul_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    p, q = np.asarray(x[0], dtype=object), np.asarray(x[1], dtype=object)
    sym = next((v.flat[0] for v in (p, q) if v.size and hasattr(v.flat[0], "sym_dot")), None)
    # the verifier's polynomials: one in-place sum of products per element
    y = _matmul_dot(p, q, sym.sym_dot) if sym is not None else np.matmul(p, q)
    return [z3_activation(a["activation"], np.asarray(y, dtype=object) if isinstance(y, np.ndarray) else
                          np.array(y, dtype=object))]


def _matmul_dot(p: np.ndarray, q: np.ndarray, dot) -> np.ndarray:
    """np.matmul over object arrays (1-D operands, broadcast batch dims) with `dot(xs, ys)` per element."""
    a = p[None, :] if p.ndim == 1 else p
    b = q[:, None] if q.ndim == 1 else q
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    m, n = a.shape[-2], b.shape[-1]
    out = np.empty(batch + (m, n), dtype=object)
    for idx in np.ndindex(*batch):
        ai, bi = a[idx], b[idx]
        for i, j in np.ndindex(m, n):
            out[idx + (i, j)] = dot(ai[i], bi[:, j])
    if p.ndim == 1:
        out = out[..., 0, :]
    if q.ndim == 1:
        out = out[..., 0]
    return out


def _matmul_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    od = call.attrs.out_dtype
    if od is not None and str(od) not in ("", "void"):
        return None
    return list(call.args), {"activation": "none"}


MATMUL = register(OpDef(
    "matmul", 2, _matmul_infer, _matmul_np, attrs={"activation": "none"},
    normalize=lambda a, t: {"activation": check_activation(a["activation"], "matmul")},
    relax=("relax.matmul",), lift=_matmul_lift,
    lower=lambda bb, args, a, t: lower_activation(a["activation"], relax.op.matmul(args[0], args[1])),
    z3=_matmul_z3,
    doc="matrix product (NumPy semantics) with fused activation"))
