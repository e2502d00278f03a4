"""Neural-network operators: convolution, pooling, normalisation, softmax, mean."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from tvm import relax

from .base import LowerFn, NumpyFn, OpDef, Z3Fn, register, same_dtype
from .elementwise import apply_activation, check_activation, lower_activation, z3_activation
from .relax_util import ints
from ..types import GraphError, TensorType, normalize_axis

R = relax.op


def _pair(v, what: str, op: str) -> tuple[int, int]:
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) == 1:
        v = (v[0], v[0])
    if len(v) != 2 or any(int(x) < 1 for x in v):
        raise GraphError(f"{op}: {what} must be two positive ints, got {v}")
    return (int(v[0]), int(v[1]))


def _pads(v, op: str) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right), Relax's order."""
    v = (v,) if isinstance(v, int) else tuple(v)
    if len(v) == 1:
        v = v * 4
    elif len(v) == 2:
        v = (v[0], v[1], v[0], v[1])
    if len(v) != 4 or any(int(x) < 0 for x in v):
        raise GraphError(f"{op}: padding must be 1, 2 or 4 non-negative ints, got {v}")
    return tuple(int(x) for x in v)


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TASO/TensorFlow SAME padding of one spatial dimension, (before, after): the output is ceil(size / stride);
    an odd total puts the extra row or column after (ONNX's SAME_UPPER)."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - size)
    return total // 2, total - total // 2


def _window_padding(padding: Any, in_hw: Sequence, kernel: Sequence, strides: Sequence, dilation: Sequence,
                    op: str) -> tuple[int, int, int, int]:
    """A window operator's padding attribute (SAME, VALID, or 1, 2 or 4 ints) as (top, left, bottom, right)."""
    if not isinstance(padding, str):
        return _pads(padding, op)
    mode = padding.upper()
    if mode not in ("SAME", "VALID"):
        raise GraphError(f"{op}: padding must be SAME, VALID or ints, got {padding!r}")
    if mode == "VALID":
        return (0, 0, 0, 0)
    (top, bottom), (left, right) = (same_padding(in_hw[i], kernel[i], strides[i], dilation[i]) for i in range(2))
    return (top, left, bottom, right)


def _out_len(n: int, k: int, s: int, p0: int, p1: int, d: int, ceil: bool = False) -> int:
    eff = d * (k - 1) + 1
    if not isinstance(n, int):
        raise GraphError("symbolic spatial dimensions are not supported")
    span = n + p0 + p1 - eff
    if span < 0:
        raise GraphError(f"window {eff} larger than padded input {n + p0 + p1}")
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p0:  # last window must start inside the input or left padding
        out -= 1
    return out


def _windows(x: np.ndarray, kh: int, kw: int, strides: Sequence[int], pads: Sequence[int],
             dilation: Sequence[int], oh: int, ow: int, fill: float = 0.0) -> np.ndarray:
    """View of x (N,C,H,W) as N,C,OH,OW,KH,KW windows after padding with `fill`."""
    pt, pl, pb, pr = pads
    sh, sw = strides
    dh, dw = dilation
    extra_h = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (x.shape[2] + pt + pb))
    extra_w = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (x.shape[3] + pl + pr))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]


# ---------------------------------------------------------------- conv2d
def _conv_norm(a: dict, t: Sequence[TensorType]) -> dict:
    op = "conv2d"
    a["strides"] = _pair(a["strides"], "strides", op)
    a["dilation"] = _pair(a["dilation"], "dilation", op)
    a["activation"] = check_activation(a["activation"], op)
    a["padding"] = _window_padding(a["padding"], t[0].shape[2:], t[1].shape[2:], a["strides"], a["dilation"], op)
    a["groups"] = int(a["groups"])
    return a


def _conv_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x, w = t
    if x.ndim != 4 or w.ndim != 4:
        raise GraphError(f"conv2d: expects 4-D input and weight, got {x} and {w}")
    g = a["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if g < 1 or c != cg * g or o % g:
        raise GraphError(f"conv2d: channels {c} / weight {w.shape} / groups {g} inconsistent")
    pt, pl, pb, pr = a["padding"]
    oh = _out_len(h, kh, a["strides"][0], pt, pb, a["dilation"][0])
    ow = _out_len(wd, kw, a["strides"][1], pl, pr, a["dilation"][1])
    return [TensorType((n, o, oh, ow), same_dtype(t, "conv2d"))]


def conv2d_numpy(x: np.ndarray, w: np.ndarray, strides: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], groups: int) -> np.ndarray:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    oh = _out_len(x.shape[2], kh, strides[0], padding[0], padding[2], dilation[0])
    ow = _out_len(x.shape[3], kw, strides[1], padding[1], padding[3], dilation[1])
    win = _windows(x, kh, kw, strides, padding, dilation, oh, ow)
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=x.dtype != object)
    return out.reshape(n, o, oh, ow)


