"""Reductions, arg-reductions, scans and sorting."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .tensor_types import FLOAT_TYPES, onnx_dtype, rank_of
from .registry import register

_REDUCE = {
    "relax.sum": "ReduceSum",
    "relax.mean": "ReduceMean",
    "relax.max": "ReduceMax",
    "relax.min": "ReduceMin",
    "relax.prod": "ReduceProd",
}


def _axes(attrs_axis, nd):
    if attrs_axis is None:
        return None
    return sorted((int(a) + nd) % nd for a in attrs_axis) if nd > 0 else []


@register(*_REDUCE)
def convert_reduce(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axes = _axes(attrs.axis, nd)
    keep = bool(attrs.keepdims)
    if axes is not None and len(axes) == 0:
        return x  # reducing over no axis is the identity in Relax
    if nd == 0:
        return x
    op = _REDUCE[ctx.relax_op]
    # sum/mean/max/min over axis 0 of a stack: what the frontend makes of variadic Sum/Mean/Max/Min
    if axes == [0] and not keep:
        st = ctx.exporter.single_use_call(call.args[0], "relax.stack")
        if st is not None and int(st.attrs.axis if st.attrs.axis is not None else 0) == 0 \
                and isinstance(st.args[0], __import__("tvm").relax.Tuple) and len(st.args[0].fields) >= 1 \
                and op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"):
            vals = ctx.exporter.value_of(st.args[0])
            variadic = {"ReduceSum": "Sum", "ReduceMean": "Mean", "ReduceMax": "Max", "ReduceMin": "Min"}[op]
            t = ctx.types[vals[0]]
            # (int16 / uint16 / bool have no variadic Max/Min kernels in ONNX Runtime: reduce instead)
            if variadic in ("Sum", "Mean") and t in FLOAT_TYPES or variadic in ("Max", "Min") and t not in (
                    TensorProto.INT16, TensorProto.UINT16, TensorProto.BOOL):
                return ctx.op(variadic, *vals)
    # GlobalAveragePool / GlobalMaxPool: what the ONNX frontend decomposes into mean/max (images: a mean over the
    # last axis of [B, S, H] stays ReduceMean, the form ONNX Runtime's LayerNormalization fusion reads)
    if op in ("ReduceMean", "ReduceMax") and keep and nd >= 4 and axes == list(range(2, nd)) \
            and ctx.types[x] in FLOAT_TYPES:
        return ctx.op("GlobalAveragePool" if op == "ReduceMean" else "GlobalMaxPool", x)
    t = ctx.types[x]
    # element types ONNX (or ONNX Runtime) lacks for a reduction: compute in a wider type
    wide = _WIDEN.get(op, {}).get(t)
    if t == TensorProto.UINT64 and op in ("ReduceMax", "ReduceMin"):
        # no uint64 min/max kernels in common runtimes: flip the sign bit (wrapping add of
        # INT64_MIN), which maps unsigned order onto signed order, reduce as int64, flip back
        bias = ctx.typed_scalar(np.iinfo(np.int64).min, TensorProto.INT64)
        s = ctx.op("Add", ctx.cast(x, TensorProto.INT64), bias)
        r = ctx.reduce(op, s, axes, keep)
        return ctx.cast(ctx.op("Sub", r, bias), TensorProto.UINT64)
    if wide is not None:
        r = ctx.reduce(op, ctx.cast(x, wide), axes, keep)
        return ctx.cast(r, t)
    return ctx.reduce(op, x, axes, keep)


_MINMAX_WIDEN = {
    TensorProto.BOOL: TensorProto.UINT8,
    TensorProto.INT16: TensorProto.INT32,
    TensorProto.UINT16: TensorProto.INT32,
    TensorProto.UINT32: TensorProto.INT64,
}
_WIDEN = {
    "ReduceMax": _MINMAX_WIDEN,
    "ReduceMin": _MINMAX_WIDEN,
    "ReduceSum": {TensorProto.INT8: TensorProto.INT32, TensorProto.UINT8: TensorProto.UINT32,
                  TensorProto.INT16: TensorProto.INT32, TensorProto.UINT16: TensorProto.UINT32},
    "ReduceProd": {TensorProto.INT8: TensorProto.INT32, TensorProto.UINT8: TensorProto.UINT32,
                   TensorProto.INT16: TensorProto.INT32, TensorProto.UINT16: TensorProto.UINT32},
}


@register("relax.variance", "relax.std")
def convert_variance(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axes = _axes(attrs.axis, nd)
    keep = bool(attrs.keepdims)
    mean = ctx.reduce("ReduceMean", x, axes, True)
    d = ctx.op("Sub", x, mean)
    var = ctx.reduce("ReduceMean", ctx.op("Mul", d, d), axes, keep)
    if ctx.relax_op == "relax.std":
        return ctx.op("Sqrt", var)
    return var


@register("relax.argmax", "relax.argmin")
def convert_argmax(ctx, call, attrs, args):
    x = args[0]
    op = "ArgMax" if ctx.relax_op == "relax.argmax" else "ArgMin"
    nd = rank_of(call.args[0])
    axis = attrs.axis
    keep = bool(attrs.keepdims)
    out_elem = onnx_dtype(ctx.out_ty.dtype)
    if ctx.types[x] == TensorProto.BOOL:
        x = ctx.cast(x, TensorProto.UINT8)
    if axis is None:
        flat = ctx.reshape(x, [-1])
        r = ctx.op(op, flat, axis=0, keepdims=int(keep))
        if keep:
            r = ctx.reshape(r, [1] * nd)
        else:
            r = ctx.squeeze(r, None) if False else ctx.reshape(r, [])
    else:
        r = ctx.op(op, x, axis=(int(axis) + nd) % nd, keepdims=int(keep))
    return ctx.cast(r, out_elem)


@register("relax.cumsum")
def convert_cumsum(ctx, call, attrs, args):
    x = args[0]
    axis = attrs.axis
    dt = attrs.dtype
    exclusive = bool(attrs.exclusive)
    if dt is not None and str(dt) not in ("", "void"):
        x = ctx.cast(x, onnx_dtype(dt))
    if axis is None:
        x = ctx.reshape(x, [-1])
        axis = 0
    kw = {"exclusive": 1} if exclusive else {}
    return ctx.op("CumSum", x, ctx.i64(int(axis)), **kw)


def _topk_k(ctx, x, axis, k=None):
    if k is not None and int(k) >= 1:
        return ctx.i64([int(k)])
    return ctx.dim_of(x, axis)


@register("relax.topk")
def convert_topk(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    k = int(attrs.k)
    ret = str(attrs.ret_type)
    largest = bool(attrs.largest)
    dt = attrs.dtype
    kk = _topk_k(ctx, x, axis, k)
    v, i = ctx.node("TopK", [x, kk], n_out=2, axis=axis, largest=int(largest), sorted=1)
    if dt is not None and str(dt) not in ("", "void"):
        i = ctx.cast(i, onnx_dtype(dt))
    if ret == "both":
        return [v, i]
    if ret == "values":
        return v
    if ret == "indices":
        return i
    ctx.fail(f"topk ret_type '{ret}'")


@register("relax.sort")
def convert_sort(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    desc = bool(attrs.descending)
    v, _ = ctx.node("TopK", [x, ctx.dim_of(x, axis)], n_out=2, axis=axis, largest=int(desc), sorted=1)
    return v


@register("relax.argsort")
def convert_argsort(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    desc = bool(attrs.descending)
    dt = attrs.dtype
    _, i = ctx.node("TopK", [x, ctx.dim_of(x, axis)], n_out=2, axis=axis, largest=int(desc), sorted=1)
    if dt is not None and str(dt) not in ("", "void"):
        i = ctx.cast(i, onnx_dtype(dt))
    return i


@register("relax.unique")
def convert_unique(ctx, call, attrs, args):
    from .tensor_types import prim_to_py

    x = args[0]
    a = [prim_to_py(e) for e in call.args[1:]]
    sorted_, ret_index, ret_inverse, ret_counts = (bool(v) for v in a[:4])
    axis = a[4] if len(a) > 4 else None
    kw = {"sorted": int(sorted_)}
    if axis is not None and not isinstance(axis, str):
        nd = rank_of(call.args[0])
        kw["axis"] = (int(axis) + nd) % nd
    y, idx, inv, cnt = ctx.node("Unique", [x], n_out=4, **kw)
    outs = [y]
    if ret_index:
        outs.append(idx)
    if ret_inverse:
        outs.append(inv)
    if ret_counts:
        outs.append(cnt)
    return outs if len(outs) > 1 else y
