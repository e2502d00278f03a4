"""Neural-network Relax operators: convolutions (with bias fusion), matmul / gemm / einsum, pools, prelu, dropout,
padding, pixel shuffle (normalizations and attention: `converters_norm_attention`)."""
from __future__ import annotations


from onnx import TensorProto

from .context import SinceAttr
from .tensor_types import FLOAT_TYPES, dtype_of, onnx_dtype, rank_of, static_dims, type_dims
from .registry import register

_CONV = {
    "relax.nn.conv1d": (1, False),
    "relax.nn.conv2d": (2, False),
    "relax.nn.conv3d": (3, False),
    "relax.nn.conv1d_transpose": (1, True),
    "relax.nn.conv2d_transpose": (2, True),
    "relax.nn.conv3d_transpose": (3, True),
}


def _spatial(nd):
    return "DHW"[3 - nd:]


def layout_transpose(ctx, x, src: str, dst: str):
    """Transpose ``x`` from layout ``src`` to layout ``dst`` (same letters)."""
    if src == dst:
        return x
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        ctx.fail(f"layout {src} cannot be converted to {dst}")
    return ctx.transpose(x, [src.index(c) for c in dst])


def _norm_pads(ctx, pads, nd):
    pads = [int(p) for p in pads]
    if len(pads) == 1:
        return pads * (2 * nd)
    if len(pads) == nd:
        return pads + pads
    if len(pads) == 2 * nd:
        return pads
    ctx.fail(f"padding {pads} does not match {nd} spatial dims")


def _emit_conv(ctx, call, attrs, x, w, bias=None):
    nd, transposed = _CONV[call.op.name]
    sp = _spatial(nd)
    canon_data = "NC" + sp
    canon_kernel = ("IO" if transposed else "OI") + sp
    data_layout = attrs.data_layout
    kernel_layout = attrs.kernel_layout
    out_layout = attrs.out_layout
    x = layout_transpose(ctx, x, data_layout, canon_data)
    w = layout_transpose(ctx, w, kernel_layout, canon_kernel)
    out_dtype = attrs.out_dtype
    if out_dtype is not None and str(out_dtype) not in ("", "void"):
        to = onnx_dtype(out_dtype)
        if to != ctx.types[x]:
            x = ctx.cast(x, to)
            w = ctx.cast(w, to)
    if ctx.types[x] not in FLOAT_TYPES:
        ctx.fail(f"convolution on {dtype_of(call.args[0])} has no ONNX equivalent")
    kw = dict(
        strides=[int(s) for s in attrs.strides],
        pads=_norm_pads(ctx, attrs.padding, nd),
        dilations=[int(d) for d in attrs.dilation],
        group=int(attrs.groups),
    )
    wdims = static_dims(call.args[1])
    if wdims is not None:
        # kernel_shape in canonical order
        perm = [kernel_layout.index(c) for c in canon_kernel]
        kdims = [wdims[p] for p in perm]
        kw["kernel_shape"] = kdims[2:]
    if transposed:
        kw["output_padding"] = [int(p) for p in attrs.output_padding]
    inputs = [x, w] + ([bias] if bias is not None else [])
    y = ctx.op("ConvTranspose" if transposed else "Conv", *inputs, **kw)
    return layout_transpose(ctx, y, canon_data, out_layout)


@register(*_CONV)
def convert_conv(ctx, call, attrs, args):
    return _emit_conv(ctx, call, attrs, args[0], args[1])


def fuse_conv_bias(ctx, conv_call, bias_expr, bias_name):
    """Conv + add(bias broadcast along channels) -> Conv with bias, or None."""
    from .context import AttrView

    exp = ctx.exporter
    nd, transposed = _CONV[conv_call.op.name]
    a = conv_call.attrs
    canon = "NC" + _spatial(nd)
    if str(a.out_layout) != canon:
        return None
    if a.out_dtype is not None and str(a.out_dtype) not in ("", "void", dtype_of(conv_call)):
        return None
    out_dims = type_dims(conv_call)
    bdims = type_dims(bias_expr)
    if out_dims is None or bdims is None or dtype_of(bias_expr) != dtype_of(conv_call):
        return None
    C = out_dims[1]
    if not isinstance(C, int):
        return None
    r = len(out_dims)
    if len(bdims) == r:
        ok = bdims[0] == 1 and bdims[1] == C and all(d == 1 for d in bdims[2:])
    elif len(bdims) == r - 1:
        ok = bdims[0] == C and all(d == 1 for d in bdims[1:])
    else:
        ok = False
    if not ok:
        return None
    # find a 1-D bias
    import tvm

    if isinstance(bias_expr, tvm.ir.GenericConst):
        b1 = ctx.const(bias_expr.value.numpy().reshape(C), ctx.types[bias_name])
    else:
        pc = exp.producer_call(bias_expr)
        src = None
        if pc is not None and getattr(pc.op, "name", None) in ("relax.reshape", "relax.expand_dims") \
                and static_dims(pc.args[0]) == [C]:
            src = exp.value_of(pc.args[0])
        b1 = src if src is not None else ctx.reshape(bias_name, [C])
    x = exp.value_of(conv_call.args[0])
    w = exp.value_of(conv_call.args[1])
    av = AttrView(conv_call.attrs)
    return _emit_conv(ctx, conv_call, av, x, w, bias=b1)


