"""Rows of one axis: `slice` (ONNX Slice on one axis with step 1, Relax's `strided_slice`), `slice_step` (the same
with a step above 1: every other position, `x[..., 1::2]`) and `pick` (ONNX Gather with a scalar index: one
position of an axis, the axis removed; Relax's `take` with a constant scalar index).

A classifier reads its logits from one row of the last hidden state (`hidden[:, 0]`, the [CLS] token); the rules of
family `dead_rows` (`rules/library/rows.yaml`) move such a slice towards the inputs through row-wise operators, so
that no operator computes a row nothing reads.

`begin` and `end` are kept as written (ONNX's semantics: a negative bound counts from the end, bounds are clamped to
the axis, `end` = INT64_MAX reads to the end), so a slice of the last row stays the last row at every binding of a
symbolic dim.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from tvm import relax
from tvm.ir import GenericConst

from .base import OpDef, register
from .gather_form import normalized_indices
from ..types import GraphError, TensorType, normalize_axis

R = relax.op

INT64_MAX = 2 ** 63 - 1  # ONNX's "to the end of the axis"


def bounds(begin: int, end: int, dim: int) -> tuple[int, int]:
    """ONNX Slice's bounds on an axis of `dim` elements (step 1): negative counts from the end, then clamped."""
    b = begin + dim if begin < 0 else begin
    e = end + dim if end < 0 else end
    b = min(max(b, 0), dim)
    e = min(max(e, 0), dim)
    return b, max(e, b)


def _slice_norm(a: dict, t: Sequence[TensorType]) -> dict:
    axis = normalize_axis(int(a["axis"]), t[0].ndim)
    return {"axis": axis, "begin": int(a["begin"]), "end": int(a["end"])}


