"""Fused operators as ONNX Runtime's own nodes (domain ``com.microsoft``).

A fused operator reaches the exporter as a call to a private Relax function holding its decomposition
(`taso_tvm.graph.ops.decompose`, ``composite`` lowering). Its converter here writes the runtime's node; a
converter returns None where the call has no fused form (a scale that is not a constant, a bias of another shape),
and the exporter then writes the decomposition, which is always correct. With ``standard_ops`` no converter runs.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional

import numpy as np
from onnx import TensorProto

from .tensor_types import static_dims

MS = "com.microsoft"

# fused operator name -> convert(ctx, call, attrs, args) -> ONNX value or None
FusedConverter = Callable[..., Any]
FUSED_CONVERTERS: Dict[str, FusedConverter] = {}
STANDARD_CONVERTERS: set = set()  # those writing default-domain operators only: they also run with standard_ops
# fused operator -> (opset its form needs with ONNX Runtime's operators, with standard_ops): ONNX 23's Attention and
# RotaryEmbedding; below it the converter writes the decomposition
FUSED_OPSETS: Dict[str, tuple] = {}


def register_fused(name: str, standard: bool = False, opsets: tuple = (0, 0)
                   ) -> Callable[[FusedConverter], FusedConverter]:
    def deco(fn: FusedConverter) -> FusedConverter:
        FUSED_CONVERTERS[name] = fn
        if standard:
            STANDARD_CONVERTERS.add(name)
        if any(opsets):
            FUSED_OPSETS[name] = opsets
        return fn

    return deco


def fused_opset(names: Optional[Iterable[str]] = None, standard_ops: bool = False) -> int:
    """The opset the fused forms of `names` need (0: any); of every fused operator's form when None."""
    if names is None:
        return max((max(v) for v in FUSED_OPSETS.values()), default=0)
    return max((FUSED_OPSETS.get(n, (0, 0))[int(standard_ops)] for n in names), default=0)


def below_opset(opset: int) -> tuple:
    """The fused operators written as their decomposition at `opset` whatever the mode (their forms need newer)."""
    return tuple(n for n, (ort_form, std_form) in FUSED_OPSETS.items() if min(ort_form, std_form) > opset)


def target_below(ctx, name: str) -> bool:
    """Whether the export's opset is too old for the form of fused operator `name` in this export's mode."""
    need = FUSED_OPSETS.get(name, (0, 0))[int(ctx.standard_ops)]
    return ctx.target_opset is not None and ctx.target_opset < need


def _const(ctx, name: str) -> Optional[np.ndarray]:
    """The value of an initializer (None for a computed tensor)."""
    hit = ctx.initializers.get(name)
    return None if hit is None else np.asarray(hit[0])


def scalar_of(ctx, name: str) -> Optional[float]:
    v = _const(ctx, name)
    return None if v is None or v.size != 1 else float(v.reshape(-1)[0])


def _zero(ctx, name: str) -> bool:
    v = _const(ctx, name)
    return v is not None and not np.any(v)


def _elem(ctx, name: str) -> int:
    return ctx.types.get(name, TensorProto.FLOAT)


def _attention_bias(ctx, call, mask: str, query: str, key: str, sq: int, sk: int) -> Optional[str]:
    """The mask as the runtime's attention_bias [batch or 1, heads or 1, query, key] ("" for a zero mask); a mask
    broadcast along the query or key axis is expanded to the lengths of `query` / `key` at run time (any binding)."""
    if _zero(ctx, mask):
        return ""
    dims = static_dims(call.args[4].ty)
    if dims is None:
        return None
    full = [1] * (4 - len(dims)) + list(dims)
    m = ctx.unsqueeze(mask, range(4 - len(dims))) if len(dims) < 4 else mask  # no dim baked in: any binding
    if full[2] != sq or full[3] != sk:
        lengths = [ctx.dim_of(query, 1) if full[2] != sq else ctx.i64([1]),
                   ctx.dim_of(key, 1) if full[3] != sk else ctx.i64([1])]
        m = ctx.op("Expand", m, ctx.concat([ctx.i64([1, 1])] + lengths, 0))
    return m


def _guard(ctx, fill: Optional[str], out: str, mask: str) -> str:
    """The NaN guard's `fill` (None: no guard) applied to the fused node's output: IsNaN + Where with 0; none where
    the mask is finite (`finite_values`): a row of finite scores plus a finite mask has a softmax (the guard is
    torch's for a row masked entirely with -inf), so the guard could act only on inputs that hold NaN or infinite
    values already."""
    if fill is None or finite_values(ctx, mask):
        return out
    return ctx.op("Where", ctx.op("IsNaN", out), fill, out)