# ----------------------------------------------------------------------------- matmul / gemm
def _transposed_2d_source(ctx, expr):
    """If ``expr`` is a single-use permute_dims swapping a 2-D tensor, its input value."""
    exp = ctx.exporter
    pc = exp.producer_call(expr)
    if pc is None or getattr(pc.op, "name", None) != "relax.permute_dims" or not exp.is_single_use(expr):
        return None
    if rank_of(pc.args[0]) != 2:
        return None
    axes = pc.attrs.axes
    if axes is not None and [int(x) for x in axes] != [1, 0]:
        return None
    return exp.value_of(pc.args[0])


def fuse_gemm(ctx, mm_call, c_expr, c_name):
    """matmul(A, B) + C with 2-D A, B and C unidirectionally broadcastable -> Gemm."""
    exp = ctx.exporter
    a_expr, b_expr = mm_call.args[0], mm_call.args[1]
    if rank_of(a_expr) != 2 or rank_of(b_expr) != 2:
        return None
    od = mm_call.attrs.out_dtype
    dt = dtype_of(mm_call)
    if od is not None and str(od) not in ("", "void", dt):
        return None
    if dtype_of(a_expr) != dt or dtype_of(c_expr) != dt:
        return None
    if onnx_dtype(dt) not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16):
        return None
    out = type_dims(mm_call)
    cd = type_dims(c_expr)
    if out is None or cd is None or len(cd) > 2:
        return None
    # C must broadcast *to* (M, N) without changing the output shape
    for cdim, odim in zip(reversed(cd), reversed(out)):
        if not (cdim == 1 or (isinstance(cdim, int) and isinstance(odim, int) and cdim == odim)
                or (cdim is odim) or (str(cdim) == str(odim))):
            return None
    kw = {}
    a = _transposed_2d_source(ctx, a_expr)
    if a is not None:
        kw["transA"] = 1
    else:
        a = exp.value_of(a_expr)
    b = _transposed_2d_source(ctx, b_expr)
    if b is not None:
        kw["transB"] = 1
    else:
        b = exp.value_of(b_expr)
    return ctx.op("Gemm", a, b, c_name, **kw)


@register("relax.matmul")
def convert_matmul(ctx, call, attrs, args):
    a, b = args[0], args[1]
    od = attrs.out_dtype
    ta = ctx.types[a]
    if od is not None and str(od) not in ("", "void"):
        to = onnx_dtype(od)
        if to != ta:
            if to == TensorProto.INT32 and ta in (TensorProto.INT8, TensorProto.UINT8):
                return ctx.op("MatMulInteger", a, b)
            a, b = ctx.cast(a, to), ctx.cast(b, to)
    return ctx.op("MatMul", a, b)


@register("relax.einsum")
def convert_einsum(ctx, call, attrs, args):
    ops = args[0]
    if not isinstance(ops, list):
        ops = [ops]
    return ctx.op("Einsum", *ops, equation=str(attrs.subscripts))


@register("relax.outer")
def convert_outer(ctx, call, attrs, args):
    a = ctx.unsqueeze(args[0], [1])
    b = ctx.unsqueeze(args[1], [0])
    return ctx.op("Mul", a, b)


# ----------------------------------------------------------------------------- pooling
_POOL = {
    "relax.nn.max_pool1d": ("max", 1),
    "relax.nn.max_pool2d": ("max", 2),
    "relax.nn.max_pool3d": ("max", 3),
    "relax.nn.avg_pool1d": ("avg", 1),
    "relax.nn.avg_pool2d": ("avg", 2),
    "relax.nn.avg_pool3d": ("avg", 3),
}