def _conv_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    y = conv2d_numpy(x[0], x[1], a["strides"], a["padding"], a["dilation"], a["groups"])
    return [apply_activation(a["activation"], y)]


def _conv_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    xs, ws = np.asarray(x[0], dtype=object), np.asarray(x[1], dtype=object)
    sym = next((v.flat[0] for v in (xs, ws) if v.size and hasattr(v.flat[0], "sym_dot")), None)
    if sym is not None:  # the verifier's polynomials: one in-place sum of products per output element
        y = _conv_dot(xs, ws, a["strides"], a["padding"], a["dilation"], a["groups"], sym.sym_dot)
    else:
        y = conv2d_numpy(xs, ws, a["strides"], a["padding"], a["dilation"], a["groups"])
    return [z3_activation(a["activation"], y)]


def _conv_dot(x: np.ndarray, w: np.ndarray, strides: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], groups: int, dot) -> np.ndarray:
    """conv2d_numpy over object arrays with `dot(xs, ys)` for each output element's sum of products."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    oh = _out_len(x.shape[2], kh, strides[0], padding[0], padding[2], dilation[0])
    ow = _out_len(x.shape[3], kw, strides[1], padding[1], padding[3], dilation[1])
    win = _windows(x, kh, kw, strides, padding, dilation, oh, ow).reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg * kh * kw)
    out = np.empty((n, groups, o // groups, oh, ow), dtype=object)
    for b, g, i, j in np.ndindex(n, groups, oh, ow):
        vec = win[b, g, :, i, j].reshape(-1)
        for k in range(o // groups):
            out[b, g, k, i, j] = dot(vec, wg[g, k])
    return out.reshape(n, o, oh, ow)


def _conv_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    at = call.attrs
    if str(at.data_layout) != "NCHW" or str(at.kernel_layout) != "OIHW" or str(at.out_layout) != "NCHW":
        return None
    if at.out_dtype is not None and str(at.out_dtype) not in ("", "void"):
        return None
    return list(call.args), {"strides": ints(at.strides), "padding": ints(at.padding),
                             "dilation": ints(at.dilation), "groups": int(at.groups), "activation": "none"}


def _conv_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
    y = R.nn.conv2d(args[0], args[1], strides=a["strides"], padding=a["padding"], dilation=a["dilation"],
                    groups=a["groups"])
    return lower_activation(a["activation"], y)


CONV2D = register(OpDef(
    "conv2d", 2, _conv_infer, _conv_np, normalize=_conv_norm,
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "activation": "none"},
    relax=("relax.nn.conv2d",), lift=_conv_lift, lower=_conv_lower, z3=_conv_z3,
    doc="2-D convolution, NCHW/OIHW, padding (top, left, bottom, right) or SAME/VALID, fused activation"))


# ---------------------------------------------------------------- pooling
def _pool_norm(a: dict, t: Sequence[TensorType]) -> dict:
    op = "pool2d"
    a["kernel"] = _pair(a["kernel"], "kernel", op)
    a["strides"] = _pair(a["strides"], "strides", op)
    a["dilation"] = _pair(a["dilation"], "dilation", op)
    # SAME padding is computed for the undilated kernel
    a["padding"] = _window_padding(a["padding"], t[0].shape[2:], a["kernel"], a["strides"], (1, 1), op)
    a["ceil_mode"] = bool(a["ceil_mode"])
    if "count_include_pad" in a:
        a["count_include_pad"] = bool(a["count_include_pad"])
    return a


def _pool_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x = t[0]
    if x.ndim != 4:
        raise GraphError(f"pool2d: expects a 4-D input, got {x}")
    pt, pl, pb, pr = a["padding"]
    oh = _out_len(x.shape[2], a["kernel"][0], a["strides"][0], pt, pb, a["dilation"][0], a["ceil_mode"])
    ow = _out_len(x.shape[3], a["kernel"][1], a["strides"][1], pl, pr, a["dilation"][1], a["ceil_mode"])
    return [TensorType((x.shape[0], x.shape[1], oh, ow), x.dtype)]


def _pool_np(kind: str) -> NumpyFn:
    def fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        x = x[0]
        (oh, ow) = _pool_infer([TensorType(x.shape, "float32")], a)[0].shape[2:]
        kh, kw = a["kernel"]
        if kind == "max":
            win = _windows(x, kh, kw, a["strides"], a["padding"], a["dilation"], oh, ow, fill=-np.inf)
            return [win.max(axis=(4, 5)).astype(x.dtype)]
        win = _windows(x, kh, kw, a["strides"], a["padding"], a["dilation"], oh, ow)
        total = win.sum(axis=(4, 5))
        if a["count_include_pad"]:
            # windows are divided by their size clipped to the padded input (not the ceil-mode overhang)
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            pt, pl, pb, pr = a["padding"]
            ones = np.pad(ones, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=1)
            cnt = _windows(ones, kh, kw, a["strides"], (0, 0, 0, 0), a["dilation"], oh, ow).sum(axis=(4, 5))
        else:
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            cnt = _windows(ones, kh, kw, a["strides"], a["padding"], a["dilation"], oh, ow).sum(axis=(4, 5))
        return [(total / cnt).astype(x.dtype)]
    return fn


def _pool_z3(kind: str) -> Z3Fn:
    """Pooling on z3 expressions: max as nested If over the in-range window elements, average as sum / count."""
    def fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        import z3

        from .elementwise import z3_max, z3_val

        x = np.asarray(x[0], dtype=object)
        n, c, h, w = x.shape
        (oh, ow) = _pool_infer([TensorType(x.shape, "float32")], a)[0].shape[2:]
        kh, kw = a["kernel"]
        (sh, sw), (dh, dw) = a["strides"], a["dilation"]
        pt, pl, pb, pr = a["padding"]
        out = np.empty((n, c, oh, ow), dtype=object)
        for i, j in np.ndindex(oh, ow):
            rows = [i * sh - pt + u * dh for u in range(kh)]
            cols = [j * sw - pl + v * dw for v in range(kw)]
            inside = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
            if kind == "avg":
                if a["count_include_pad"]:  # window clipped to the padded input
                    cnt = sum(1 for r in rows for q in cols if -pt <= r < h + pb and -pl <= q < w + pr)
                else:
                    cnt = len(inside)
            for b, ch in np.ndindex(n, c):
                vals = [z3_val(x[b, ch, r, q]) for r, q in inside]
                if kind == "max":
                    if not vals:  # a window entirely in the padding: -inf, as in NumPy
                        out[b, ch, i, j] = z3.Real("-inf")
                        continue
                    m = vals[0]
                    for v in vals[1:]:
                        m = z3_max(m, v)
                    out[b, ch, i, j] = m
                elif not cnt:
                    out[b, ch, i, j] = z3.Real("nan")  # 0/0 as in NumPy
                else:
                    exact = all(z3.is_expr(v) for v in vals)  # else the verifier's polynomials
                    out[b, ch, i, j] = (z3.Sum(vals) if exact else sum(vals[1:], vals[0])) / cnt
        return [out]
    return fn


def _pool_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    at = call.attrs
    if str(at.layout) != "NCHW" or str(at.out_layout) != "NCHW":
        return None
    a = {"kernel": ints(at.pool_size), "strides": ints(at.strides), "padding": ints(at.padding),
         "dilation": ints(at.dilation), "ceil_mode": bool(at.ceil_mode)}
    if call.op.name == "relax.nn.avg_pool2d":
        a["count_include_pad"] = bool(at.count_include_pad)
    return list(call.args), a


def _pool_lower(kind: str) -> LowerFn:
    def fn(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
        f = R.nn.max_pool2d if kind == "max" else R.nn.avg_pool2d
        extra = {} if kind == "max" else {"count_include_pad": a["count_include_pad"]}
        return f(args[0], pool_size=a["kernel"], strides=a["strides"], padding=a["padding"], dilation=a["dilation"],
                 ceil_mode=a["ceil_mode"], **extra)
    return fn


_POOL_ATTRS = {"kernel": None, "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "ceil_mode": False}
MAXPOOL = register(OpDef("maxpool2d", 1, _pool_infer, _pool_np("max"), attrs=dict(_POOL_ATTRS), normalize=_pool_norm,
                         relax=("relax.nn.max_pool2d",), lift=_pool_lift, lower=_pool_lower("max"),
                         z3=_pool_z3("max"), doc="2-D max pooling, NCHW"))
AVGPOOL = register(OpDef("avgpool2d", 1, _pool_infer, _pool_np("avg"),
                         attrs=dict(_POOL_ATTRS, count_include_pad=False), normalize=_pool_norm,
                         relax=("relax.nn.avg_pool2d",), lift=_pool_lift, lower=_pool_lower("avg"),
                         z3=_pool_z3("avg"), doc="2-D average pooling, NCHW"))


# ---------------------------------------------------------------- batch norm (inference)
def _bn_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x = t[0]
    ax = normalize_axis(a["axis"], x.ndim)
    for p in t[1:]:
        if p.shape != (x.shape[ax],):
            raise GraphError(f"batchnorm: parameter shape {p.shape} != ({x.shape[ax]},)")
    return [x]


def _bn_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    data, gamma, beta, mean, var = x
    ax = normalize_axis(a["axis"], data.ndim)
    shape = [1] * data.ndim
    shape[ax] = -1
    r = lambda v: v.reshape(shape)  # noqa: E731
    scale = gamma / np.sqrt(var + np.asarray(a["epsilon"], dtype=var.dtype))
    return [((data - r(mean)) * r(scale) + r(beta)).astype(data.dtype, copy=False)]


def _bn_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    """(x - mean) * (gamma * recip(sqrt(var + eps))) + beta, eps rounded to float32 as the NumPy version does."""
    from .elementwise import z3_apply, z3_map, z3_recip, z3_val

    data, gamma, beta, mean, var = (np.asarray(v, dtype=object) for v in x)
    ax = normalize_axis(a["axis"], data.ndim)
    shape = [1] * data.ndim
    shape[ax] = -1
    eps = float(np.float32(a["epsilon"]))
    inv = z3_map(lambda v: z3_recip(z3_apply("sqrt", z3_val(v) + eps)), var)
    scale = (gamma * inv).reshape(shape)
    return [(data - mean.reshape(shape)) * scale + beta.reshape(shape)]


def _bn_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    at = call.attrs
    if bool(at.training) or not bool(at.center) or not bool(at.scale):
        return None
    return list(call.args), {"axis": int(at.axis), "epsilon": float(at.epsilon), "momentum": float(at.momentum)}


def _bn_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
    t = bb.emit(R.nn.batch_norm(*args, axis=a["axis"], epsilon=a["epsilon"], momentum=a["momentum"],
                                   training=False))
    return relax.TupleGetItem(t, 0)


BATCHNORM = register(OpDef("batchnorm", 5, _bn_infer, _bn_np, attrs={"axis": 1, "epsilon": 1e-5, "momentum": 0.1},
                           relax=("relax.nn.batch_norm",), lift=_bn_lift, lower=_bn_lower, z3=_bn_z3,
                           doc="batch normalisation in inference mode: (x - mean) * gamma / sqrt(var + eps) + beta "
                               "(momentum is kept for the Relax form; it does not affect inference)"))


# ---------------------------------------------------------------- softmax, layer norm, mean
def _softmax_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    v = x[0]
    ax = normalize_axis(a["axis"], v.ndim)
    e = np.exp(v - v.max(axis=ax, keepdims=True))
    return [(e / e.sum(axis=ax, keepdims=True)).astype(v.dtype)]


def _softmax_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    """exp(x) * recip(sum(exp(x))) along the axis (exp uninterpreted; the max shift cancels mathematically)."""
    from .elementwise import z3_apply, z3_map, z3_recip, z3_val

    v = np.asarray(x[0], dtype=object)
    ax = normalize_axis(a["axis"], v.ndim)
    e = z3_map(lambda t: z3_apply("exp", t), v)
    return [e * z3_map(z3_recip, e.sum(axis=ax, keepdims=True))]


def _softmax_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    normalize_axis(a["axis"], t[0].ndim)
    return [t[0]]


SOFTMAX = register(OpDef("softmax", 1, _softmax_infer, _softmax_np, attrs={"axis": -1},
                         relax=("relax.nn.softmax",), lift=lambda c: (list(c.args), {"axis": int(c.attrs.axis)}),
                         lower=lambda bb, args, a, t: R.nn.softmax(args[0], axis=a["axis"]), z3=_softmax_z3,
                         doc="softmax along an axis"))


# Layer norm takes its epsilon as an attribute, or as a one-element fourth input: what a rule lifting layer norm
# written in pieces (opset < 17: ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add) can state, since
# the epsilon there is a constant tensor; the attribute is then unused (as quick_gelu's alpha).
def _ln_eps(x: Sequence[Any], a: dict) -> Any:
    """The epsilon: the fourth input's one element when there is one, else the attribute."""
    return np.asarray(x[3]).reshape(-1)[0] if len(x) == 4 else a["epsilon"]


