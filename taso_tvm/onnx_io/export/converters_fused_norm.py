"""The fused layer norms of `graph/ops/fused_norm.py` as ONNX Runtime's nodes (domain ``com.microsoft``).

Registered into the fused converters' table (`converters_fused.register_fused`); a converter returns None where the
call has no fused form, and the exporter then writes the decomposition.
"""
from __future__ import annotations

from typing import Optional

from onnx import TensorProto

from .converters_fused import MS, register_fused, skip_layernorm_inputs

SKIP_SUM_OUTPUT = 3  # SkipLayerNormalization's input_skip_bias_sum (outputs 1 and 2, mean and inv_std_var, unused)


@register_fused("skip_layernorm_sum")
def convert_skip_layernorm_sum(ctx, call, attrs, args) -> Optional[list]:
    inputs = skip_layernorm_inputs(ctx, call, args)
    if inputs is None:
        return None
    elem = ctx.types.get(args[0], TensorProto.FLOAT)
    outputs = [ctx.fresh("skip_ln"), "", "", ctx.fresh("skip_sum")]
    out = ctx.node("SkipLayerNormalization", inputs, outputs=outputs, domain=MS, out_types=[elem, None, None, elem],
                   epsilon=float(attrs["epsilon"]))
    return [out[0], out[SKIP_SUM_OUTPUT]]


__all__ = ["convert_skip_layernorm_sum"]