SAME_VALUES = ("Reshape", "Expand", "Unsqueeze", "Squeeze", "Transpose", "Identity")  # move values, make none
INTEGRAL = frozenset({TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                      TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})


def finite_values(ctx, name: str, depth: int = 8) -> bool:
    """Whether every value of tensor `name` is finite by construction: a finite constant, a Where choosing between
    such tensors (the masks exporters compute: 0 where a key is seen, float32's lowest where not), a cast from
    booleans or integers, or one of those reshaped or broadcast (`depth` producers back at most)."""
    v = _const(ctx, name)
    if v is not None:
        return v.dtype == bool or bool(np.isfinite(v).all())
    spec = ctx.producer.get(name)
    if spec is None or depth == 0 or spec.domain not in ("", "ai.onnx"):
        return False
    if spec.op_type == "Where":
        return all(finite_values(ctx, i, depth - 1) for i in spec.inputs[1:3])
    if spec.op_type == "Cast":  # to float32 or float64: no integer is beyond their range
        source = ctx.types.get(spec.inputs[0])
        return source == TensorProto.BOOL or source in INTEGRAL and spec.attrs.get("to") in (TensorProto.FLOAT,
                                                                                          TensorProto.DOUBLE)
    return spec.op_type in SAME_VALUES and finite_values(ctx, spec.inputs[0], depth - 1)


def _guard_ok(ctx, fill: Optional[str]) -> bool:
    """Whether the guard can follow the runtime's node: none, or a fill of 0 (what a NaN row of the node gives)."""
    return fill is None or _zero(ctx, fill)


def _fill(args, at: int) -> Optional[str]:
    """The NaN guard's fill: the call's input `at` when it has one."""
    return args[at] if len(args) > at else None


def _attention_node(ctx, call, attrs, args, op_type: str, inputs: list, q_arg: int, k_arg: int) -> Optional[str]:
    """ORT's attention node `op_type` over `inputs` + its attention_bias, then the NaN guard; None where the call
    has no such form (a scale that is not a constant, a fill that is not 0, shapes not static)."""
    s = scalar_of(ctx, args[3])
    qd, kd = static_dims(call.args[q_arg].ty), static_dims(call.args[k_arg].ty)
    if s is None or qd is None or kd is None or not _guard_ok(ctx, _fill(args, 5)):
        return None
    heads = int(attrs["num_heads"])
    bias = _attention_bias(ctx, call, args[4], args[q_arg], args[k_arg], qd[1], kd[1])
    if bias is None:
        return None
    out = ctx.node(op_type, inputs + ["", "", bias], domain=MS, out_types=[_elem(ctx, inputs[0])],
                   num_heads=heads, scale=s)[0]
    return _guard(ctx, _fill(args, 5), out, args[4])


@register_fused("mha")
def convert_mha(ctx, call, attrs, args) -> Optional[str]:
    return _attention_node(ctx, call, attrs, args, "MultiHeadAttention", [args[0], args[1], args[2]], 0, 1)


@register_fused("attention")
def convert_attention(ctx, call, attrs, args) -> Optional[str]:
    return _attention_node(ctx, call, attrs, args, "Attention", [args[0], args[1], args[2]], 0, 0)


ATTENTION_OPSET = 23  # ONNX's Attention (grouped heads, additive mask): ONNX Runtime runs it from 1.23 on


@register_fused("gqa", standard=True, opsets=(ATTENTION_OPSET, ATTENTION_OPSET))
def convert_gqa(ctx, call, attrs, args) -> Optional[str]:
    """ONNX 23's Attention on the 4-D query, key and value (kv heads fewer than the query's: its grouped form) with
    the mask as attn_mask (float32's lowest rewritten, `_off_lowest`), then the NaN guard; None below opset 23 (a
    model's opset is raised only where the caller asks for it), where the scale is not a constant or the mask is
    not float32."""
    out = _attention23(ctx, call, attrs, args, list(args[:3]), [], 1, {})
    return None if out is None else out[0]