def _ln_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    if len(t) not in (3, 4):
        raise GraphError(f"layernorm: takes x, gamma, beta and, optionally, a one-element epsilon ({len(t)} inputs)")
    x = t[0]
    axes = [normalize_axis(ax, x.ndim) for ax in a["axes"]]
    want = tuple(x.shape[ax] for ax in axes)
    for p in t[1:3]:
        if p.shape != want:
            raise GraphError(f"layernorm: parameter shape {p.shape} != {want}")
    if len(t) == 4 and (t[3].size != 1 or t[3].dtype != x.dtype):
        raise GraphError(f"layernorm: epsilon input {t[3].shape} {t[3].dtype} is not one {x.dtype} element")
    return [x]


def _ln_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    data, gamma, beta = x[:3]
    axes = tuple(normalize_axis(ax, data.ndim) for ax in a["axes"])
    mean = data.mean(axis=axes, keepdims=True)
    var = ((data - mean) ** 2).mean(axis=axes, keepdims=True)
    return [((data - mean) / np.sqrt(var + _ln_eps(x, a)) * gamma + beta).astype(data.dtype)]


def _ln_z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    from .elementwise import z3_apply, z3_map, z3_recip, z3_val

    data, gamma, beta = (np.asarray(v, dtype=object) for v in x[:3])
    axes = tuple(normalize_axis(ax, data.ndim) for ax in a["axes"])
    mean = data.mean(axis=axes, keepdims=True)
    var = ((data - mean) * (data - mean)).mean(axis=axes, keepdims=True)
    eps = _ln_eps(x, a) if len(x) == 4 else float(a["epsilon"])
    inv = z3_map(lambda v: z3_recip(z3_apply("sqrt", z3_val(v) + eps)), var)
    return [(data - mean) * inv * gamma + beta]


