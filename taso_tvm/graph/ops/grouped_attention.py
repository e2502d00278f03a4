"""Attention on head-split tensors whose keys and values may have fewer heads than the queries (grouped-query
attention, Llama-family decoders): the form torch's scaled_dot_product_attention takes.

| operator | decomposition | ONNX |
|---|---|---|
| `gqa(q, k, v, scale, mask[, fill])` | softmax(q repeat(k)ᵀ · scale + mask) repeat(v) | Attention (23) |
| `gqa_heads(q, k, v, scale, mask[, fill])` | `gqa` of the heads split, heads merged | Attention (23), 3-D |
| `gqa_heads_cache(q, k, v, past_k, past_v, scale, mask[, fill])` | [`gqa_heads` over the cache, the caches] | Attention (23), 3-D, past |

q is [batch, heads, query, head size], k [batch, kv heads, key, head size], v [batch, kv heads, key, value size],
heads a multiple of kv heads; `repeat` gives every kv head to heads / kv heads query heads in a row, as
transformers' repeat_kv does (unsqueeze, expand, reshape); the output is [batch, heads, query, value size].
`scale`, `mask` and `fill` are as for `mha` (fused.py): a scalar weight, an additive mask broadcasting to
[batch, heads, query, key], and the NaN guard's value for a row whose every key is masked with -inf.

`gqa_heads` takes the projections as they come out of their products, [batch, sequence, heads * head size]
(`num_heads` and `kv_num_heads` attributes), splits the heads (reshape, transpose), runs `gqa` and merges the heads
of the result: ONNX 23's Attention on 3-D inputs, without the transposes around it. `gqa_heads_cache` is the decode
step of a model with a KV cache: the new keys and values, heads split, are appended to the past ones
([batch, kv heads, past, head size], on the sequence axis) and the queries attend over the whole; its outputs are the
attention's and the two present caches (Attention's present_key and present_value).
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .fused import check_arity, check_mask, check_scalar, merge_heads, split_heads
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


def _gqa_heads(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    q, k, v = (split_heads(e, t, n) for t, n in zip(x[:3], (a["num_heads"], a["kv_num_heads"], a["kv_num_heads"])))
    return [merge_heads(e, _gqa(e, [q, k, v, *x[3:]], a)[0])]


def _gqa_heads_cache(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    q = split_heads(e, x[0], a["num_heads"])
    k, v = (e.op("concat", past, split_heads(e, t, a["kv_num_heads"]), axis=2) for t, past in zip(x[1:3], x[3:5]))
    return [merge_heads(e, _gqa(e, [q, k, v, *x[5:]], a)[0]), k, v]


def _heads_check(name: str, t: Sequence[TensorType], a: dict) -> None:
    h, hk = a["num_heads"], a["kv_num_heads"]
    if not all(isinstance(n, int) and n > 0 for n in (h, hk)) or h % hk:
        raise GraphError(f"{name}: num_heads {h!r} must be a positive multiple of kv_num_heads {hk!r}")
    q, k, v = t[:3]
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise GraphError(f"{name}: query, key and value must be [batch, sequence, heads * head size]")
    widths = (q.shape[2], k.shape[2], v.shape[2])
    if not all(isinstance(w, int) for w in widths) or q.shape[2] % h or k.shape[2] % hk or v.shape[2] % hk \
            or q.shape[2] // h != k.shape[2] // hk or k.shape[:2] != v.shape[:2] or q.shape[0] != k.shape[0]:
        raise GraphError(f"{name}: shapes {q.shape}, {k.shape}, {v.shape} do not fit {h} and {hk} heads")


def _gqa_heads_check(t: Sequence[TensorType], a: dict) -> None:
    _heads_check("gqa_heads", t, a)
    check_arity("gqa_heads", t)


def _gqa_heads_cache_check(t: Sequence[TensorType], a: dict) -> None:
    _heads_check("gqa_heads_cache", t, a)
    check_arity("gqa_heads_cache", [*t[:3], *t[5:]])
    k, v, pk, pv = t[1], t[2], t[3], t[4]
    want = (k.shape[0], a["kv_num_heads"])
    if pk.ndim != 4 or pv.ndim != 4 or tuple(pk.shape[:2]) != want or tuple(pv.shape[:2]) != want \
            or pk.shape[2] != pv.shape[2] or pk.shape[3] != k.shape[2] // want[1] or pv.shape[3] != v.shape[2] // want[1]:
        raise GraphError(f"gqa_heads_cache: past caches {pk.shape}, {pv.shape} do not fit keys {k.shape}, values "
                         f"{v.shape} of {want[1]} heads")


GQA_HEADS = register_decomposed(
    "gqa_heads", None, _gqa_heads, attrs={"num_heads": None, "kv_num_heads": None}, check=_gqa_heads_check,
    doc="grouped-query attention on [B, S, heads * D] projections: heads split, gqa, heads merged")

GQA_HEADS_CACHE = register_decomposed(
    "gqa_heads_cache", None, _gqa_heads_cache, attrs={"num_heads": None, "kv_num_heads": None},
    check=_gqa_heads_cache_check,
    doc="gqa_heads over past + new keys and values (a decode step with a KV cache): [output, present key, "
        "present value]")

__all__ = ["GQA", "GQA_HEADS", "GQA_HEADS_CACHE", "repeat_heads"]
