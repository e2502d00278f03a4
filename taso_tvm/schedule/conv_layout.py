"""`ConvWeightsIHWO`: store a conv2d's constant weights output-channel-innermost (IHWO) so that the contraction
schedule can vectorize over output channels.

Along the output width, a strided convolution loads its input with gaps and an odd width fills vectors badly.
With the weights in IHWO layout, a vector of output channels loads contiguous weights while the input element is
a broadcast scalar, whatever the stride and width; the output tile is transposed once, when written back. The
pass runs on the Relax module before LegalizeOps: conv2d(x, W) becomes conv2d(x, permute_dims(W), kernel_layout=
"IHWO"), and FoldConstant (in the legalization passes) folds the permutation into the constant. Only convolutions
with constant weights, one group, static shapes and output channels in whole vector halves are changed
(`wants_ihwo`); the others keep OIHW and get `PadConvWidth`.
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_rewrite import CONV2D, out_dtype, rewrite_functions, static_shape as _shape


def wants_ihwo(out_shape: list, stride_w: int, granule: int) -> bool:
    """Whether a conv2d (NCHW output `out_shape`) runs better vectorized over its output channels: whenever they
    fill whole vector halves (measured faster at every zoo shape, strided or not, 7 to 112 wide: 1.1x to 4.7x)."""
    return out_shape[1] % granule == 0


@mutator
class _ToIHWO(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, granule: int):
        super().__init__(mod)
        self.granule = granule
        self.changed = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != CONV2D:
            return call
        a = call.attrs
        layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
        weight = call.args[1]
        out = _shape(call)
        if layouts != ("NCHW", "OIHW", "NCHW") or int(a.groups) != 1 or len(out) != 4 \
                or not isinstance(weight, tvm.ir.GenericConst) or not _shape(call.args[0]):
            return call
        if not wants_ihwo(out, int(a.strides[1]), self.granule):
            return call
        new = relax.op.nn.conv2d(call.args[0], relax.op.permute_dims(weight, [1, 2, 3, 0]),
                                 strides=[int(s) for s in a.strides], padding=[int(p) for p in a.padding],
                                 dilation=[int(d) for d in a.dilation], groups=1, data_layout="NCHW",
                                 kernel_layout="IHWO", out_layout="NCHW",
                                 out_dtype=out_dtype(a))
        self.changed += 1
        return new


def conv_weights_ihwo(mod: tvm.IRModule, granule: int) -> tuple:
    """(module, number of conv2d changed)."""
    return rewrite_functions(mod, _ToIHWO(mod, granule))


@tvm.transform.module_pass(opt_level=0, name="TasoConvWeightsIHWO")
class ConvWeightsIHWO:
    """Module pass form of `conv_weights_ihwo`; `granule` is half the target's fp32 vector (8 on AVX-512)."""

    def __init__(self, granule: int):
        self.granule = int(granule)

    def transform_module(self, mod: tvm.IRModule, ctx: Any = None) -> tvm.IRModule:
        return conv_weights_ihwo(mod, self.granule)[0]
