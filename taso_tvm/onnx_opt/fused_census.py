"""How many of a model's attention blocks, layer norms and GELUs run as ONNX Runtime's fused operators, and how many
there are (the summary's `fused` line: a model is only as fused as its least lucky layer).

Counted on the model as written: a kind's fused operators, and its instances left unfused, taken as the operators
that remain of it: a Softmax for an attention, a LayerNormalization of a sum (or a layer norm in pieces: two
ReduceMeans) for a layer norm, an Erf for a GELU. A layer norm of a sum counts as fused when ONNX Runtime's optimizer
fuses it too: with its residual sum (SkipLayerNormalization) or its embeddings (EmbedLayerNormalization); one of a
value no Add computes (a decoder's first, on the token embeddings alone) is as fused as it can be, one operator.
RMS norms (decoders) count as layer norms: fused with their residual sum (SkipSimplifiedLayerNormalization), as
SimplifiedLayerNormalization or ONNX 23's RMSNormalization, or written in the pieces ONNX Runtime fuses into
SimplifiedLayerNormalization when it loads the model (Pow 2, ReduceMean, Add, Sqrt, Div); in other pieces (torch's
Reciprocal of the Sqrt) they are left unfused.
Rotary embeddings: RotaryEmbedding, or inside a GroupQueryAttention (query and key); left: transformers' rotate_half
(a Neg of one half concatenated with the other) or the interleaved rotate_every_two (the same on pairs).
"""
from __future__ import annotations

from collections import Counter

import onnx

from .graph_match import GraphView

FUSED = {
    "attention": ("Attention", "MultiHeadAttention", "PackedAttention", "PackedMultiHeadAttention",
                  "GroupQueryAttention", "DecoderMaskedSelfAttention", "DecoderMaskedMultiHeadAttention"),
    "layer norm": ("SkipLayerNormalization", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization",
                   "SimplifiedLayerNormalization", "RMSNormalization"),
    "GELU": ("Gelu", "BiasGelu", "FastGelu", "QuickGelu"),
    "rotary": ("RotaryEmbedding",),
}
MS_DOMAIN = "com.microsoft"


def fused_census(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """{kind: (fused, of how many)} for the kinds the model has (its top-level graph)."""
    ops = Counter(n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx", MS_DOMAIN))
    ln_pieces, rms_at_load, rms_left = _norms_in_pieces(model.graph)
    alone = _norms_of_no_sum(model.graph)
    left = {"attention": ops["Softmax"], "layer norm": ops["LayerNormalization"] - alone + ln_pieces + rms_left,
            "GELU": ops["Erf"], "rotary": _rotate_halves(model.graph)}
    out = {}
    for kind, names in FUSED.items():
        done = sum(ops[name] for name in names)  # standard ONNX's Attention (23) and Gelu (20) count too
        done += rms_at_load + alone if kind == "layer norm" else 0
        if kind == "rotary":  # GroupQueryAttention with do_rotary rotates the query and the key inside
            done += 2 * sum(1 for n in model.graph.node if n.op_type == "GroupQueryAttention"
                            and any(a.name == "do_rotary" and a.i for a in n.attribute))
        if done + left[kind]:
            out[kind] = (done, done + left[kind])
    return out


def _norms_of_no_sum(graph: onnx.GraphProto) -> int:
    """LayerNormalization nodes whose input no Add computes: nothing to fuse them with (Skip or Embed forms)."""
    adds = {o for n in graph.node if n.op_type == "Add" for o in n.output}
    return sum(1 for n in graph.node if n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx")
               and n.input[0] not in adds)


def _norms_in_pieces(graph: onnx.GraphProto) -> tuple[int, int, int]:
    """(layer norms in pieces, RMS norms in the pieces ONNX Runtime fuses at load, other RMS norms in pieces), told
    apart by the ReduceMean of a square (Pow 2 or x * x): of x - mean, a layer norm's variance; of x, an RMS norm."""
    view = GraphView(graph)

    def only(name: str, op: str):
        r = view.readers.get(name, [])
        return r[0] if len(r) == 1 and r[0].op_type == op else None

    ln = at_load = other = 0
    for n in graph.node:
        sq = view.prod.get(n.input[0]) if n.op_type == "ReduceMean" and n.input else None
        if sq is None or sq.op_type not in ("Pow", "Mul") or (sq.op_type == "Mul" and sq.input[0] != sq.input[1]):
            continue
        x = view.prod.get(sq.input[0])
        if x is not None and x.op_type == "Sub":
            ln += 1
            continue
        add = only(n.output[0], "Add")
        root = only(add.output[0], "Sqrt") if add is not None else None
        div = only(root.output[0], "Div") if root is not None else None
        if sq.op_type == "Pow" and div is not None and div.input[0] == sq.input[0]:
            at_load += 1
        else:
            other += 1
    return ln, at_load, other


def _rotate_halves(graph: onnx.GraphProto) -> int:
    """Rotary embeddings in pieces: transformers' rotate_half, a Neg of one half concatenated with the other; or the
    interleaved rotation (rotate_every_two), each half unsqueezed to pairs first: Concat(Unsqueeze(Neg(...)), ...)."""
    producer = {o: n for n in graph.node for o in n.output if o}

    def negated(name: str) -> bool:
        n = producer.get(name)
        if n is not None and n.op_type in ("Unsqueeze", "Reshape"):
            n = producer.get(n.input[0])
        return n is not None and n.op_type == "Neg"

    return sum(1 for n in graph.node if n.op_type == "Concat" and len(n.input) == 2 and negated(n.input[0]))


def census_line(census: dict[str, tuple[int, int]]) -> str:
    """'attention 6 of 6, layer norm 13 of 13, GELU 6 of 6' (or '-' for a model with none of them)."""
    return ", ".join(f"{kind} {done} of {total}" for kind, (done, total) in census.items()) or "-"


__all__ = ["fused_census", "census_line", "FUSED"]
