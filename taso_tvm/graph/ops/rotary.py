"""Rotary position embeddings (Llama-family decoders), defined by their decomposition (`decompose.py`).

| operator | semantics | ONNX Runtime |
|---|---|---|
| `rotary(x, cos, sin)` | x * [cos, cos] + [-x2, x1] * [sin, sin] on the last axis | RotaryEmbedding (com.microsoft) |

x is [..., D] with halves x1 = x[..., :D/2] and x2 = x[..., D/2:] (transformers' `rotate_half`: the half rotation,
not the interleaved one); cos and sin are the half tables [..., D/2], broadcast against x's halves (one row per
position: [1, 1, S, D/2] for x [B, heads, S, D]). The full tables exporters write are the half tables concatenated
with themselves (`cos(cat(freqs, freqs))`), which is what lets the rules fuse them: the fused operator takes halves.
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from ..types import GraphError, TensorType


def _rotary(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    v, cos, sin = x
    d = e.shape(v)[-1]
    axis = len(e.shape(v)) - 1
    x1 = e.op("slice", v, axis=axis, begin=0, end=d // 2)
    x2 = e.op("slice", v, axis=axis, begin=d // 2, end=d)
    rot = e.op("concat", e.op("neg", x2), x1, axis=-1)
    full_cos = e.op("concat", cos, cos, axis=-1)
    full_sin = e.op("concat", sin, sin, axis=-1)
    return [e.op("add", e.op("mul", v, full_cos), e.op("mul", rot, full_sin))]


def _rotary_check(t: Sequence[TensorType], a: dict) -> None:
    x, cos, sin = t
    d = x.shape[-1] if x.ndim else 0
    if x.ndim < 2 or d % 2 or cos.shape != sin.shape or cos.ndim != x.ndim or cos.shape[-1] != d // 2:
        raise GraphError(f"rotary: shapes {[ty.shape for ty in t]} do not fit (x [..., D], tables [..., D/2])")
    for a_, b_ in zip(x.shape[:-1], cos.shape[:-1]):
        if b_ not in (1, a_):
            raise GraphError(f"rotary: tables {cos.shape} do not broadcast against {x.shape}")


ROTARY = register_decomposed(
    "rotary", 3, _rotary, attrs={}, check=_rotary_check,
    doc="rotary position embedding, half rotation: x * [cos, cos] + rotate_half(x) * [sin, sin] (half tables)")

__all__ = ["ROTARY"]
