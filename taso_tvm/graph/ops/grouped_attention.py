"""Attention on head-split tensors whose keys and values may have fewer heads than the queries (grouped-query
attention, Llama-family decoders): the form torch's scaled_dot_product_attention takes.

| operator | decomposition | ONNX |
|---|---|---|
| `gqa(q, k, v, scale, mask[, fill])` | softmax(q repeat(k)ᵀ · scale + mask) repeat(v) | Attention (23) |

q is [batch, heads, query, head size], k [batch, kv heads, key, head size], v [batch, kv heads, key, value size],
heads a multiple of kv heads; `repeat` gives every kv head to heads / kv heads query heads in a row, as
transformers' repeat_kv does (unsqueeze, expand, reshape); the output is [batch, heads, query, value size].
`scale`, `mask` and `fill` are as for `mha` (fused.py): a scalar weight, an additive mask broadcasting to
[batch, heads, query, key], and the NaN guard's value for a row whose every key is masked with -inf.
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .fused import check_arity, check_mask, check_scalar
from ..types import GraphError, TensorType


def repeat_heads(e: Evaluator, x: Any, times: int) -> Any:
    """[B, Hk, T, D] -> [B, Hk * times, T, D], each head repeated `times` times in a row (repeat_kv)."""
    if times == 1:
        return x
    b, hk, t, d = e.shape(x)
    five = e.op("reshape", x, shape=(b, hk, 1, t, d))
    wide = e.op("broadcast_to", five, shape=(b, hk, times, t, d))
    return e.op("reshape", wide, shape=(b, hk * times, t, d))


def _gqa(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    q, k, v, scale, mask = x[:5]
    times = e.shape(q)[1] // e.shape(k)[1]
    kt = e.op("transpose", repeat_heads(e, k, times), perm=(0, 1, 3, 2))
    p = e.op("softmax", e.op("add", e.op("mul", e.op("matmul", q, kt), scale), mask), axis=-1)
    if len(x) > 5:
        p = e.op("where", e.op("isnan", p), x[5], p)
    return [e.op("matmul", p, repeat_heads(e, v, times))]


def _gqa_check(t: Sequence[TensorType], a: dict) -> None:
    check_arity("gqa", t)
    q, k, v, scale, mask = t[:5]
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise GraphError("gqa: query, key and value must be [batch, heads, sequence, head size]")
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise GraphError(f"gqa: shapes {q.shape}, {k.shape}, {v.shape} do not fit")
    if not isinstance(q.shape[1], int) or not isinstance(k.shape[1], int) or q.shape[1] % k.shape[1]:
        raise GraphError(f"gqa: {q.shape[1]} query heads are not a multiple of {k.shape[1]} key heads")
    check_scalar("gqa", scale)
    check_mask("gqa", mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))


GQA = register_decomposed(
    "gqa", None, _gqa, attrs={}, check=_gqa_check,
    doc="attention on [B, heads, S, D] queries and [B, kv heads, T, D] keys and values, each kv head serving "
        "heads / kv heads queries: softmax(q kᵀ · scale + mask) v")

__all__ = ["GQA", "repeat_heads"]
