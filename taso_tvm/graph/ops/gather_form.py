"""ONNX Gather's negative indices in Relax: the form TVM's ONNX frontend writes, recognized and written again.

The frontend imports Gather(data, ids, axis) as `take(data, where(less(ids, 0), add(ids, n), ids), axis)` with
n = data.shape[axis] (as `take(shape_to_tensor(shape_of(data)), axis, mode="wrap")`, cast to the ids' type, or a
constant once folded). That wrap is ONNX's own semantics, so a take of such indices *is* ONNX's Gather of the raw
ids: the lifter reads it as the registry's `take` (defined as ONNX's Gather) and the exporter writes one Gather.
Lowering `take` writes the same form back (`normalized_indices`), so TVM keeps ONNX's semantics for negative ids.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from tvm import relax
from tvm.ir import GenericConst

R = relax.op
Producer = Callable[[Any], Optional[relax.Call]]  # a var -> the call bound to it (None: not a bound call)


def _op(call: Optional[relax.Call]) -> str:
    return getattr(getattr(call, "op", None), "name", "") if call is not None else ""


def _const_int(expr: Any) -> Optional[int]:
    """The value of a one-element integer constant, else None."""
    if not isinstance(expr, GenericConst):
        return None
    a = expr.value.numpy()
    if a.size != 1 or a.dtype.kind not in "iu":
        return None
    return int(a.reshape(()))


def _static_dim(expr: Any, axis: int) -> Optional[int]:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    try:
        dims = list(shape)
        d = dims[axis % len(dims)]
        return int(d) if hasattr(d, "value") or isinstance(d, int) else None
    except (TypeError, ZeroDivisionError):
        return None


def _extent_of(expr: Any, data: Any, axis: int, producer: Producer, chain: list) -> bool:
    """Whether `expr` is data.shape[axis]: a constant of that value, or the frontend's shape chain on a tensor
    whose dim there is the same (cast or not). The vars of the chain are added to `chain`."""
    want = _static_dim(data, axis)
    value = _const_int(expr)
    if value is not None:
        return want is not None and value == want
    call = producer(expr)
    chain.append(expr)
    if _op(call) == "relax.astype":
        chain.append(call.args[0])
        call = producer(call.args[0])
    if _op(call) != "relax.take" or str(call.attrs.mode) != "wrap":
        return False
    k = _const_int(call.args[1])
    to_tensor = producer(call.args[0])
    if k is None or _op(to_tensor) != "relax.shape_to_tensor":
        return False
    chain.append(call.args[0])
    src = to_tensor.args[0]
    shape_of = producer(src)
    if _op(shape_of) == "relax.shape_of":
        chain.append(src)
        other = shape_of.args[0]
        rank = len(data.ty.shape)
        if other.same_as(data) and k % rank == axis % rank:
            return True
        return want is not None and _static_dim(other, k) == want
    if isinstance(src, relax.ShapeExpr):  # shape_of folded to the shape
        values = list(src.values)
        d = values[k % len(values)] if values else None
        return want is not None and hasattr(d, "value") and int(d.value) == want
    return False


def raw_indices(take: relax.Call, producer: Producer) -> Optional[Any]:
    """The ids of `take(data, where(less(ids, 0), add(ids, data.shape[axis]), ids), axis)` (the frontend's Gather),
    or None when the take's indices are not that form."""
    found = gather_form(take, producer)
    return None if found is None else found[0]


def gather_form(take: relax.Call, producer: Producer) -> Optional[tuple[Any, list]]:
    """(ids, the vars bound in their normalization) when `take` is the frontend's Gather (`raw_indices`), else
    None. The lifter keeps those vars as they are, so the form stays whole for the exporter to see."""
    if _op(take) != "relax.take" or str(take.attrs.mode) not in ("fast", "raise") or take.attrs.axis is None:
        return None
    data, idx = take.args[0], take.args[1]
    axis = int(take.attrs.axis)
    where = producer(idx)
    if _op(where) != "relax.where":
        return None
    cond, shifted, ids = where.args
    less, add = producer(cond), producer(shifted)
    if _op(less) != "relax.less" or _op(add) != "relax.add":
        return None
    if not less.args[0].same_as(ids) or _const_int(less.args[1]) != 0:
        return None
    for x, n in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
        chain = [idx, cond, shifted]
        if x.same_as(ids) and _extent_of(n, data, axis, producer, chain):
            return ids, [v for v in chain if isinstance(v, relax.Var)]
    return None


def normalized_indices(bb: Any, ids: Any, rows: int, dtype: str) -> Any:
    """The frontend's form of ONNX Gather's indices on a table of `rows` rows: negative ids count from the end."""
    if dtype.startswith("uint"):
        return ids
    neg = bb.emit(R.less(ids, relax.const(0, dtype)))
    return bb.emit(R.where(neg, R.add(ids, relax.const(rows, dtype)), ids))


__all__ = ["gather_form", "raw_indices", "normalized_indices"]