def _ln_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    at = call.attrs
    if not bool(at.center) or not bool(at.scale):
        return None
    return list(call.args), {"axes": ints(at.axes), "epsilon": float(at.epsilon)}


def _ln_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
    """Relax's layer_norm; with an epsilon input, its value where it is a constant, else the moments written out."""
    from tvm.ir import GenericConst

    eps = a["epsilon"]
    if len(args) == 4:
        if not isinstance(args[3], GenericConst):
            x = args[0]
            mean = R.mean(x, axis=list(a["axes"]), keepdims=True)
            d = bb.emit(R.subtract(x, mean))
            var = R.mean(R.multiply(d, d), axis=list(a["axes"]), keepdims=True)
            y = R.divide(d, R.sqrt(R.add(var, args[3])))
            return R.add(R.multiply(y, args[1]), args[2])
        eps = float(args[3].value.numpy().reshape(-1)[0])
    return R.nn.layer_norm(*args[:3], axes=list(a["axes"]), epsilon=eps)


LAYERNORM = register(OpDef("layernorm", None, _ln_infer, _ln_np, attrs={"axes": (-1,), "epsilon": 1e-5},
                           relax=("relax.nn.layer_norm",), lift=_ln_lift, lower=_ln_lower, z3=_ln_z3,
                           doc="layer normalisation over the given axes; epsilon from a one-element fourth input "
                               "when given"))


def _mean_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    x = t[0]
    axes = sorted(normalize_axis(ax, x.ndim) for ax in a["axes"])
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if a["keepdims"] else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return [TensorType(tuple(shape), x.dtype)]


def _mean_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    if call.attrs.axis is None:
        return None
    return list(call.args), {"axes": ints(call.attrs.axis), "keepdims": bool(call.attrs.keepdims)}


MEAN = register(OpDef("mean", 1, _mean_infer,
                      lambda x, a: [x[0].mean(axis=tuple(a["axes"]), keepdims=a["keepdims"]).astype(x[0].dtype)],
                      attrs={"axes": None, "keepdims": False}, relax=("relax.mean",), lift=_mean_lift,
                      lower=lambda bb, args, a, t: R.mean(args[0], axis=list(a["axes"]), keepdims=a["keepdims"]),
                      doc="mean over axes (global average pooling imports as this)",
                      z3=lambda x, a: [np.asarray(x[0], dtype=object).mean(axis=tuple(a["axes"]),
                                                                           keepdims=a["keepdims"])]))
