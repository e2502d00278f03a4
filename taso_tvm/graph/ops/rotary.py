"""Rotary position embeddings (Llama-family decoders), defined by their decomposition (`decompose.py`).

| operator | semantics | ONNX Runtime |
|---|---|---|
| `rotary(x, cos, sin)` | x * [cos, cos] + [-x2, x1] * [sin, sin] on the last axis | RotaryEmbedding (com.microsoft) |
| `rotary_heads(x, cos, sin)` | `rotary` of each head of x [B, S, heads * D] (or of its first `rotary_dim`) | RotaryEmbedding, 3-D input |

x is [..., D] with halves x1 = x[..., :D/2] and x2 = x[..., D/2:] (transformers' `rotate_half`: the half rotation);
with `interleaved` (Cohere's, GPT-J's `rotate_every_two`; ONNX Runtime's `interleaved=1`) the pairs x[2i], x[2i + 1]
rotate together, the tables' entries each repeated twice in place (`repeat_interleave(freqs, 2)`). cos and sin are the half tables [..., D/2], broadcast against x's halves (one row per
position: [1, 1, S, D/2] for x [B, heads, S, D]). The full tables exporters write are the half tables concatenated
with themselves (`cos(cat(freqs, freqs))`), which is what lets the rules fuse them: the fused operator takes halves.

`rotary_heads` rotates the projection as its product gives it, [B, S, heads * D] (`num_heads` attribute), with the
tables [1 or B, S, D/2]: the heads split by a reshape to [B, S, heads, D], rotated, merged back. With `rotary_dim`
R < D (GPT-J's `rotary_dim`, a partial rotary: ONNX Runtime's `rotary_embedding_dim`) only the first R entries of
each head rotate, by tables [1 or B, S, R/2]; the other D - R are kept. The runtimes'
RotaryEmbedding take this 3-D form, which spares the transposes to [B, heads, S, D] where the attention takes 3-D
inputs too (`gqa_heads`).
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .slice import INT64_MAX
from ..types import GraphError, TensorType


def _pairs(e: Evaluator, t: Any, width: int) -> Any:
    """t [..., n] as [..., n, 1]: each entry of the last axis a pair's first (or only) half."""
    return e.op("reshape", t, shape=tuple(e.shape(t)[:-1]) + (width, 1))


def _rotary(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    v, cos, sin = x
    shape = tuple(e.shape(v))
    d, axis = shape[-1], len(shape) - 1
    if not a.get("interleaved"):
        x1 = e.op("slice", v, axis=axis, begin=0, end=d // 2)
        x2 = e.op("slice", v, axis=axis, begin=d // 2, end=d)
        rot = e.op("concat", e.op("neg", x2), x1, axis=-1)
        full_cos = e.op("concat", cos, cos, axis=-1)
        full_sin = e.op("concat", sin, sin, axis=-1)
        return [e.op("add", e.op("mul", v, full_cos), e.op("mul", rot, full_sin))]
    # the pairs (x[2i], x[2i + 1]) rotated by the angle of entry i: the tables' entries each repeated twice in place
    x1 = e.op("slice_step", v, axis=axis, begin=0, end=INT64_MAX, step=2)
    x2 = e.op("slice_step", v, axis=axis, begin=1, end=INT64_MAX, step=2)
    rot = e.op("reshape", e.op("concat", _pairs(e, e.op("neg", x2), d // 2), _pairs(e, x1, d // 2), axis=-1),
               shape=shape)

    def repeated(t: Any) -> Any:
        tshape = tuple(e.shape(t))
        twice = e.op("broadcast_to", _pairs(e, t, d // 2), shape=tshape + (2,))
        return e.op("reshape", twice, shape=tshape[:-1] + (d,))

    return [e.op("add", e.op("mul", v, repeated(cos)), e.op("mul", rot, repeated(sin)))]


def _interleaved_check(name: str, a: dict) -> None:
    if a.get("interleaved", 0) not in (0, 1):
        raise GraphError(f"{name}: interleaved is {a['interleaved']!r}, not 0 or 1")


def _rotary_check(t: Sequence[TensorType], a: dict) -> None:
    _interleaved_check("rotary", a)
    x, cos, sin = t
    d = x.shape[-1] if x.ndim else 0
    if x.ndim < 2 or d % 2 or cos.shape != sin.shape or cos.ndim != x.ndim or cos.shape[-1] != d // 2:
        raise GraphError(f"rotary: shapes {[ty.shape for ty in t]} do not fit (x [..., D], tables [..., D/2])")
    for a_, b_ in zip(x.shape[:-1], cos.shape[:-1]):
        if b_ not in (1, a_):
            raise GraphError(f"rotary: tables {cos.shape} do not broadcast against {x.shape}")


ROTARY = register_decomposed(
    "rotary", 3, _rotary, attrs={"interleaved": 0}, check=_rotary_check,
    doc="rotary position embedding, half rotation: x * [cos, cos] + rotate_half(x) * [sin, sin] (half tables); "
        "interleaved: the pairs (x[2i], x[2i + 1]) rotated, the tables' entries each repeated twice")


def _rotary_heads(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    v, cos, sin = x
    b, s, w = e.shape(v)
    n, rd = a["num_heads"], a.get("rotary_dim") or 0
    heads = e.op("reshape", v, shape=(b, s, n, w // n))
    tables = [e.op("reshape", t, shape=(e.shape(t)[0], s, 1, e.shape(t)[2])) for t in (cos, sin)]
    if not rd or rd == w // n:
        return [e.op("reshape", _rotary(e, [heads, *tables], a)[0], shape=(b, s, w))]
    rotated = _rotary(e, [e.op("slice", heads, axis=3, begin=0, end=rd), *tables], a)[0]
    kept = e.op("slice", heads, axis=3, begin=rd, end=w // n)
    return [e.op("reshape", e.op("concat", rotated, kept, axis=-1), shape=(b, s, w))]


def _rotary_heads_check(t: Sequence[TensorType], a: dict) -> None:
    _interleaved_check("rotary_heads", a)
    x, cos, sin = t
    n, rd = a["num_heads"], a.get("rotary_dim", 0)
    if not isinstance(n, int) or n < 1 or x.ndim != 3 or not isinstance(x.shape[2], int) or x.shape[2] % (2 * n):
        raise GraphError(f"rotary_heads: {x.shape} is not [batch, sequence, {n!r} heads of an even size]")
    head = x.shape[2] // n
    if not isinstance(rd, int) or rd < 0 or rd % 2 or rd > head:
        raise GraphError(f"rotary_heads: rotary_dim {rd!r} is not an even size up to the head size {head} "
                         f"(0: the whole head)")
    if cos.shape != sin.shape or cos.ndim != 3 or cos.shape[2] != (rd or head) // 2 \
            or cos.shape[0] not in (1, x.shape[0]) or cos.shape[1] != x.shape[1]:
        raise GraphError(f"rotary_heads: tables {cos.shape}, {sin.shape} do not fit {x.shape} of {n} heads "
                         f"([1 or batch, sequence, rotary size / 2])")


ROTARY_HEADS = register_decomposed(
    "rotary_heads", 3, _rotary_heads, attrs={"num_heads": None, "interleaved": 0, "rotary_dim": 0},
    check=_rotary_heads_check,
    doc="rotary position embedding of each head of x [B, S, heads * D], half tables [1 or B, S, R/2]: the first "
        "R = rotary_dim entries of each head rotated (0: all D), the others kept")

__all__ = ["ROTARY", "ROTARY_HEADS"]