@register(*_POOL)
def convert_pool(ctx, call, attrs, args):
    kind, nd = _POOL[ctx.relax_op]
    canon = "NC" + _spatial(nd)
    x = layout_transpose(ctx, args[0], attrs.layout, canon)
    kw = dict(
        kernel_shape=[int(k) for k in attrs.pool_size],
        strides=[int(s) for s in attrs.strides],
        pads=_norm_pads(ctx, attrs.padding, nd),
        ceil_mode=int(bool(attrs.ceil_mode)),
    )
    dil = [int(d) for d in attrs.dilation]
    cip = bool(attrs.count_include_pad)
    if kw["ceil_mode"]:
        # TVM and ONNX disagree on when ceil mode adds a last window; when Relax's result has
        # the floor-mode size there is no extra window and ceil_mode=0 is exact.
        ind, outd = static_dims(call.args[0]), static_dims(ctx.out_ty)
        if ind is not None and outd is not None:
            lay = attrs.layout
            sp = _spatial(nd)
            in_sp = [ind[lay.index(c)] for c in sp]
            out_sp = [outd[attrs.out_layout.index(c)] for c in sp]
            pads = kw["pads"]
            floor_sp = [(i + pads[j] + pads[j + nd] - ((k - 1) * d + 1)) // s + 1
                        for j, (i, k, d, s) in enumerate(zip(in_sp, kw["kernel_shape"], dil, kw["strides"]))]
            if floor_sp == out_sp:
                kw["ceil_mode"] = 0
    if not kw["ceil_mode"]:  # the default; the attribute exists from MaxPool/AveragePool-10 on
        kw["ceil_mode"] = SinceAttr(0, 10)
    if kind == "max":
        # count_include_pad has no effect on max pooling; dilations exist from MaxPool-10 on
        kw["dilations"] = dil if any(d != 1 for d in dil) else SinceAttr(dil, 10)
        y = ctx.op("MaxPool", x, **kw)
    else:
        kw["count_include_pad"] = int(cip)
        if any(d != 1 for d in dil):
            kw["dilations"] = dil
        y = ctx.op("AveragePool", x, **kw)
    return layout_transpose(ctx, y, canon, attrs.out_layout)


_ADAPTIVE = {
    "relax.nn.adaptive_avg_pool1d": 1,
    "relax.nn.adaptive_avg_pool2d": 2,
    "relax.nn.adaptive_avg_pool3d": 3,
}


@register(*_ADAPTIVE)
def convert_adaptive_avg_pool(ctx, call, attrs, args):
    nd = _ADAPTIVE[ctx.relax_op]
    canon = "NC" + _spatial(nd)
    layout = attrs.layout
    x = layout_transpose(ctx, args[0], layout, canon)
    in_dims = static_dims(call.args[0])
    in_sp = None
    if in_dims is not None:
        in_sp = [in_dims[layout.index(c)] for c in _spatial(nd)]
    osz = attrs.output_size
    if osz is None:
        out_sp = in_sp
    else:
        osz = [int(o) for o in osz]
        out_sp = osz * nd if len(osz) == 1 else osz
    if out_sp is not None and all(o == 1 for o in out_sp):
        y = ctx.op("GlobalAveragePool", x)
    elif out_sp is not None and in_sp is not None and out_sp == in_sp:
        y = x
    elif out_sp is not None and in_sp is not None and all(i % o == 0 for i, o in zip(in_sp, out_sp)):
        k = [i // o for i, o in zip(in_sp, out_sp)]
        y = ctx.op("AveragePool", x, kernel_shape=k, strides=k)
    else:
        ctx.fail("adaptive pooling with non-divisible or symbolic sizes has no ONNX equivalent")
    return layout_transpose(ctx, y, canon, attrs.out_layout)


@register("relax.nn.prelu")
def convert_prelu(ctx, call, attrs, args):
    x, alpha = args[0], args[1]
    nd = rank_of(call.args[0])
    axis = (int(attrs.axis) + nd) % nd
    arank = rank_of(call.args[1])
    if arank == 1 and nd - 1 - axis > 0:
        alpha = ctx.unsqueeze(alpha, list(range(1, nd - axis)))
    return ctx.op("PRelu", x, alpha)


@register("relax.nn.dropout")
def convert_dropout(ctx, call, attrs, args):
    # Relax's dropout is the inference form: the identity, and a mask of ones in the input's
    # dtype.  Written without a Dropout node, whose ratio moved from attribute to input at 12.
    attrs.rate  # noqa: B018  (irrelevant at inference)
    x = args[0]
    t = ctx.types[x]
    mask = ctx.op("Expand", ctx.typed_scalar(1, t), ctx.shape_of(x))
    return [x, mask]


@register("relax.nn.pad")
def convert_pad(ctx, call, attrs, args):
    x = args[0]
    pw = [int(p) for p in attrs.pad_width]
    before, after = pw[0::2], pw[1::2]
    mode = str(attrs.pad_mode or "constant")
    value = attrs.pad_value
    pads = ctx.i64(before + after)
    if mode == "constant":
        cv = ctx.typed_scalar(float(value or 0.0), ctx.types[x])
        return ctx.op("Pad", x, pads, cv, mode="constant")
    onnx_mode = {"reflect": "reflect", "replicate": "edge", "edge": "edge", "circular": "wrap"}.get(mode)
    if onnx_mode is None:
        ctx.fail(f"pad mode '{mode}' has no ONNX equivalent")
    return ctx.op("Pad", x, pads, mode=onnx_mode)


@register("relax.nn.pixel_shuffle")
def convert_pixel_shuffle(ctx, call, attrs, args):
    if rank_of(call.args[0]) != 4:
        ctx.fail("pixel_shuffle is only exported for 4-D NCHW input")
    return ctx.op("DepthToSpace", args[0], blocksize=int(attrs.upscale_factor), mode="CRD")
