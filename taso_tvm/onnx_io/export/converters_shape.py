"""Shape / tensor-manipulation Relax operators: reshape, transpose, concat, split, slices,
gathers / scatters, broadcast, tile, creation ops and shape <-> tensor conversions."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import tvm
from tvm import relax

from .tensor_types import FLOAT_TYPES, ONNX_TO_NP, onnx_dtype, prim_to_py, rank_of, static_dims, type_dims
from .registry import register
from ...graph.ops.gather_form import raw_indices

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# ----------------------------------------------------------------------------- reshape family
def relative_shape(in_dims, out_dims) -> list:
    """A Reshape target that states `out_dims` relative to the input: the leading dims it keeps as 0 (copy) and
    the first of the others as -1 (inferred), so that it also holds where the kept dims (a batch, a sequence) have
    other values: [B, S, E] -> [B, S, H, D] is [0, 0, -1, D], [B, S, E] -> [B*S, E] is [-1, E]."""
    k = 0
    while k < min(len(in_dims), len(out_dims)) and in_dims[k] == out_dims[k]:
        k += 1
    rest = [int(d) for d in out_dims[k:]]
    if rest and 0 not in rest:
        rest[0] = -1
    return [0] * k + rest


def trailing_kept(in_dims, out_dims) -> int:
    """How many trailing dims a reshape keeps (equal at the ends of both shapes) where the relative target of
    `relative_shape` would state one of them as a number after its -1: [B, Hk, R, T, D] -> [B, H, T, D] keeps
    T and D, which `relative_shape` writes [0, -1, T, D] (T a past length: wrong at any other); 0 where it keeps
    none or the target holds them already (a kept leading dim, or the -1)."""
    k = 0
    while k < min(len(in_dims), len(out_dims)) and in_dims[k] == out_dims[k]:
        k += 1
    m = 0
    while m < min(len(in_dims), len(out_dims)) - k and in_dims[-1 - m] == out_dims[-1 - m]:
        m += 1
    middle = len(out_dims) - k - m  # the dims between: the first is the -1
    if m == 0 or middle < 1 or 0 in out_dims or all(int(d) == 1 for d in out_dims[len(out_dims) - m:]):
        return 0
    return m


SHAPE_START_OPSET = 15  # Shape's start and end attributes


def _reshape_to(ctx, x, shape_expr, out_expr_ty):
    """Reshape ``x`` to a Relax shape (ShapeExpr or a shape value)."""
    out_static = static_dims(out_expr_ty)
    in_dims = type_dims(ctx.call.args[0]) if ctx.call is not None else None
    if in_dims is not None and out_static is None:
        out_dims = type_dims(out_expr_ty)
        if out_dims is not None and len(out_dims) == len(in_dims) and all(
                (a == b) if isinstance(a, int) else (not isinstance(b, int) and a.same_as(b))
                for a, b in zip(in_dims, out_dims)):
            return x  # reshape to the same (symbolic) shape
    if out_static is not None:
        in_static = static_dims(ctx.call.args[0])
        if in_static == out_static:
            return x  # reshape to the same shape
        if ctx.relative_reshape and in_static is not None:
            m = trailing_kept(in_static, out_static) if ctx.relative_reshape == "trailing" else 0
            if m:  # the trailing dims copied from the input's shape at run time, as the leading ones are (0)
                head = relative_shape(in_static, out_static)[:len(out_static) - m]
                rank = len(in_static)
                tail = ctx.slice1d(ctx.shape_of(x), rank - m, rank) \
                    if ctx.target_opset is not None and ctx.target_opset < SHAPE_START_OPSET \
                    else ctx.op("Shape", x, start=rank - m)  # (Shape's start: opset 15)
                return ctx.op("Reshape", x, ctx.op("Concat", ctx.i64(head), tail, axis=0))
            return ctx.op("Reshape", x, ctx.i64(relative_shape(in_static, out_static)))
        return ctx.reshape(x, out_static)
    if isinstance(shape_expr, relax.ShapeExpr):
        vals = list(shape_expr.values)
        sym = [i for i, d in enumerate(vals) if not isinstance(d, tvm.tirx.IntImm)]
        consts = [int(d) for d in vals if isinstance(d, tvm.tirx.IntImm)]
        if len(sym) == 1 and 0 not in consts and -1 not in consts:
            shape = [int(d) if isinstance(d, tvm.tirx.IntImm) else -1 for d in vals]
            return ctx.reshape(x, shape)
        st = ctx.shape_tensor(vals)
        return ctx.op("Reshape", x, st)
    st = ctx.exporter.value_of(shape_expr)
    return ctx.op("Reshape", x, ctx.cast(st, TensorProto.INT64))


@register("relax.reshape")
def convert_reshape(ctx, call, attrs, args):
    fused = _try_coerced_softmax(ctx, call)
    if fused is not None:
        return fused
    return _reshape_to(ctx, args[0], call.args[1], ctx.out_ty)


def _try_coerced_softmax(ctx, call):
    """reshape(softmax(reshape(x, [prod(d[:k]), prod(d[k:])]), -1), d) -- the frontend's form of
    an opset<13 Softmax/LogSoftmax -- is Softmax(x, axis=k) when d[k+1:] are all 1."""
    exp = ctx.exporter
    sm = exp.single_use_call(call.args[0])
    if sm is None or getattr(sm.op, "name", None) not in ("relax.nn.softmax", "relax.nn.log_softmax"):
        return None
    if rank_of(sm.args[0]) != 2 or int(sm.attrs.axis) not in (1, -1):
        return None
    inner = exp.single_use_call(sm.args[0], "relax.reshape")
    if inner is None:
        return None
    d = static_dims(inner.args[0])
    out = static_dims(ctx.out_ty)
    two = static_dims(sm.args[0])
    if d is None or out != d or two is None:
        return None
    for k in range(len(d)):
        if int(np.prod(d[:k])) == two[0] and int(np.prod(d[k:])) == two[1] and all(x == 1 for x in d[k + 1:]):
            op = "Softmax" if sm.op.name == "relax.nn.softmax" else "LogSoftmax"
            # with d[k+1:] all 1, the opset<13 (coerce to 2-D at k) and opset>=13 (one axis)
            # semantics agree, so the node is valid at every opset
            return ctx.op(op, exp.value_of(inner.args[0]), axis=k)
    return None


@register("relax.flatten")
def convert_flatten(ctx, call, attrs, args):
    return ctx.reshape(args[0], [-1])


@register("relax.nn.batch_flatten")
def convert_batch_flatten(ctx, call, attrs, args):
    return ctx.op("Flatten", args[0], axis=1)


@register("relax.permute_dims")
def convert_permute_dims(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    axes = attrs.axes
    perm = list(reversed(range(nd))) if axes is None else [(int(a) + nd) % nd for a in axes]
    if perm == list(range(nd)):
        return args[0]
    return ctx.op("Transpose", args[0], perm=perm)


@register("relax.expand_dims")
def convert_expand_dims(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    axes = [int(a) for a in attrs.axis]
    out_rank = nd + len(axes)
    axes = sorted((a + out_rank) % out_rank for a in axes)
    return ctx.unsqueeze(args[0], axes)


@register("relax.squeeze")
def convert_squeeze(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    axis = attrs.axis
    if axis is None:
        dims = type_dims(call.args[0])
        out_rank = rank_of(ctx.out_ty)
        if dims is not None:
            ones = [i for i, d in enumerate(dims) if isinstance(d, int) and d == 1]
            if out_rank >= 0 and nd - len(ones) == out_rank:
                return ctx.squeeze(args[0], ones) if ones else args[0]
        return ctx.squeeze(args[0], None)
    axes = sorted((int(a) + nd) % nd for a in axis)
    if not axes:
        return args[0]
    return ctx.squeeze(args[0], axes)


def relative_broadcast(in_dims, out_dims) -> list:
    """An Expand target that states `out_dims` relative to the input: 1 where the input's dim (aligned on the
    right) is the output's (copied at run time, whatever its value), the output's dim where the input broadcasts:
    [B, Hk, 1, T, D] -> [B, Hk, R, T, D] is [1, 1, R, 1, 1]."""
    off = len(out_dims) - len(in_dims)
    return [1 if k >= off and int(in_dims[k - off]) == int(d) else int(d) for k, d in enumerate(out_dims)]


@register("relax.broadcast_to")
def convert_broadcast_to(ctx, call, attrs, args):
    shape = call.args[1]
    in_static, out_static = static_dims(call.args[0]), static_dims(ctx.out_ty)
    if ctx.relative_reshape and in_static is not None and out_static is not None:
        return ctx.op("Expand", args[0], ctx.i64(relative_broadcast(in_static, out_static)))
    if isinstance(shape, relax.ShapeExpr):
        st = ctx.shape_tensor(shape.values)
    else:
        st = ctx.cast(args[1], TensorProto.INT64)
    return ctx.op("Expand", args[0], st)


@register("relax.concat")
def convert_concat(ctx, call, attrs, args):
    xs = args[0]
    axis = attrs.axis
    if axis is None:
        xs = [ctx.reshape(x, [-1]) for x in xs]
        axis = 0
    nd = rank_of(ctx.out_ty)
    axis = int(axis)
    if axis < 0 and nd > 0:
        axis += nd
    if len(xs) == 1:
        return xs[0]
    return ctx.op("Concat", *xs, axis=axis)


@register("relax.stack")
def convert_stack(ctx, call, attrs, args):
    xs = args[0]
    nd = rank_of(ctx.out_ty)
    axis = attrs.axis
    axis = 0 if axis is None else int(axis)
    if axis < 0:
        axis += nd
    us = [ctx.unsqueeze(x, [axis]) for x in xs]
    return us[0] if len(us) == 1 else ctx.op("Concat", *us, axis=axis)


@register("relax.split")
def convert_split(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    ios = attrs.raw("indices_or_sections")
    dims = type_dims(call.args[0])
    dim = dims[axis] if dims is not None else None
    # piece sizes from the result types when they are static (covers uneven sections)
    out_leaves = list(ctx.out_ty.fields) if hasattr(ctx.out_ty, "fields") else []
    piece = [type_dims(t) for t in out_leaves]
    if out_leaves and all(p is not None and isinstance(p[axis], int) for p in piece):
        sizes = [p[axis] for p in piece]
        if len(sizes) == 1:
            return [x]
        return list(ctx.node("Split", [x], n_out=len(sizes), axis=axis, flex={"split": sizes}))
    if isinstance(ios, tvm.tirx.IntImm) or isinstance(ios, int):
        n = int(ios)
        if isinstance(dim, int):
            if dim % n != 0:
                ctx.fail(f"split of {dim} into {n} sections is not even")
            sizes = [dim // n] * n
        else:
            if n == 1:
                return [x]
            outs = ctx.node("Split", [x], n_out=n, axis=axis, num_outputs=n)
            return list(outs)
    else:
        idx = [int(i) for i in prim_to_py(ios)]
        if isinstance(dim, int):
            bounds = [0] + [min(max(i, 0), dim) for i in idx] + [dim]
            sizes = [max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:])]
        else:
            # symbolic extent: one Slice per piece
            outs = []
            starts = [0] + idx
            for j, s in enumerate(starts):
                e = idx[j] if j < len(idx) else INT64_MAX
                outs.append(ctx.op("Slice", x, ctx.i64([s]), ctx.i64([e]), ctx.i64([axis])))
            return outs
    if len(sizes) == 1:
        return [x]
    outs = ctx.node("Split", [x], n_out=len(sizes), axis=axis, flex={"split": sizes})
    return list(outs)


# ----------------------------------------------------------------------------- slicing
def _int_list_tensor(ctx, exprs):
    vals = list(exprs)
    return ctx.shape_tensor(vals)


@register("relax.strided_slice")
def convert_strided_slice(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    attrs.assume_inbound  # semantics identical for in-bound indices (ONNX clamps like Relax)
    axes_t, begin_t, end_t = call.args[1], call.args[2], call.args[3]
    strides_t = call.args[4] if len(call.args) > 4 else None

    def fields(t):
        if isinstance(t, relax.Tuple):
            return list(t.fields)
        if isinstance(t, relax.ShapeExpr):
            return list(t.values)
        return None

    axes = fields(axes_t)
    begin = fields(begin_t)
    end = fields(end_t)
    strides = fields(strides_t) if strides_t is not None else None
    if axes is None or begin is None or end is None:
        ctx.fail("strided_slice with non-literal axes/begin/end")
    axes = [(int(a) + nd) % nd for a in axes]
    inputs = [x, _int_list_tensor(ctx, begin), _int_list_tensor(ctx, end), ctx.i64(axes)]
    if strides is not None and not all(isinstance(s, tvm.tirx.IntImm) and int(s) == 1 for s in strides):
        inputs.append(_int_list_tensor(ctx, strides))
    return ctx.op("Slice", *inputs)


@register("relax.dynamic_strided_slice")
def convert_dynamic_strided_slice(ctx, call, attrs, args):
    x = args[0]
    nd = rank_of(call.args[0])
    b = ctx.cast(args[1], TensorProto.INT64)
    e = ctx.cast(args[2], TensorProto.INT64)
    s = ctx.cast(args[3], TensorProto.INT64)
    n = static_dims(call.args[1])
    k = n[0] if n else nd
    return ctx.op("Slice", x, b, e, ctx.i64(list(range(k))), s)


@register("relax.flip")
def convert_flip(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    return ctx.op("Slice", args[0], ctx.i64([-1]), ctx.i64([INT64_MIN]), ctx.i64([axis]), ctx.i64([-1]))


# ----------------------------------------------------------------------------- gather / scatter
@register("relax.take")
def convert_take(ctx, call, attrs, args):
    x, idx = args[0], args[1]
    axis, mode = attrs.axis, str(attrs.mode)
    ids = raw_indices(call, ctx.exporter.producer_call)
    if ids is not None:  # the frontend's form of ONNX Gather: its wrap of negative ids is Gather's own
        nd = rank_of(call.args[0])
        return ctx.op("Gather", x, ctx.exporter.value_of(ids), axis=(int(axis) + nd) % nd)
    if axis is None:
        x = ctx.reshape(x, [-1])
        axis = 0
    nd = rank_of(call.args[0]) if attrs.axis is not None else 1
    axis = (int(axis) + nd) % nd
    if mode in ("clip", "wrap"):
        it = ctx.types[idx]
        n = ctx.cast(ctx.dim_of(x, axis), it)
        if mode == "clip":
            zero = ctx.typed_scalar(0, it)
            idx = ctx.op("Min", ctx.op("Max", idx, zero), ctx.op("Sub", n, ctx.typed_scalar(1, it)))
        else:
            idx = ctx.op("Mod", idx, n, fmod=0)
    elif mode not in ("fast", "raise"):
        if mode == "nan":
            ctx.fail("take mode 'nan' has no ONNX equivalent")
        ctx.fail(f"take mode '{mode}' has no ONNX equivalent")
    return ctx.op("Gather", x, idx, axis=axis)


@register("relax.gather_elements")
def convert_gather_elements(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    return ctx.op("GatherElements", args[0], args[1], axis=(int(attrs.axis) + nd) % nd)


@register("relax.gather_nd")
def convert_gather_nd(ctx, call, attrs, args):
    return ctx.op("GatherND", args[0], ctx.cast(args[1], TensorProto.INT64), batch_dims=int(attrs.batch_dims))


_SCATTER_RED = {"update": "none", "add": "add", "mul": "mul", "min": "min", "max": "max"}


def _scatter_reduction(ctx, red):
    red = str(red)
    if red not in _SCATTER_RED:
        ctx.fail(f"scatter reduction '{red}' has no ONNX equivalent")
    r = _SCATTER_RED[red]
    return None if r == "none" else r


@register("relax.scatter_elements")
def convert_scatter_elements(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    red = _scatter_reduction(ctx, attrs.reduction)
    return ctx.op("ScatterElements", args[0], args[1], args[2], axis=(int(attrs.axis) + nd) % nd,
                  reduction=red)


@register("relax.scatter_nd")
def convert_scatter_nd(ctx, call, attrs, args):
    red = _scatter_reduction(ctx, attrs.reduction)
    return ctx.op("ScatterND", args[0], ctx.cast(args[1], TensorProto.INT64), args[2], reduction=red)


# ----------------------------------------------------------------------------- tile / repeat
@register("relax.tile")
def convert_tile(ctx, call, attrs, args):
    x = args[0]
    reps = [int(r) for r in attrs.repeats]
    nd = rank_of(call.args[0])
    if len(reps) < nd:
        reps = [1] * (nd - len(reps)) + reps
    elif len(reps) > nd:
        x = ctx.unsqueeze(x, list(range(len(reps) - nd)))
    return ctx.op("Tile", x, ctx.i64(reps))


@register("relax.repeat")
def convert_repeat(ctx, call, attrs, args):
    x = args[0]
    r = int(attrs.repeats)
    axis = attrs.axis
    if axis is None:
        x = ctx.reshape(x, [-1])
        nd, axis = 1, 0
    else:
        nd = rank_of(call.args[0])
        axis = (int(axis) + nd) % nd
    u = ctx.unsqueeze(x, [axis + 1])
    reps = [1] * (nd + 1)
    reps[axis + 1] = r
    t = ctx.op("Tile", u, ctx.i64(reps))
    out = static_dims(ctx.out_ty)
    if out is not None:
        return ctx.reshape(t, out)
    shp = ctx.shape_of(x)
    parts = []
    if axis > 0:
        parts.append(ctx.op("Slice", shp, ctx.i64([0]), ctx.i64([axis]), ctx.i64([0])))
    parts.append(ctx.op("Mul", ctx.dim_of(x, axis), ctx.i64([r])))
    if axis + 1 < nd:
        parts.append(ctx.op("Slice", shp, ctx.i64([axis + 1]), ctx.i64([nd]), ctx.i64([0])))
    return ctx.op("Reshape", t, ctx.concat(parts, 0))


# ----------------------------------------------------------------------------- creation
def _fill(ctx, shape_tensor, value, elem):
    if elem in ONNX_TO_NP or elem in (TensorProto.BFLOAT16,):
        tv = helper.make_tensor("value", elem, [1], [value]) if elem in ONNX_TO_NP \
            else None
        if tv is not None:
            return ctx.op("ConstantOfShape", shape_tensor, value=tv)
    return ctx.op("Expand", ctx.typed_scalar(value, elem), shape_tensor)


def _shape_arg(ctx, expr):
    if isinstance(expr, relax.ShapeExpr):
        return ctx.shape_tensor(expr.values)
    return ctx.cast(ctx.exporter.value_of(expr), TensorProto.INT64)


@register("relax.zeros", "relax.ones")
def convert_zeros_ones(ctx, call, attrs, args):
    elem = onnx_dtype(attrs.dtype)
    v = 0 if ctx.relax_op == "relax.zeros" else 1
    if elem == TensorProto.BOOL:
        v = bool(v)
    return _fill(ctx, _shape_arg(ctx, call.args[0]), v, elem)


@register("relax.zeros_like", "relax.ones_like")
def convert_zeros_ones_like(ctx, call, attrs, args):
    dt = attrs.dtype
    elem = onnx_dtype(dt) if dt is not None and str(dt) not in ("", "void") else ctx.types[args[0]]
    v = 0 if ctx.relax_op == "relax.zeros_like" else 1
    if elem == TensorProto.BOOL:
        v = bool(v)
    return _fill(ctx, ctx.shape_of(args[0]), v, elem)


@register("relax.full")
def convert_full(ctx, call, attrs, args):
    dt = attrs.dtype
    fill = args[1]
    elem = onnx_dtype(dt) if dt is not None and str(dt) not in ("", "void") else ctx.types[fill]
    return ctx.op("Expand", ctx.cast(fill, elem), _shape_arg(ctx, call.args[0]))


@register("relax.full_like")
def convert_full_like(ctx, call, attrs, args):
    dt = attrs.dtype
    x, fill = args[0], args[1]
    elem = onnx_dtype(dt) if dt is not None and str(dt) not in ("", "void") else ctx.types[x]
    return ctx.op("Expand", ctx.cast(fill, elem), ctx.shape_of(x))


def _k_value(ctx, e):
    v = prim_to_py(e)
    if isinstance(v, int):
        return v
    ctx.fail("symbolic diagonal offset")


@register("relax.eye_like")
def convert_eye_like(ctx, call, attrs, args):
    dt = attrs.dtype
    x = args[0]
    elem = onnx_dtype(dt) if dt is not None and str(dt) not in ("", "void") else ctx.types[x]
    k = _k_value(ctx, call.args[1]) if len(call.args) > 1 else 0
    return ctx.op("EyeLike", x, k=k, dtype=elem)


@register("relax.eye")
def convert_eye(ctx, call, attrs, args):
    elem = onnx_dtype(attrs.dtype)
    n = ctx.prim_expr(call.args[0])
    m = ctx.prim_expr(call.args[1])
    k = _k_value(ctx, call.args[2]) if len(call.args) > 2 else 0
    z = ctx.op("ConstantOfShape", ctx.concat([n, m], 0), value=helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0]))
    e = ctx.op("EyeLike", z, k=k, dtype=elem)
    return e


@register("relax.arange")
def convert_arange(ctx, call, attrs, args):
    dt = attrs.dtype
    elem = onnx_dtype(dt) if dt is not None and str(dt) not in ("", "void") else onnx_dtype(ctx.out_ty.dtype)
    work = elem if elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT16, TensorProto.INT32,
                            TensorProto.INT64) else (TensorProto.FLOAT if elem in FLOAT_TYPES else TensorProto.INT64)
    start, end, step = call.args[0], call.args[1], call.args[2]
    s = ctx.prim_scalar(start, work)
    e = ctx.prim_scalar(end, work)
    d = ctx.prim_scalar(step, work)
    r = ctx.op("Range", s, e, d)
    return ctx.cast(r, elem)


@register("relax.tril", "relax.triu")
def convert_trilu(ctx, call, attrs, args):
    k = call.args[1] if len(call.args) > 1 else 0
    kt = ctx.prim_scalar(k, TensorProto.INT64)
    return ctx.op("Trilu", args[0], kt, upper=int(ctx.relax_op == "relax.triu"))


@register("relax.one_hot")
def convert_one_hot(ctx, call, attrs, args):
    idx = args[0]
    on, off = call.args[1], call.args[2]
    elem = onnx_dtype(ctx.out_ty.dtype)
    depth = int(attrs.depth)
    nd_out = rank_of(ctx.out_ty)
    axis = int(attrs.axis)
    values = ctx.concat([ctx.unsqueeze(ctx.prim_scalar(off, elem), [0]),
                         ctx.unsqueeze(ctx.prim_scalar(on, elem), [0])], 0) \
        if not (isinstance(on, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) and isinstance(off, (tvm.tirx.IntImm, tvm.tirx.FloatImm))) \
        else _values_const(ctx, prim_to_py(off), prim_to_py(on), elem)
    if axis < 0:
        axis += nd_out
    return ctx.op("OneHot", idx, ctx.i64(depth), values, axis=axis)


def _values_const(ctx, off, on, elem):
    if elem in ONNX_TO_NP:
        return ctx.const(np.array([off, on], dtype=ONNX_TO_NP[elem]), elem)
    return ctx.cast(ctx.const(np.array([off, on], dtype=np.float32), TensorProto.FLOAT), elem)


# ----------------------------------------------------------------------------- shapes
@register("relax.shape_of")
def convert_shape_of(ctx, call, attrs, args):
    return ctx.shape_of(args[0])


@register("relax.tensor_to_shape")
def convert_tensor_to_shape(ctx, call, attrs, args):
    return ctx.cast(args[0], TensorProto.INT64)


@register("relax.shape_to_tensor")
def convert_shape_to_tensor(ctx, call, attrs, args):
    return args[0]


@register("relax.size")
def convert_size(ctx, call, attrs, args):
    r = ctx.op("Size", args[0])
    return ctx.cast(r, onnx_dtype(ctx.out_ty.dtype))


@register("relax.nonzero")
def convert_nonzero(ctx, call, attrs, args):
    return ctx.op("NonZero", args[0])


@register("relax.layout_transform")
def convert_layout_transform(ctx, call, attrs, args):
    attrs.consume_all()
    ctx.fail("layout_transform (index maps) has no ONNX mapping")