def _attention23(ctx, call, attrs, args, qkv: list, past: list, n_out: int, heads: dict) -> Optional[list]:
    """ONNX 23's Attention on `qkv` (+ the past caches) with the mask (input len(qkv) + len(past) + 1 of the call)
    as attn_mask, then the NaN guard on its output; None below opset 23, where the scale is not a constant or the
    mask not a float32 tensor of at most 4 dims."""
    at = len(qkv) + len(past)
    s = scalar_of(ctx, args[at])
    mask = static_dims(call.args[at + 1].ty)
    fill = _fill(args, at + 2)
    if target_below(ctx, "gqa") or s is None or mask is None or len(mask) > 4 \
            or not _guard_ok(ctx, fill) or _elem(ctx, args[at + 1]) != TensorProto.FLOAT:
        return None
    m = "" if _zero(ctx, args[at + 1]) else ctx.memo(("attention_mask", args[at + 1]),
                                                     lambda: _off_lowest(ctx, args[at + 1]))
    elem = _elem(ctx, args[0])
    outs = ctx.node("Attention", qkv + [m] + past, n_out=n_out, out_types=[elem] * n_out, scale=s, **heads)
    return [_guard(ctx, fill, outs[0], args[at + 1])] + outs[1:]


@register_fused("gqa_heads", standard=True, opsets=(ATTENTION_OPSET, ATTENTION_OPSET))
def convert_gqa_heads(ctx, call, attrs, args) -> Optional[str]:
    """ONNX 23's Attention on the 3-D projections, q_num_heads and kv_num_heads given (see `convert_gqa`)."""
    heads = {"q_num_heads": int(attrs["num_heads"]), "kv_num_heads": int(attrs["kv_num_heads"])}
    out = _attention23(ctx, call, attrs, args, list(args[:3]), [], 1, heads)
    return None if out is None else out[0]


@register_fused("gqa_heads_cache", standard=True, opsets=(ATTENTION_OPSET, ATTENTION_OPSET))
def convert_gqa_heads_cache(ctx, call, attrs, args) -> Optional[list]:
    """ONNX 23's Attention on the 3-D projections with past_key and past_value: its outputs are the attention's
    and the present caches (the concatenation inside the kernel)."""
    heads = {"q_num_heads": int(attrs["num_heads"]), "kv_num_heads": int(attrs["kv_num_heads"])}
    return _attention23(ctx, call, attrs, args, list(args[:3]), list(args[3:5]), 3, heads)


NEAR_LOWEST = -3.0e38  # a mask value that ONNX Runtime's Attention adds like any other (float32's lowest it takes
# for -inf: a row masked with it entirely gives 0 there, where softmax of equal scores averages the values)


def _off_lowest(ctx, mask: str) -> str:
    """The mask with float32's lowest (torch's masked_fill value, finfo.min) written as NEAR_LOWEST: the same scores
    after adding q kᵀ (both swamp it) and the same softmax, also for a row masked entirely (the average of the
    values: the decomposition's result, and torch's); -inf stays -inf (such a row is NaN, then the guard's 0)."""
    lowest = np.finfo(np.float32).min
    spec = ctx.producer.get(mask)
    if spec is not None and spec.op_type == "Where" and spec.domain in ("", "ai.onnx") \
            and all(_const(ctx, i) is not None for i in spec.inputs[1:3]):
        # the exporter's mask, a choice between constants: the same choice between the constants rewritten
        values = [_const(ctx, i) for i in spec.inputs[1:3]]
        if not any(np.any(v == lowest) for v in values):
            return mask
        branches = [ctx.const(np.where(v == lowest, np.float32(NEAR_LOWEST), v).astype(np.float32)) for v in values]
        return ctx.op("Where", spec.inputs[0], *branches)
    low = ctx.const(np.array(lowest, np.float32))
    near = ctx.const(np.array(NEAR_LOWEST, np.float32))
    return ctx.op("Where", ctx.op("Equal", mask, low), near, mask)


def skip_layernorm_inputs(ctx, call, args, bias_at: int = 4) -> Optional[list]:
    """SkipLayerNormalization's inputs [x, skip, gamma, beta(, bias)] for a call of skip_layernorm(_sum) (`bias_at`
    3: SkipSimplifiedLayerNormalization's [x, skip, gamma(, bias)] for skip_rmsnorm(_sum)); None where the bias is
    not zero and not a vector of the last axis (the decomposition is written)."""
    x, skip, params, bias = args[0], args[1], [args[i] for i in range(2, bias_at)], args[bias_at]
    narrow = ctx.initializers.keys() | ctx.broadcast_inputs
    if x in narrow and skip not in narrow:
        # ORT takes the batch from the first input and lets only the skip broadcast ([1, S, H], [S, H]): a constant
        # or an input with a fixed 1 (a position table) goes second, whatever the binding's shapes said (the sum
        # is symmetric)
        x, skip = skip, x
    inputs = [x, skip, *params]
    if not _zero(ctx, bias):
        h = static_dims(call.args[0].ty)
        if h is None or static_dims(call.args[bias_at].ty) != h[-1:]:  # a scalar bias: the decomposition
            return None
        inputs.append(bias)
    return inputs


