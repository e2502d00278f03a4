"""Data-movement operators: concat, split, transpose, reshape."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, register, same_dtype
from .relax_util import ints
from ..types import GraphError, TensorType, normalize_axis

R = relax.op


def _concat_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    nd = t[0].ndim
    ax = normalize_axis(a["axis"], nd)
    total = 0
    for x in t:
        if x.ndim != nd or any(x.shape[i] != t[0].shape[i] for i in range(nd) if i != ax):
            raise GraphError(f"concat: shapes {[x.shape for x in t]} differ outside axis {ax}")
        if not isinstance(x.shape[ax], int):
            raise GraphError("concat: symbolic size on the concat axis")
        total += x.shape[ax]
    shape = list(t[0].shape)
    shape[ax] = total
    return [TensorType(tuple(shape), same_dtype(t, "concat"))]


def _concat_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    tup = call.args[0]
    if not isinstance(tup, relax.Tuple) or call.attrs.axis is None:
        return None
    return list(tup.fields), {"axis": int(call.attrs.axis)}


CONCAT = register(OpDef("concat", None, _concat_infer,
                        lambda x, a: [np.concatenate(list(x), axis=a["axis"])], attrs={"axis": None},
                        relax=("relax.concat",), lift=_concat_lift,
                        lower=lambda bb, args, a, t: R.concat(list(args), axis=a["axis"]),
                        z3=lambda x, a: [np.concatenate([np.asarray(v, dtype=object) for v in x], axis=a["axis"])],
                        doc="concatenate along an axis"))


def _split_norm(a: dict, t: Sequence[TensorType]) -> dict:
    ax = normalize_axis(a["axis"], t[0].ndim)
    n = t[0].shape[ax]
    sizes = a["sizes"]
    if isinstance(sizes, int):  # equal sections
        if sizes < 1 or not isinstance(n, int) or n % sizes:
            raise GraphError(f"split: {n} not divisible into {sizes} sections")
        sizes = (n // sizes,) * sizes
    if any(int(s) < 0 for s in sizes) or sum(sizes) != n:
        raise GraphError(f"split: sizes {tuple(sizes)} do not add up to {n} on axis {ax}")
    return {"axis": a["axis"], "sizes": tuple(int(s) for s in sizes)}


def _split_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    ax = normalize_axis(a["axis"], t[0].ndim)
    out = []
    for s in a["sizes"]:
        shape = list(t[0].shape)
        shape[ax] = s
        out.append(TensorType(tuple(shape), t[0].dtype))
    return out


def _split_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    idx = np.cumsum(a["sizes"])[:-1]
    return [np.ascontiguousarray(p) for p in np.split(x[0], idx, axis=a["axis"])]


def _split_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    ios = call.attrs.indices_or_sections
    ty = call.args[0].ty
    try:
        n = int(ty.shape[normalize_axis(int(call.attrs.axis), len(ty.shape))])
    except (TypeError, ValueError, AttributeError):
        return None
    if hasattr(ios, "value") or isinstance(ios, int):
        sizes = int(ios)
    else:
        cuts = [0] + [int(i) for i in ios] + [n]
        sizes = tuple(cuts[i + 1] - cuts[i] for i in range(len(cuts) - 1))
    return list(call.args), {"axis": int(call.attrs.axis), "sizes": sizes}


def _split_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, t: Sequence[TensorType]) -> Any:
    idx = [int(i) for i in np.cumsum(a["sizes"])[:-1]]
    tup = bb.emit(R.split(args[0], idx, axis=a["axis"]))
    return [relax.TupleGetItem(tup, i) for i in range(len(a["sizes"]))]


SPLIT = register(OpDef("split", 1, _split_infer, _split_np, attrs={"axis": None, "sizes": None},
                       normalize=_split_norm, relax=("relax.split",), lift=_split_lift, lower=_split_lower,
                       z3=_split_np, doc="split along an axis into pieces of the given sizes (several outputs)"))


def _transpose_norm(a: dict, t: Sequence[TensorType]) -> dict:
    nd = t[0].ndim
    perm = a["perm"]
    perm = tuple(reversed(range(nd))) if perm is None or perm == () else tuple(normalize_axis(p, nd) for p in perm)
    if sorted(perm) != list(range(nd)):
        raise GraphError(f"transpose: {perm} is not a permutation of rank {nd}")
    return {"perm": perm}


TRANSPOSE = register(OpDef(
    "transpose", 1, lambda t, a: [TensorType(tuple(t[0].shape[p] for p in a["perm"]), t[0].dtype)],
    lambda x, a: [np.transpose(x[0], a["perm"])], attrs={"perm": ()}, normalize=_transpose_norm,
    relax=("relax.permute_dims",), lift=lambda c: (list(c.args), {"perm": ints(c.attrs.axes)}),
    z3=lambda x, a: [np.transpose(np.asarray(x[0], dtype=object), a["perm"])],
    lower=lambda bb, args, a, t: R.permute_dims(args[0], list(a["perm"])),
    doc="permute dimensions"))


def _reshape_norm(a: dict, t: Sequence[TensorType]) -> dict:
    shape = list(a["shape"])
    if not t[0].is_static:
        raise GraphError("reshape: symbolic input shape")
    n = t[0].size
    if shape.count(-1) > 1:
        raise GraphError(f"reshape: more than one -1 in {shape}")
    known = int(np.prod([s for s in shape if s != -1])) if shape else 1
    if -1 in shape:
        if known == 0 or n % known:
            raise GraphError(f"reshape: cannot reshape {t[0].shape} into {tuple(shape)}")
        shape[shape.index(-1)] = n // known
    if int(np.prod(shape)) != n:
        raise GraphError(f"reshape: cannot reshape {t[0].shape} into {tuple(shape)}")
    return {"shape": tuple(int(s) for s in shape)}


def _reshape_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    """relax.reshape to a static shape; expand_dims and squeeze (ONNX's Unsqueeze and Squeeze) as the reshape to
    their static result."""
    shape = call.args[1] if call.op.name == "relax.reshape" else getattr(call.ty, "shape", None)
    return _static_shape_lift(call, shape)


def _static_shape_lift(call: relax.Call, shape: Any) -> Optional[tuple[list, dict]]:
    """([the call's data input], {"shape": ints}) for a static Relax shape, else None (a symbolic one)."""
    if not isinstance(shape, relax.ShapeExpr):
        return None
    try:
        return [call.args[0]], {"shape": tuple(int(v) for v in shape.values)}
    except (TypeError, ValueError):
        return None


RESHAPE = register(OpDef(
    "reshape", 1, lambda t, a: [TensorType(a["shape"], t[0].dtype)], lambda x, a: [np.reshape(x[0], a["shape"])],
    attrs={"shape": None}, normalize=_reshape_norm, relax=("relax.reshape", "relax.expand_dims", "relax.squeeze"),
    lift=_reshape_lift,
    z3=lambda x, a: [np.reshape(np.asarray(x[0], dtype=object), a["shape"])],
    lower=lambda bb, args, a, t: R.reshape(args[0], list(a["shape"])),
    doc="reshape (static)"))


def _broadcast_to_norm(a: dict, t: Sequence[TensorType]) -> dict:
    shape = tuple(int(s) for s in a["shape"])
    x = t[0].shape
    if len(x) > len(shape) or any(d not in (1, s) for d, s in zip(x[::-1], shape[::-1])):
        raise GraphError(f"broadcast_to: {x} does not broadcast to {shape}")
    return {"shape": shape}


BROADCAST_TO = register(OpDef(
    "broadcast_to", 1, lambda t, a: [TensorType(a["shape"], t[0].dtype)],
    lambda x, a: [np.ascontiguousarray(np.broadcast_to(x[0], a["shape"]))], attrs={"shape": None},
    normalize=_broadcast_to_norm, relax=("relax.broadcast_to",), lift=lambda c: _static_shape_lift(c, c.args[1]),
    z3=lambda x, a: [np.broadcast_to(np.asarray(x[0], dtype=object), a["shape"])],
    lower=lambda bb, args, a, t: R.broadcast_to(args[0], list(a["shape"])),
    doc="broadcast to a static shape (ONNX's Expand): the axes of 1 repeated"))
