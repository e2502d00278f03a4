"""How many of a model's attention blocks, layer norms and GELUs run as ONNX Runtime's fused operators, and how many
there are (the summary's `fused` line: a model is only as fused as its least lucky layer).

Counted on the model as written: a kind's fused operators, and its instances left unfused, taken as the operators
that remain of it: a Softmax for an attention, a LayerNormalization (or a layer norm in pieces: two ReduceMeans) for
a layer norm, an Erf for a GELU. A layer norm counts as fused when ONNX Runtime's optimizer fuses it too: with its
residual sum (SkipLayerNormalization) or its embeddings (EmbedLayerNormalization).
"""
from __future__ import annotations

from collections import Counter

import onnx

FUSED = {
    "attention": ("Attention", "MultiHeadAttention", "PackedAttention", "PackedMultiHeadAttention",
                  "GroupQueryAttention", "DecoderMaskedSelfAttention", "DecoderMaskedMultiHeadAttention"),
    "layer norm": ("SkipLayerNormalization", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization"),
    "GELU": ("Gelu", "BiasGelu", "FastGelu", "QuickGelu"),
}
MS_DOMAIN = "com.microsoft"


def fused_census(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """{kind: (fused, of how many)} for the kinds the model has (its top-level graph)."""
    ops = Counter(n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx", MS_DOMAIN))
    left = {"attention": ops["Softmax"], "layer norm": ops["LayerNormalization"] + ops["ReduceMean"] // 2,
            "GELU": ops["Erf"]}
    out = {}
    for kind, names in FUSED.items():
        done = sum(ops[name] for name in names)  # standard ONNX's Attention (23) and Gelu (20) count too
        if done + left[kind]:
            out[kind] = (done, done + left[kind])
    return out


def census_line(census: dict[str, tuple[int, int]]) -> str:
    """'attention 6 of 6, layer norm 13 of 13, GELU 6 of 6' (or '-' for a model with none of them)."""
    return ", ".join(f"{kind} {done} of {total}" for kind, (done, total) in census.items()) or "-"


__all__ = ["fused_census", "census_line", "FUSED"]