def _slice_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    """`slice`'s and `slice_step`'s output: ceil((end - begin) / step) positions of the axis."""
    x, name = t[0], "slice_step" if "step" in a else "slice"
    dim = x.shape[a["axis"]]
    if not isinstance(dim, int):
        raise GraphError(f"{name}: symbolic size on the sliced axis")
    b, e = bounds(a["begin"], a["end"], dim)
    if e <= b:
        raise GraphError(f"{name}: [{a['begin']}, {a['end']}) of an axis of {dim} is empty")
    shape = list(x.shape)
    shape[a["axis"]] = -(-(e - b) // a.get("step", 1))
    return [TensorType(tuple(shape), x.dtype)]


def _slice_array(x: np.ndarray, a: dict) -> np.ndarray:
    b, e = bounds(a["begin"], a["end"], x.shape[a["axis"]])
    index = [slice(None)] * x.ndim
    index[a["axis"]] = slice(b, e, a.get("step", 1))
    return x[tuple(index)]


def _prim_ints(v: Any) -> Optional[tuple[int, ...]]:
    """The integers of a Relax tuple of literal values (PrimValue, IntImm, int), else None."""
    try:
        fields = v.fields if isinstance(v, relax.Tuple) else v
        return tuple(int(getattr(f, "value", f)) for f in fields)
    except (TypeError, ValueError, AttributeError):
        return None


def _slice_lift(call: relax.Call) -> Optional[tuple]:
    """A strided_slice of one axis with literal bounds: `slice` at step 1, `slice_step` at a larger one."""
    if len(call.args) < 4:
        return None
    axes, begin, end = (_prim_ints(call.args[i]) for i in (1, 2, 3))
    strides = _prim_ints(call.args[4]) if len(call.args) > 4 else (1,)
    if axes is None or begin is None or end is None or strides is None:
        return None
    if len(axes) != 1 or len(begin) != 1 or len(end) != 1 or len(strides) > 1 or strides[0] < 1:
        return None
    if strides[0] > 1:
        return [call.args[0]], {"axis": axes[0], "begin": begin[0], "end": end[0], "step": strides[0]}, "slice_step"
    return [call.args[0]], {"axis": axes[0], "begin": begin[0], "end": end[0]}


def _slice_lower(bb: Any, args: Sequence[Any], a: dict, t: Sequence[TensorType]) -> Any:
    return R.strided_slice(args[0], axes=[a["axis"]], begin=[a["begin"]], end=[a["end"]], strides=[1])


SLICE = register(OpDef(
    "slice", 1, _slice_infer, lambda x, a: [_slice_array(np.asarray(x[0]), a)],
    attrs={"axis": None, "begin": None, "end": None}, normalize=_slice_norm, relax=("relax.strided_slice",),
    lift=_slice_lift, lower=_slice_lower, z3=lambda x, a: [_slice_array(np.asarray(x[0], dtype=object), a)],
    doc="the positions [begin, end) of one axis (ONNX Slice, step 1; negative bounds count from the end)"))


def _step_norm(a: dict, t: Sequence[TensorType]) -> dict:
    step = int(a["step"])
    if step < 2:
        raise GraphError(f"slice_step: step {step} (a step of 1 is `slice`)")
    return dict(_slice_norm(a, t), step=step)


def _step_lower(bb: Any, args: Sequence[Any], a: dict, t: Sequence[TensorType]) -> Any:
    return R.strided_slice(args[0], axes=[a["axis"]], begin=[a["begin"]], end=[a["end"]], strides=[a["step"]])


SLICE_STEP = register(OpDef(
    "slice_step", 1, _slice_infer, lambda x, a: [_slice_array(np.asarray(x[0]), a)],
    attrs={"axis": None, "begin": None, "end": None, "step": None}, normalize=_step_norm, lower=_step_lower,
    z3=lambda x, a: [_slice_array(np.asarray(x[0], dtype=object), a)],
    doc="the positions begin, begin + step, ... before end of one axis (ONNX Slice with a step above 1: "
        "transformers' x[..., ::2] and x[..., 1::2], the pairs of an interleaved rotary embedding)"))


def _pick_norm(a: dict, t: Sequence[TensorType]) -> dict:
    return {"axis": normalize_axis(int(a["axis"]), t[0].ndim), "index": int(a["index"])}


def _pick_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x, ax, i = t[0], a["axis"], a["index"]
    dim = x.shape[ax]
    if not isinstance(dim, int) or not -dim <= i < dim:
        raise GraphError(f"pick: index {i} outside an axis of {dim}")
    return [TensorType(tuple(x.shape[:ax]) + tuple(x.shape[ax + 1:]), x.dtype)]


def _pick_lower(bb: Any, args: Sequence[Any], a: dict, t: Sequence[TensorType]) -> Any:
    """A negative index in the frontend's form of ONNX Gather (gather_form.py), so that the exporter writes the
    index as given (the last row at every length), not this binding's position."""
    i = a["index"]
    ids = relax.const(i, "int64") if i >= 0 else normalized_indices(bb, relax.const(i, "int64"),
                                                                      int(t[0].shape[a["axis"]]), "int64")
    return R.take(args[0], ids, axis=a["axis"])


def scalar_index_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    """(args, attrs) of `pick` for a Relax `take` of a constant scalar index on an axis other than 0, else None."""
    ids = call.args[1]
    axis = call.attrs.axis
    if axis is None or int(axis) == 0 or not isinstance(ids, GenericConst):
        return None
    value = ids.value.numpy()
    if value.ndim != 0 or value.dtype.kind not in "iu":
        return None
    return [call.args[0]], {"axis": int(axis), "index": int(value)}


PICK = register(OpDef(
    "pick", 1, _pick_infer, lambda x, a: [np.take(np.asarray(x[0]), a["index"], axis=a["axis"])],
    attrs={"axis": None, "index": None}, normalize=_pick_norm, lower=_pick_lower,
    z3=lambda x, a: [np.take(np.asarray(x[0], dtype=object), a["index"], axis=a["axis"])],
    doc="one position of an axis, the axis removed (ONNX Gather with a scalar index: `hidden[:, 0]`)"))

__all__ = ["SLICE", "SLICE_STEP", "PICK", "INT64_MAX", "bounds", "scalar_index_lift"]
