"""Quantization, image and vision Relax operators."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tvm import relax

from .context import SinceAttr
from .tensor_types import onnx_dtype, prim_to_py, rank_of
from .converters_nn import layout_transpose
from .registry import register


# ----------------------------------------------------------------------------- quantization
def _quant_axis(call, attrs) -> int:
    """The (non-negative) quantization axis of a quantize/dequantize call."""
    nd = rank_of(call.args[0])
    axis = int(attrs.axis)
    return (axis + nd) % nd if nd > 0 else axis


@register("relax.quantize")
def convert_quantize(ctx, call, attrs, args):
    x, scale, zp = args[0], args[1], args[2]
    out = onnx_dtype(attrs.out_dtype)
    axis = _quant_axis(call, attrs)
    zp = ctx.cast(zp, out)
    if ctx.types[scale] != ctx.types[x]:
        scale = ctx.cast(scale, ctx.types[x])
    return ctx.op("QuantizeLinear", x, scale, zp, axis=axis)


@register("relax.dequantize")
def convert_dequantize(ctx, call, attrs, args):
    x, scale, zp = args[0], args[1], args[2]
    out = onnx_dtype(attrs.out_dtype)
    axis = _quant_axis(call, attrs)
    zp = ctx.cast(zp, ctx.types[x])
    y = ctx.op("DequantizeLinear", x, scale, zp, axis=axis, out_types=[ctx.types[scale]])
    return ctx.cast(y, out)


# ----------------------------------------------------------------------------- image
_RESIZE_MODE = {"nearest_neighbor": "nearest", "nearest": "nearest", "linear": "linear", "bilinear": "linear",
                "cubic": "cubic", "bicubic": "cubic"}
_NEAREST_MODE = {"round": "round_prefer_ceil", "round_prefer_ceil": "round_prefer_ceil",
                 "round_prefer_floor": "round_prefer_floor", "floor": "floor", "ceil": "ceil"}


@register("relax.image.resize2d", "relax.image.resize3d")
def convert_resize(ctx, call, attrs, args):
    nd = 2 if ctx.relax_op.endswith("2d") else 3
    canon = "NC" + "DHW"[3 - nd:]
    layout = attrs.layout
    x = layout_transpose(ctx, args[0], layout, canon)
    method = str(attrs.method)
    if method not in _RESIZE_MODE:
        ctx.fail(f"resize method '{method}' has no ONNX equivalent")
    ctm = str(attrs.coordinate_transformation_mode)
    rounding = str(attrs.rounding_method)
    kw = dict(mode=_RESIZE_MODE[method], coordinate_transformation_mode=ctm,
              cubic_coeff_a=float(attrs.cubic_alpha), exclude_outside=int(attrs.cubic_exclude),
              extrapolation_value=float(attrs.extrapolation_value))
    if rounding:
        if rounding not in _NEAREST_MODE:
            ctx.fail(f"resize rounding method '{rounding}' has no ONNX equivalent")
        kw["nearest_mode"] = _NEAREST_MODE[rounding]
    size = call.args[1]
    if isinstance(size, relax.ShapeExpr):
        sz = ctx.shape_tensor(size.values)
    else:
        sz = ctx.cast(args[1], TensorProto.INT64)
    sizes = ctx.concat([ctx.slice1d(ctx.shape_of(x), 0, 2), sz], 0)
    roi_vals = [float(prim_to_py(r)) for r in attrs.roi]
    roi = ""
    if ctm == "tf_crop_and_resize":
        starts = [0.0, 0.0] + roi_vals[:nd]
        ends = [1.0, 1.0] + roi_vals[nd:]
        roi = ctx.const(np.array(starts + ends, dtype=np.float32), TensorProto.FLOAT)
    # Resize-11 requires roi and scales (empty tensors when sizes are given)
    empty = (np.zeros((0,), np.float32), TensorProto.FLOAT)
    y = ctx.op("Resize", x, roi, "", sizes, fill={1: empty, 2: empty}, **kw)
    od = attrs.out_dtype
    if od is not None and str(od) not in ("", "void"):
        y = ctx.cast(y, onnx_dtype(od))
    return layout_transpose(ctx, y, canon, layout)


_GRID_MODE_16 = {"bilinear": "bilinear", "nearest": "nearest", "bicubic": "bicubic"}
_GRID_MODE_20 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}


@register("relax.image.grid_sample")
def convert_grid_sample(ctx, call, attrs, args):
    x, grid = args[0], args[1]
    nd = rank_of(call.args[0])
    layout = str(attrs.layout)
    canon = "NCHW" if nd == 4 else "NCDHW"
    x = layout_transpose(ctx, x, layout, canon)
    method = str(attrs.method)
    if method not in _GRID_MODE_16:
        ctx.fail(f"grid_sample method '{method}' has no ONNX equivalent")
    # Relax grid is (N, 2, H, W) ((N, 3, D, H, W)); ONNX wants the coordinates last
    perm = [0] + list(range(2, nd)) + [1]
    g = ctx.transpose(grid, perm)
    m16, m20 = _GRID_MODE_16[method], _GRID_MODE_20[method]
    mode = (lambda v: m16 if v < 20 else m20) if m16 != m20 else m16
    y = ctx.op("GridSample", x, g, mode=mode, padding_mode=str(attrs.padding_mode),
               align_corners=int(bool(attrs.align_corners)), lo=(20 if nd != 4 else None))
    return layout_transpose(ctx, y, canon, layout)


@register("relax.image.affine_grid")
def convert_affine_grid(ctx, call, attrs, args):
    theta = args[0]
    size = call.args[1]
    hw = ctx.shape_tensor(size.values) if isinstance(size, relax.ShapeExpr) else ctx.cast(args[1], TensorProto.INT64)
    n = ctx.dim_of(theta, 0)
    full = ctx.concat([n, ctx.i64([1]), hw], 0)
    g = ctx.op("AffineGrid", theta, full, align_corners=int(bool(attrs.align_corners)))
    # ONNX: (N, H, W, 2); Relax: (N, 2, H, W)
    return ctx.transpose(g, [0, 3, 1, 2])


# ----------------------------------------------------------------------------- vision
@register("relax.vision.roi_align")
def convert_roi_align(ctx, call, attrs, args):
    x, rois = args[0], args[1]
    layout = str(attrs.layout)
    x = layout_transpose(ctx, x, layout, "NCHW")
    ph, pw = [int(p) for p in attrs.pooled_size]
    ratio = int(attrs.sample_ratio)
    aligned = bool(attrs.aligned)
    mode = str(attrs.mode)
    bidx = ctx.cast(ctx.squeeze(ctx.op("Slice", rois, ctx.i64([0]), ctx.i64([1]), ctx.i64([1])), [1]),
                    TensorProto.INT64)
    boxes = ctx.op("Slice", rois, ctx.i64([1]), ctx.i64([5]), ctx.i64([1]))
    scale = float(attrs.spatial_scale)
    if aligned:
        # Relax aligned=True only drops the "roi size >= 1" clamp; ONNX half_pixel also shifts
        # the scaled box by -0.5, which the +0.5/scale offset cancels.
        boxes = ctx.op("Add", boxes, ctx.typed_scalar(0.5 / scale, ctx.types[boxes]))
    kw = dict(output_height=ph, output_width=pw, sampling_ratio=max(ratio, 0),
              spatial_scale=scale, mode=mode)
    # RoiAlign-10 always used output_half_pixel; RoiAlign-16 defaults to half_pixel
    kw["coordinate_transformation_mode"] = "half_pixel" if aligned else SinceAttr("output_half_pixel", 16)
    y = ctx.op("RoiAlign", x, boxes, bidx, **kw)
    return layout_transpose(ctx, y, "NCHW", layout)


@register("relax.vision.roi_pool")
def convert_roi_pool(ctx, call, attrs, args):
    x, rois = args[0], args[1]
    layout = str(attrs.layout)
    x = layout_transpose(ctx, x, layout, "NCHW")
    y = ctx.op("MaxRoiPool", x, rois, pooled_shape=[int(p) for p in attrs.pooled_size],
               spatial_scale=float(attrs.spatial_scale))
    return layout_transpose(ctx, y, "NCHW", layout)


@register("relax.vision.all_class_non_max_suppression")
def convert_all_class_nms(ctx, call, attrs, args):
    boxes, scores = args[0], args[1]
    fmt = str(attrs.output_format)
    if fmt != "onnx":
        ctx.fail(f"all_class_non_max_suppression output_format '{fmt}' has no ONNX equivalent")
    mo = ctx.cast(ctx.reshape(args[2], [1]), TensorProto.INT64)
    iou = ctx.cast(ctx.reshape(args[3], [1]), TensorProto.FLOAT)
    st = ctx.cast(ctx.reshape(args[4], [1]), TensorProto.FLOAT)
    sel = ctx.op("NonMaxSuppression", boxes, scores, mo, iou, st)
    count = ctx.dim_of(sel, 0)
    return [sel, count]
