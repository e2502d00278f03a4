"""`PadConvWidth`: give NCHW conv2d an output width that is a whole number of vector halves.

The contraction schedule vectorizes a convolution along the output width. A width that no half-vector divides
(7, 13, 27, 55, 111, 149: most CNNs) leaves either odd-sized vectors, which LLVM spills, or a predicated tail,
which stops vectorization. This pass, run on the Relax module before LegalizeOps, widens the right padding of such
a conv2d by whole output columns so that its output width is a multiple of `granule`, and slices the extra
columns off again (`strided_slice`, fused by FuseOps with the element-wise ops after it). The extra columns cost
a few percent of FLOPs at the widths above (13 -> 16, the worst in the zoo, 23 %) and buy full vectors.

The columns added read only the new zero padding or real input to their left, and are dropped: the result is
the same function. Convolutions with symbolic shapes, other layouts, or outputs narrower than MIN_WIDTH are left alone.
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_rewrite import CONV2D, out_dtype as _out_dtype, rewrite_functions, static_shape as _static_shape

MIN_WIDTH = 4  # narrower outputs (1x1 maps, 2x2) would mostly compute padding


@mutator
class _Widen(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, granule: int):
        super().__init__(mod)
        self.granule = granule
        self.changed = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != CONV2D:
            return call
        a = call.attrs
        if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)) != ("NCHW", "OIHW", "NCHW"):
            return call
        out = _static_shape(call)
        if len(out) != 4 or not _static_shape(call.args[0]) or not _static_shape(call.args[1]):
            return call
        width = out[3]
        extra = (-width) % self.granule
        if extra == 0 or width < MIN_WIDTH:
            return call
        top, left, bottom, right = (int(p) for p in a.padding)
        stride_w = int(a.strides[1])
        wide = relax.op.nn.conv2d(call.args[0], call.args[1], strides=[int(s) for s in a.strides],
                                  padding=[top, left, bottom, right + extra * stride_w],
                                  dilation=[int(d) for d in a.dilation], groups=int(a.groups),
                                  data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                                  out_dtype=_out_dtype(a))
        wide_var = self.builder_.emit(wide)
        self.changed += 1
        return relax.op.strided_slice(wide_var, axes=[3], begin=[0], end=[width])


def pad_conv_width(mod: tvm.IRModule, granule: int) -> tuple:
    """(module, number of conv2d widened)."""
    return rewrite_functions(mod, _Widen(mod, granule))


@tvm.transform.module_pass(opt_level=0, name="TasoPadConvWidth")
class PadConvWidth:
    """Module pass form of `pad_conv_width`; `granule` is half the target's fp32 vector (8 on AVX-512)."""

    def __init__(self, granule: int):
        self.granule = int(granule)

    def transform_module(self, mod: tvm.IRModule, ctx: Any = None) -> tvm.IRModule:
        return pad_conv_width(mod, self.granule)[0]
