"""Normalization and attention Relax operators: batch, layer, group, instance and RMS norms, softmax and
log-softmax, attention (with and without bias), and the local response normalization (LRN) pattern."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .tensor_types import FLOAT_TYPES, rank_of, static_dims
from .registry import register


# ----------------------------------------------------------------------------- normalization
def _ones_like_channels(ctx, ref_name, value, elem):
    """1-D tensor of ``value`` shaped like ``ref_name`` (a 1-D stats tensor)."""
    return ctx.op("Expand", ctx.typed_scalar(value, elem), ctx.shape_of(ref_name))


@register("relax.nn.batch_norm")
def convert_batch_norm(ctx, call, attrs, args):
    x, gamma, beta, mean, var = args[0], args[1], args[2], args[3], args[4]
    nd = rank_of(call.args[0])
    axis = int(attrs.axis)
    if axis < 0:
        axis += nd
    eps = float(attrs.epsilon)
    center, scale = bool(attrs.center), bool(attrs.scale)
    momentum = float(attrs.momentum)
    training = bool(attrs.training)
    if not scale:
        gamma = _ones_like_channels(ctx, mean, 1.0, ctx.types[gamma])
    if not center:
        beta = _ones_like_channels(ctx, mean, 0.0, ctx.types[beta])
    perm = None
    if axis != 1:
        perm = [0, axis] + [i for i in range(1, nd) if i != axis]
        x = ctx.transpose(x, perm)
    # Relax: new = (1 - m) * running + m * batch; ONNX: new = m' * running + (1 - m') * batch
    kw = dict(epsilon=eps, momentum=1.0 - momentum)
    if training:
        y, rm, rv = ctx.node("BatchNormalization", [x, gamma, beta, mean, var], n_out=3,
                             training_mode=1, **kw)
    else:
        y = ctx.op("BatchNormalization", x, gamma, beta, mean, var, **kw)
        rm, rv = mean, var
    if perm is not None:
        inv = [perm.index(i) for i in range(nd)]
        y = ctx.transpose(y, inv)
    return [y, rm, rv]


def _norm_axes(axes, nd):
    return sorted((int(a) + nd) % nd for a in axes)


def _unsqueeze_except(ctx, t, axes, nd):
    """Reshape a tensor whose dims are x.shape[axes] so that it broadcasts against x."""
    other = [i for i in range(nd) if i not in axes]
    if not other or other == list(range(len(other))):
        return t  # leading dims only: numpy broadcasting handles it
    return ctx.unsqueeze(t, other)


def _moments_normalize(ctx, x, axes, eps):
    t = ctx.types[x]
    mean = ctx.reduce("ReduceMean", x, axes, True)
    d = ctx.op("Sub", x, mean)
    # Pow(d, 2), as exporters write it before opset 17: the form ONNX Runtime's LayerNormalization fusion reads
    var = ctx.reduce("ReduceMean", ctx.op("Pow", d, ctx.typed_scalar(2.0, t)), axes, True)
    return ctx.op("Div", d, ctx.op("Sqrt", ctx.op("Add", var, ctx.typed_scalar(eps, t))))


@register("relax.nn.layer_norm")
def convert_layer_norm(ctx, call, attrs, args):
    x, gamma, beta = args[0], args[1], args[2]
    nd = rank_of(call.args[0])
    axes = _norm_axes(attrs.axes, nd)
    eps = float(attrs.epsilon)
    center, scale = bool(attrs.center), bool(attrs.scale)
    suffix = axes == list(range(axes[0], nd)) if axes else False
    if suffix and (ctx.target_opset is None or ctx.target_opset >= 17):
        if not scale:
            gamma = ctx.op("Expand", ctx.typed_scalar(1.0, ctx.types[x]),
                           ctx.op("Slice", ctx.shape_of(x), ctx.i64([axes[0]]), ctx.i64([nd]), ctx.i64([0])))
        inputs = [x, gamma] + ([beta] if center else [])
        return ctx.op("LayerNormalization", *inputs, axis=int(axes[0]), epsilon=eps)
    y = _moments_normalize(ctx, x, axes, eps)
    if scale:
        y = ctx.op("Mul", y, _unsqueeze_except(ctx, gamma, axes, nd))
    if center:
        y = ctx.op("Add", y, _unsqueeze_except(ctx, beta, axes, nd))
    return y


@register("relax.nn.group_norm")
def convert_group_norm(ctx, call, attrs, args):
    x, gamma, beta = args[0], args[1], args[2]
    nd = rank_of(call.args[0])
    G = int(attrs.num_groups)
    ch = (int(attrs.channel_axis) + nd) % nd
    axes = _norm_axes(attrs.axes, nd)
    eps = float(attrs.epsilon)
    center, scale = bool(attrs.center), bool(attrs.scale)
    if ch != 1 or axes != list(range(2, nd)):
        ctx.fail("group_norm is only exported for channel_axis=1 and spatial reduction axes")
    xr = ctx.op("Reshape", x, ctx.i64([0, G, -1]))
    y = _moments_normalize(ctx, xr, [2], eps)
    y = ctx.op("Reshape", y, ctx.shape_of(x))
    bshape = list(range(1, nd - 1))
    if scale:
        y = ctx.op("Mul", y, ctx.unsqueeze(gamma, bshape) if bshape else gamma)
    if center:
        y = ctx.op("Add", y, ctx.unsqueeze(beta, bshape) if bshape else beta)
    return y


@register("relax.nn.instance_norm")
def convert_instance_norm(ctx, call, attrs, args):
    x, gamma, beta = args[0], args[1], args[2]
    nd = rank_of(call.args[0])
    ch = (int(attrs.channel_axis) + nd) % nd
    axes = _norm_axes(attrs.axes, nd)
    eps = float(attrs.epsilon)
    center, scale = bool(attrs.center), bool(attrs.scale)
    if ch == 1 and axes == list(range(2, nd)):
        t = ctx.types[x]
        C = ctx.dim_of(x, 1)
        if not scale:
            gamma = ctx.op("Expand", ctx.typed_scalar(1.0, t), C)
        if not center:
            beta = ctx.op("Expand", ctx.typed_scalar(0.0, t), C)
        return ctx.op("InstanceNormalization", x, gamma, beta, epsilon=eps)
    y = _moments_normalize(ctx, x, axes, eps)
    bshape = [i for i in range(nd) if i != ch]
    if scale:
        y = ctx.op("Mul", y, ctx.unsqueeze(gamma, bshape))
    if center:
        y = ctx.op("Add", y, ctx.unsqueeze(beta, bshape))
    return y


@register("relax.nn.rms_norm")
def convert_rms_norm(ctx, call, attrs, args):
    x, w = args[0], args[1]
    nd = rank_of(call.args[0])
    axes = _norm_axes(attrs.axes, nd)
    eps = float(attrs.epsilon)
    t = ctx.types[x]
    if axes == list(range(axes[0], nd)) and ctx.target_opset is not None and ctx.target_opset >= 23:
        return ctx.op("RMSNormalization", x, w, axis=int(axes[0]), epsilon=eps)
    # Pow(x, 2), ReduceMean, Add, Sqrt, Div, Mul: the form ONNX Runtime fuses into SimplifiedLayerNormalization when
    # it loads the model (that operator's schema is ONNX Runtime's own, in the default domain: onnx.checker refuses it)
    ms = ctx.reduce("ReduceMean", ctx.op("Pow", x, ctx.typed_scalar(2.0, t)), axes, True)
    y = ctx.op("Div", x, ctx.op("Sqrt", ctx.op("Add", ms, ctx.typed_scalar(eps, t))))
    return ctx.op("Mul", y, _unsqueeze_except(ctx, w, axes, nd))


@register("relax.nn.softmax", "relax.nn.log_softmax")
def convert_softmax(ctx, call, attrs, args):
    nd = rank_of(call.args[0])
    axis = int(attrs.axis)
    if nd > 0 and axis < 0:
        axis += nd
    op = "Softmax" if ctx.relax_op == "relax.nn.softmax" else "LogSoftmax"
    # before opset 13 Softmax coerced the input to 2-D: same result only for the last axis
    lo = None if axis == nd - 1 else 13
    return ctx.op(op, args[0], axis=axis, lo=lo)


@register("relax.nn.attention", "relax.nn.attention_bias")
def convert_attention(ctx, call, attrs, args):
    q, k, v = args[0], args[1], args[2]
    bias = args[3] if ctx.relax_op == "relax.nn.attention_bias" and len(args) > 3 else None
    scale = attrs.scale
    causal = attrs.causal_mask
    if attrs.window_size is not None:
        ctx.fail("sliding-window attention has no ONNX equivalent")
    t = ctx.types[q]
    qt = ctx.transpose(q, [0, 2, 1, 3])
    kt = ctx.transpose(k, [0, 2, 3, 1])
    vt = ctx.transpose(v, [0, 2, 1, 3])
    p = ctx.op("MatMul", qt, kt)
    if scale is not None:
        p = ctx.op("Mul", p, ctx.typed_scalar(float(scale), t))
    else:
        qd = static_dims(call.args[0])
        if qd is not None:
            p = ctx.op("Div", p, ctx.typed_scalar(math.sqrt(qd[3]), t))
        else:
            hd = ctx.cast(ctx.dim_of(q, 3), t)
            p = ctx.op("Div", p, ctx.op("Sqrt", hd))
    if bias is not None:
        p = ctx.op("Add", p, bias)
    if causal is not None:
        qd, kd = static_dims(call.args[0]), static_dims(call.args[1])
        if str(causal) == "TopLeft":
            off = 0
        elif str(causal) == "BottomRight":
            if qd is None or kd is None:
                ctx.fail("BottomRight causal mask needs static sequence lengths")
            off = abs(qd[1] - kd[1])
        else:
            ctx.fail(f"causal mask '{causal}' has no ONNX equivalent")
        ones = ctx.op("ConstantOfShape", ctx.op("Slice", ctx.shape_of(p), ctx.i64([2]), ctx.i64([4]), ctx.i64([0])),
                      value=_tensor_attr(1, TensorProto.INT32))
        mask = ctx.cast(ctx.op("Trilu", ones, ctx.i64(off), upper=0), TensorProto.BOOL)
        p = ctx.op("Where", mask, p, ctx.typed_scalar(-np.inf, t))
    s = ctx.op("Softmax", p, axis=-1)
    o = ctx.op("MatMul", s, vt)
    return ctx.transpose(o, [0, 2, 1, 3])


def _tensor_attr(value, elem):
    from onnx import helper

    return helper.make_tensor("value", elem, [1], [value])


def _scalar_const(expr):
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        a = expr.value.numpy()
        if a.size == 1:
            return float(a.reshape(()))
    return None


def try_lrn(ctx, div_call, x_name):
    """divide(x, power(add(multiply(squeeze(avg_pool3d(expand_dims(x*x, 1))), alpha), bias), beta))
    -- the ONNX frontend's decomposition of LRN -- back to LRN."""
    exp = ctx.exporter
    x = div_call.args[0]
    pw = exp.single_use_call(div_call.args[1], "relax.power")
    if pw is None or rank_of(x) != 4 or ctx.types[x_name] not in FLOAT_TYPES:
        return None
    beta = _scalar_const(pw.args[1])
    ad = exp.single_use_call(pw.args[0], "relax.add")
    if beta is None or ad is None:
        return None
    bias = _scalar_const(ad.args[1])
    mu = exp.single_use_call(ad.args[0], "relax.multiply")
    if bias is None or mu is None:
        return None
    alpha = _scalar_const(mu.args[1])
    sq = exp.single_use_call(mu.args[0], "relax.squeeze")
    if alpha is None or sq is None or [int(a) for a in (sq.attrs.axis or [])] != [1]:
        return None
    ap = exp.single_use_call(sq.args[0], "relax.nn.avg_pool3d")
    if ap is None:
        return None
    a = ap.attrs
    size = int(a.pool_size[0])
    p0 = (size - 1) // 2
    if ([int(k) for k in a.pool_size] != [size, 1, 1] or [int(k) for k in a.strides] != [1, 1, 1]
            or [int(k) for k in a.dilation] != [1, 1, 1]
            or [int(k) for k in a.padding] != [p0, 0, 0, size - 1 - p0, 0, 0]
            or bool(a.ceil_mode) or not bool(a.count_include_pad) or str(a.layout) != "NCDHW"
            or str(a.out_layout) != "NCDHW"):
        return None
    ed = exp.single_use_call(ap.args[0], "relax.expand_dims")
    if ed is None or [int(k) for k in ed.attrs.axis] != [1]:
        return None
    sqr = exp.single_use_call(ed.args[0], "relax.multiply")
    if sqr is None or not (sqr.args[0].same_as(x) and sqr.args[1].same_as(x)):
        return None
    # LRN: x / (bias + alpha / size * sum)^beta, and alpha / size * sum == alpha * avg
    return ctx.op("LRN", x_name, size=size, alpha=float(alpha), beta=float(beta), bias=float(bias))