@register_fused("skip_layernorm")
def convert_skip_layernorm(ctx, call, attrs, args) -> Optional[str]:
    inputs = skip_layernorm_inputs(ctx, call, args)
    if inputs is None:
        return None
    eps = float(attrs["epsilon"]) if len(args) == 5 else scalar_of(ctx, args[5])
    if eps is None:  # an epsilon computed at run time: the decomposition
        return None
    return ctx.node("SkipLayerNormalization", inputs, domain=MS, out_types=[_elem(ctx, args[0])], epsilon=eps)[0]


@register_fused("bias_gelu")
def convert_bias_gelu(ctx, call, attrs, args) -> str:
    return ctx.node("BiasGelu", [args[0], args[1]], domain=MS, out_types=[_elem(ctx, args[0])])[0]


@register_fused("fast_gelu")
def convert_fast_gelu(ctx, call, attrs, args) -> str:
    return ctx.node("FastGelu", [args[0], args[1]], domain=MS, out_types=[_elem(ctx, args[0])])[0]


GELU_CONSTANTS = (1 / np.sqrt(2.0), 1.0, 0.5)  # r, o, h of erf_gelu that make it GELU
TANH_GELU_CONSTANTS = (np.sqrt(2 / np.pi), 0.044715, 1.0, 0.5)  # k, c, o, h of tanh_gelu that make it FastGelu
GELU_RTOL = 1e-6  # float32 rounding of the exporters' constants


def _gelu_inputs(ctx, call, args, constants: tuple) -> Optional[list]:
    """[x] or [x, bias] of a GELU form whose trailing constant inputs are `constants` (to float32 rounding) and
    whose bias, when it has one, is a vector of x's last axis; None otherwise (the decomposition is written)."""
    n = len(constants)
    consts = [scalar_of(ctx, a) for a in args[len(args) - n:]]
    if any(c is None for c in consts) or not np.allclose(consts, constants, rtol=GELU_RTOL, atol=0):
        return None
    if len(args) == n + 1:
        return [args[0]]
    b, h = static_dims(call.args[1].ty), static_dims(call.args[0].ty)
    return None if b is None or h is None or b != h[-1:] else [args[0], args[1]]


@register_fused("erf_gelu")
def convert_erf_gelu(ctx, call, attrs, args) -> Optional[str]:
    inputs = _gelu_inputs(ctx, call, args, GELU_CONSTANTS)
    if inputs is None:
        return None
    return ctx.node("BiasGelu" if len(inputs) == 2 else "Gelu", inputs, domain=MS, out_types=[_elem(ctx, args[0])])[0]


@register_fused("tanh_gelu")
def convert_tanh_gelu(ctx, call, attrs, args) -> Optional[str]:
    inputs = _gelu_inputs(ctx, call, args, TANH_GELU_CONSTANTS)
    if inputs is None:
        return None
    return ctx.node("FastGelu", inputs, domain=MS, out_types=[_elem(ctx, args[0])])[0]


@register_fused("quick_gelu")
def convert_quick_gelu(ctx, call, attrs, args) -> Optional[str]:
    alpha = float(attrs["alpha"]) if len(args) == 1 else scalar_of(ctx, args[1])
    if alpha is None:  # alpha computed at run time: the decomposition
        return None
    return ctx.node("QuickGelu", [args[0]], domain=MS, out_types=[_elem(ctx, args[0])], alpha=float(alpha))[0]


@register_fused("fused_matmul")
def convert_fused_matmul(ctx, call, attrs, args) -> str:
    return ctx.node("FusedMatMul", [args[0], args[1]], domain=MS, out_types=[_elem(ctx, args[0])],
                    transA=int(attrs["trans_a"]), transB=int(attrs["trans_b"]), alpha=float(attrs["alpha"]))[0]


__all__ = ["FUSED_CONVERTERS", "register_fused", "skip_layernorm_inputs", "scalar_of", "MS"]
