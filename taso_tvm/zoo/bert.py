"""BERT-base encoder stack (post-LN) on a precomputed embeddings tensor."""

from __future__ import annotations

import math

import onnx

from .builder import GraphBuilder


def _gelu(b: GraphBuilder, x: str) -> str:
    """Exact Gelu via Erf: ``x * 0.5 * (1 + erf(x / sqrt(2)))``."""
    e = b.erf(b.div(x, b.const(math.sqrt(2.0))))
    return b.mul(b.mul(x, b.add(e, b.const(1.0))), b.const(0.5))


def _layer(b: GraphBuilder, x: str, seq: int, hidden: int, heads: int, ffn: int) -> str:
    dh = hidden // heads

    def split_heads(t: str, perm: list[int]) -> str:
        return b.transpose(b.reshape(t, [1, seq, heads, dh]), perm)

    q = split_heads(b.linear(x, hidden), [0, 2, 1, 3])  # [1, H, S, dh]
    k = split_heads(b.linear(x, hidden), [0, 2, 3, 1])  # [1, H, dh, S]
    v = split_heads(b.linear(x, hidden), [0, 2, 1, 3])  # [1, H, S, dh]
    scores = b.div(b.matmul(q, k), b.const(math.sqrt(dh)))
    ctx = b.matmul(b.softmax(scores, axis=-1), v)
    ctx = b.reshape(b.transpose(ctx, [0, 2, 1, 3]), [1, seq, hidden])
    x = b.layernorm(b.add(b.linear(ctx, hidden), x))
    h = b.linear(_gelu(b, b.linear(x, ffn)), hidden)
    return b.layernorm(b.add(h, x))


def bert(seed: int = 0, layers: int = 12, seq_len: int = 128, hidden: int = 768, heads: int = 12,
         ffn: int = 3072) -> onnx.ModelProto:
    """BERT-base encoder: ``layers`` transformer layers on an input of shape [1, seq_len, hidden]."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} not divisible by heads {heads}")
    b = GraphBuilder("bert", seed)
    x = b.input("input", (1, seq_len, hidden))
    for _ in range(layers):
        x = _layer(b, x, seq_len, hidden, heads, ffn)
    return b.build(x, doc=f"BERT encoder, {layers} layers, hidden {hidden}, {heads} heads")
