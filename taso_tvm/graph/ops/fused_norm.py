"""Fused layer norms with extra outputs or gathers, each defined by its decomposition (`decompose.py`).

| operator | decomposition | ONNX Runtime (com.microsoft) |
|---|---|---|
| `skip_layernorm_sum(x, skip, gamma, beta, bias)` | [layer norm of s, s], s = x + bias + skip | SkipLayerNormalization (outputs 0 and 3) |
| `embed_layernorm(ids, [segment_ids,] word, position, [segment,] gamma, beta, position_ids)` | layer norm of word[ids] + position[position_ids] (+ segment[segment_ids]) | EmbedLayerNormalization |

`skip_layernorm_sum` is the pre-norm residual block (GPT-2, ViT): the sum x + skip is the residual stream read
again later, so it is an output of the fused node (ONNX Runtime's `input_skip_bias_sum`, output index 3).
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .fused import SKIP_LAYERNORM
from ..types import GraphError


def _skip_ln_sum(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    inp, skip, gamma, beta, bias = x
    s = e.op("add", e.op("add", inp, bias), skip)
    return [e.op("layernorm", s, gamma, beta, axes=(-1,), epsilon=a["epsilon"]), s]


def _skip_ln_sum_check(t: Sequence[Any], a: dict) -> None:
    SKIP_LAYERNORM.infer(t, a)  # the same inputs as skip_layernorm


SKIP_LAYERNORM_SUM = register_decomposed(
    "skip_layernorm_sum", 5, _skip_ln_sum, attrs={"epsilon": 1e-5}, check=_skip_ln_sum_check,
    doc="[layer norm (last axis) of s, s] with s = input + bias + skip: the norm and the residual stream")



def _embed_ln(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    """word[ids] + position[position_ids] (+ segment[segment_ids]), layer-normalized on the last axis."""
    if len(x) == 8:
        ids, seg_ids, word, pos, seg, gamma, beta, pos_ids = x
    else:
        (ids, word, pos, gamma, beta, pos_ids), seg_ids = x, None
    s = e.op("add", e.op("take", word, ids), e.op("take", pos, pos_ids))
    if seg_ids is not None:
        s = e.op("add", s, e.op("take", seg, seg_ids))
    return [e.op("layernorm", s, gamma, beta, axes=(-1,), epsilon=a["epsilon"])]


def _embed_index_inputs(n: int) -> tuple:
    return (0, 1, 7) if n == 8 else (0, 5)


def _embed_ln_check(t: Sequence[Any], a: dict) -> None:
    if len(t) not in (6, 8):
        raise GraphError(f"embed_layernorm: takes 6 inputs (8 with segments), got {len(t)}")
    ids = t[0]
    tables = (t[2], t[3], t[4]) if len(t) == 8 else (t[1], t[2])
    if ids.ndim != 2 or any(w.ndim != 2 or w.shape[1] != tables[0].shape[1] for w in tables):
        raise GraphError(f"embed_layernorm: ids {ids.shape} and tables {[w.shape for w in tables]} do not fit")
    if any(not str(t[i].dtype).startswith(("int", "uint")) and t[i].dtype != t[-3].dtype
           for i in _embed_index_inputs(len(t))):
        raise GraphError("embed_layernorm: indices must be integers")


EMBED_LAYERNORM = register_decomposed(
    "embed_layernorm", None, _embed_ln, attrs={"epsilon": 1e-12}, check=_embed_ln_check,
    value_input=2, index_inputs=_embed_index_inputs,
    doc="layer norm (last axis) of word[ids] + position[position_ids] (+ segment[segment_ids]): embeddings")

FUSED_NORM_OPS = ("skip_layernorm_sum", "embed_layernorm")

__all__ = ["FUSED_NORM_OPS", "SKIP_LAYERNORM_SUM", "EMBED_LAYERNORM"]
