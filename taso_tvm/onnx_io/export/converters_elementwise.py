"""Element-wise Relax operators (unary, binary, comparison, logical, bitwise, casts)."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .tensor_types import FLOAT_TYPES, ONNX_TO_NP, SIGNED_TO_UNSIGNED, onnx_dtype, prim_to_py
from .registry import register

# ----------------------------------------------------------------------------- unary
_UNARY = {
    "relax.abs": "Abs",
    "relax.acos": "Acos",
    "relax.acosh": "Acosh",
    "relax.asin": "Asin",
    "relax.asinh": "Asinh",
    "relax.atan": "Atan",
    "relax.atanh": "Atanh",
    "relax.cos": "Cos",
    "relax.cosh": "Cosh",
    "relax.exp": "Exp",
    "relax.log": "Log",
    "relax.negative": "Neg",
    "relax.sigmoid": "Sigmoid",
    "relax.sign": "Sign",
    "relax.sin": "Sin",
    "relax.sinh": "Sinh",
    "relax.sqrt": "Sqrt",
    "relax.tan": "Tan",
    "relax.tanh": "Tanh",
    "relax.erf": "Erf",
    "relax.isnan": "IsNaN",
    "relax.isinf": "IsInf",
    "relax.nn.relu": "Relu",
}
# rounding ops are the identity on integers
_ROUNDING = {"relax.ceil": "Ceil", "relax.floor": "Floor", "relax.round": "Round"}


def _unary(ctx, call, attrs, args):
    return ctx.op(_UNARY[ctx.relax_op], args[0])


for _name in _UNARY:
    register(_name)(_unary)


@register(*_ROUNDING)
def convert_rounding(ctx, call, attrs, args):
    x = args[0]
    if ctx.types[x] not in FLOAT_TYPES:
        return x
    return ctx.op(_ROUNDING[ctx.relax_op], x)


@register("relax.trunc")
def convert_trunc(ctx, call, attrs, args):
    x = args[0]
    if ctx.types[x] not in FLOAT_TYPES:
        return x
    zero = ctx.typed_scalar(0, ctx.types[x])
    return ctx.op("Where", ctx.op("Less", x, zero), ctx.op("Ceil", x), ctx.op("Floor", x))


@register("relax.rsqrt")
def convert_rsqrt(ctx, call, attrs, args):
    return ctx.op("Reciprocal", ctx.op("Sqrt", args[0]))


@register("relax.square")
def convert_square(ctx, call, attrs, args):
    return ctx.op("Mul", args[0], args[0])


@register("relax.logical_not")
def convert_logical_not(ctx, call, attrs, args):
    return ctx.op("Not", args[0])


@register("relax.bitwise_not")
def convert_bitwise_not(ctx, call, attrs, args):
    x = args[0]
    if ctx.types[x] == TensorProto.BOOL:
        return ctx.op("Not", x)
    return ctx.op("BitwiseNot", x)


@register("relax.isfinite")
def convert_isfinite(ctx, call, attrs, args):
    x = args[0]
    if ctx.types[x] not in FLOAT_TYPES:
        t = ctx.const(np.array(True), TensorProto.BOOL)
        return ctx.op("Expand", t, ctx.shape_of(x))
    bad = ctx.op("Or", ctx.op("IsInf", x), ctx.op("IsNaN", x))
    return ctx.op("Not", bad)


@register("relax.astype")
def convert_astype(ctx, call, attrs, args):
    to = onnx_dtype(attrs.dtype)
    x = args[0]
    if ctx.types[x] == to:
        return x
    return ctx.op("Cast", x, to=to)


@register("relax.wrap_param")
def convert_wrap_param(ctx, call, attrs, args):
    return ctx.cast(args[0], onnx_dtype(attrs.dtype))


@register("relax.clip")
def convert_clip(ctx, call, attrs, args):
    x = args[0]
    elem = ctx.types[x]
    lo, hi = prim_to_py(call.args[1]), prim_to_py(call.args[2])
    if elem in ONNX_TO_NP and elem != TensorProto.BOOL:
        npdt = ONNX_TO_NP[elem]
        if np.issubdtype(npdt, np.integer):
            info = np.iinfo(npdt)
            lo = None if lo is None else int(min(max(lo, info.min), info.max))
            hi = None if hi is None else int(min(max(hi, info.min), info.max))
    lo_t = ctx.typed_scalar(lo, elem) if isinstance(lo, (int, float)) else ctx.prim_scalar(call.args[1], elem)
    hi_t = ctx.typed_scalar(hi, elem) if isinstance(hi, (int, float)) else ctx.prim_scalar(call.args[2], elem)
    return ctx.op("Clip", x, lo_t, hi_t)


# ----------------------------------------------------------------------------- binary
_BINARY = {
    "relax.add": "Add",
    "relax.subtract": "Sub",
    "relax.multiply": "Mul",
    "relax.divide": "Div",
    "relax.power": "Pow",
    "relax.maximum": "Max",
    "relax.minimum": "Min",
    "relax.equal": "Equal",
    "relax.less": "Less",
    "relax.less_equal": "LessOrEqual",
    "relax.greater": "Greater",
    "relax.greater_equal": "GreaterOrEqual",
    "relax.logical_and": "And",
    "relax.logical_or": "Or",
    "relax.logical_xor": "Xor",
    "relax.bitwise_and": "BitwiseAnd",
    "relax.bitwise_or": "BitwiseOr",
    "relax.bitwise_xor": "BitwiseXor",
}
_BOOL_BITWISE = {"BitwiseAnd": "And", "BitwiseOr": "Or", "BitwiseXor": "Xor"}
_COMPARE = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
_ARITH = {"Add", "Sub", "Mul", "Div", "Max", "Min"}


def _binary(ctx, call, attrs, args):
    op = _BINARY[ctx.relax_op]
    a, b = args[0], args[1]
    ta = ctx.types[a]
    if ta == TensorProto.BOOL:
        if op in _BOOL_BITWISE:
            op = _BOOL_BITWISE[op]
        elif op in _COMPARE - {"Equal"} or op in _ARITH:
            # ONNX has no bool arithmetic / ordering: compute on uint8
            a8, b8 = ctx.cast(a, TensorProto.UINT8), ctx.cast(b, TensorProto.UINT8)
            r = ctx.op(op, a8, b8)
            return r if op in _COMPARE else ctx.cast(r, TensorProto.BOOL)
    if ctx.relax_op == "relax.add":
        fused = _try_fuse_add(ctx, call, a, b)
        if fused is not None:
            return fused
    if ctx.relax_op == "relax.divide":
        from .converters_norm_attention import try_lrn

        lrn = try_lrn(ctx, call, a)
        if lrn is not None:
            return lrn
    return ctx.op(op, a, b)


for _name in _BINARY:
    register(_name)(_binary)


@register("relax.not_equal")
def convert_not_equal(ctx, call, attrs, args):
    return ctx.op("Not", ctx.op("Equal", args[0], args[1]))


@register("relax.mod")
def convert_mod(ctx, call, attrs, args):
    # truncated modulo (C fmod): sign of the dividend
    return ctx.op("Mod", args[0], args[1], fmod=1)


@register("relax.floor_mod")
def convert_floor_mod(ctx, call, attrs, args):
    a, b = args[0], args[1]
    t = ctx.types[a]
    if t in FLOAT_TYPES:
        q = ctx.op("Floor", ctx.op("Div", a, b))
        return ctx.op("Sub", a, ctx.op("Mul", b, q))
    return ctx.op("Mod", a, b, fmod=0)


@register("relax.floor_divide")
def convert_floor_divide(ctx, call, attrs, args):
    a, b = args[0], args[1]
    t = ctx.types[a]
    if t in FLOAT_TYPES:
        return ctx.op("Floor", ctx.op("Div", a, b))
    if t in SIGNED_TO_UNSIGNED:
        m = ctx.op("Mod", a, b, fmod=0)
        return ctx.op("Div", ctx.op("Sub", a, m), b)
    return ctx.op("Div", a, b)


@register("relax.left_shift", "relax.right_shift")
def convert_shift(ctx, call, attrs, args):
    a, b = args[0], args[1]
    t = ctx.types[a]
    direction = "LEFT" if ctx.relax_op == "relax.left_shift" else "RIGHT"
    if t in SIGNED_TO_UNSIGNED:
        u = SIGNED_TO_UNSIGNED[t]
        if direction == "LEFT":
            r = ctx.op("BitShift", ctx.cast(a, u), ctx.cast(b, u), direction="LEFT")
            return ctx.cast(r, t)
        if t in (TensorProto.INT8, TensorProto.INT16):
            # narrow types: shift in int32 (Where has no int8/int16 kernels in ONNX Runtime)
            w = ctx.cast(a, TensorProto.INT32)
            wb = ctx.cast(b, TensorProto.INT32)
            return ctx.cast(_arith_shift_right(ctx, w, wb, TensorProto.INT32, TensorProto.UINT32), t)
        return _arith_shift_right(ctx, a, b, t, u)
    return ctx.op("BitShift", a, b, direction=direction)


def _arith_shift_right(ctx, a, b, t, u):
    """Arithmetic right shift of signed ``a`` (type t, unsigned twin u): logical shift of
    ``a`` when a >= 0, else ~(~a >> b) with ~a = -1 - a."""
    minus1 = ctx.typed_scalar(-1, t)
    ub = ctx.cast(b, u)
    pos = ctx.cast(ctx.op("BitShift", ctx.cast(a, u), ub, direction="RIGHT"), t)
    inv = ctx.cast(ctx.op("Sub", minus1, a), u)
    neg = ctx.op("Sub", minus1, ctx.cast(ctx.op("BitShift", inv, ub, direction="RIGHT"), t))
    return ctx.op("Where", ctx.op("Less", a, ctx.typed_scalar(0, t)), neg, pos)


@register("relax.where")
def convert_where(ctx, call, attrs, args):
    return ctx.op("Where", args[0], args[1], args[2])


@register("relax.atan2")
def convert_atan2(ctx, call, attrs, args):
    # atan2(y, x) without an ONNX Atan2: atan(y/x) corrected by quadrant
    y, x = args[0], args[1]
    t = ctx.types[y]
    zero = ctx.typed_scalar(0, t)
    pi = ctx.typed_scalar(math.pi, t)
    base = ctx.op("Atan", ctx.op("Div", y, x))
    x_neg = ctx.op("Less", x, zero)
    y_neg = ctx.op("Less", y, zero)
    adj = ctx.op("Where", y_neg, ctx.op("Neg", pi), pi)
    corrected = ctx.op("Where", x_neg, ctx.op("Add", base, adj), base)
    half = ctx.typed_scalar(math.pi / 2, t)
    x_zero = ctx.op("Equal", x, zero)
    y_pos = ctx.op("Greater", y, zero)
    at_zero = ctx.op("Where", y_pos, half, ctx.op("Where", y_neg, ctx.op("Neg", half), zero))
    return ctx.op("Where", x_zero, at_zero, corrected)


# ----------------------------------------------------------------------------- activations
@register("relax.nn.leakyrelu")
def convert_leakyrelu(ctx, call, attrs, args):
    return ctx.op("LeakyRelu", args[0], alpha=float(attrs.alpha))


@register("relax.nn.relu6")
def convert_relu6(ctx, call, attrs, args):
    x = args[0]
    t = ctx.types[x]
    return ctx.op("Clip", x, ctx.typed_scalar(0, t), ctx.typed_scalar(6, t))


@register("relax.nn.selu")
def convert_selu(ctx, call, attrs, args):
    return ctx.op("Selu", args[0], alpha=1.6732632423543772848170429916717,
                  gamma=1.0507009873554804934193349852946)


@register("relax.nn.silu")
def convert_silu(ctx, call, attrs, args):
    x = args[0]
    return ctx.op("Mul", x, ctx.op("Sigmoid", x))


def _gelu_decomposed(ctx, x, tanh: bool):
    t = ctx.types[x]
    half = ctx.typed_scalar(0.5, t)
    one = ctx.typed_scalar(1.0, t)
    if tanh:
        c = ctx.typed_scalar(math.sqrt(2.0 / math.pi), t)
        k = ctx.typed_scalar(0.044715, t)
        inner = ctx.op("Mul", ctx.op("Mul", c, x),
                       ctx.op("Add", one, ctx.op("Mul", k, ctx.op("Mul", x, x))))
        s = ctx.op("Add", one, ctx.op("Tanh", inner))
    else:
        r = ctx.typed_scalar(1.0 / math.sqrt(2.0), t)
        s = ctx.op("Add", one, ctx.op("Erf", ctx.op("Mul", x, r)))
    return ctx.op("Mul", ctx.op("Mul", half, x), s)


@register("relax.nn.gelu", "relax.nn.gelu_tanh")
def convert_gelu(ctx, call, attrs, args):
    tanh = ctx.relax_op == "relax.nn.gelu_tanh"
    x = args[0]
    if ctx.target_opset is not None and ctx.target_opset < 20:
        return _gelu_decomposed(ctx, x, tanh)
    if tanh:
        return ctx.op("Gelu", x, approximate="tanh")
    return ctx.op("Gelu", x)


@register("relax.nn.softplus")
def convert_softplus(ctx, call, attrs, args):
    x = args[0]
    t = ctx.types[x]
    beta = float(attrs.beta)
    threshold = float(attrs.threshold)
    bx = x if beta == 1.0 else ctx.op("Mul", x, ctx.typed_scalar(beta, t))
    sp = ctx.op("Softplus", bx)
    if beta != 1.0:
        sp = ctx.op("Div", sp, ctx.typed_scalar(beta, t))
    over = ctx.op("Greater", bx, ctx.typed_scalar(threshold, t))
    return ctx.op("Where", over, x, sp)


# ----------------------------------------------------------------------------- fusion of add
def _try_fuse_add(ctx, call, a, b):
    """add(conv(x, w), bias) -> Conv(x, w, bias); add(matmul(x, w), c) -> Gemm(x, w, c).

    Only when the producer's result has no other use; the producer's own node becomes dead
    and is removed by the final dead-code elimination.
    """
    exp = ctx.exporter
    lhs, rhs = call.args[0], call.args[1]
    for prod_var, other, other_name in ((lhs, rhs, b), (rhs, lhs, a)):
        pc = exp.producer_call(prod_var)
        if pc is None or not exp.is_single_use(prod_var):
            continue
        name = pc.op.name if hasattr(pc.op, "name") else ""
        if name in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d",
                    "relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose"):
            from .converters_nn import fuse_conv_bias

            r = fuse_conv_bias(ctx, pc, other, other_name)
            if r is not None:
                return r
        if name == "relax.matmul":
            from .converters_nn import fuse_gemm

            r = fuse_gemm(ctx, pc, other, other_name)
            if r is not None:
                return r
    return None
