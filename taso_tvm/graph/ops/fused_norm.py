"""Fused layer norms with extra outputs or gathers, each defined by its decomposition (`decompose.py`).

| operator | decomposition | ONNX Runtime (com.microsoft) |
|---|---|---|
| `skip_layernorm_sum(x, skip, gamma, beta, bias, [epsilon])` | [layer norm of s, s], s = x + bias + skip | SkipLayerNormalization (outputs 0 and 3) |
| `embed_layernorm(ids, [segment_ids,] word, position, [segment,] gamma, beta, position_ids, [epsilon])` | layer norm of word[ids] + position[position_ids] (+ segment[segment_ids]) | EmbedLayerNormalization |

`skip_layernorm_sum`'s and `embed_layernorm`'s optional last input is a one-element epsilon (the layer norm in pieces of opset < 17 adds it as a
tensor), as `skip_layernorm`'s is; otherwise the `epsilon` attribute. `skip_layernorm_sum` is the pre-norm residual
block (GPT-2, ViT): the sum x + skip is the residual stream read
again later, so it is an output of the fused node (ONNX Runtime's `input_skip_bias_sum`, output index 3).
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .fused import SKIP_LAYERNORM
from ..types import GraphError


def _skip_ln_sum(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    inp, skip, gamma, beta, bias = x[:5]
    s = e.op("add", e.op("add", inp, bias), skip)
    return [e.op("layernorm", s, gamma, beta, *x[5:], axes=(-1,), epsilon=a["epsilon"]), s]


def _skip_ln_sum_check(t: Sequence[Any], a: dict) -> None:
    SKIP_LAYERNORM.infer(t, a)  # the same inputs as skip_layernorm


SKIP_LAYERNORM_SUM = register_decomposed(
    "skip_layernorm_sum", None, _skip_ln_sum, attrs={"epsilon": 1e-5}, check=_skip_ln_sum_check,
    doc="[layer norm (last axis) of s, s] with s = input + bias + skip: the norm and the residual stream")



def _segments(n: int) -> bool:
    """Whether an embed_layernorm of n inputs has segments: 8 or 9 inputs (6 or 7 without; the 7th or 9th an
    epsilon)."""
    return n in (8, 9)


def _embed_ln(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    """word[ids] + position[position_ids] (+ segment[segment_ids]), layer-normalized on the last axis."""
    if _segments(len(x)):
        ids, seg_ids, word, pos, seg, gamma, beta, pos_ids = x[:8]
    else:
        (ids, word, pos, gamma, beta, pos_ids), seg_ids = x[:6], None
    eps = list(x[8 if seg_ids is not None else 6:])  # the epsilon input, where there is one
    s = e.op("add", e.op("take", word, ids), e.op("take", pos, pos_ids))
    if seg_ids is not None:
        s = e.op("add", s, e.op("take", seg, seg_ids))
    return [e.op("layernorm", s, gamma, beta, *eps, axes=(-1,), epsilon=a["epsilon"])]


def _embed_index_inputs(n: int) -> tuple:
    return (0, 1, 7) if _segments(n) else (0, 5)


def _embed_ln_check(t: Sequence[Any], a: dict) -> None:
    if len(t) not in (6, 7, 8, 9):
        raise GraphError(f"embed_layernorm: takes 6 inputs (8 with segments) and an epsilon, got {len(t)}")
    ids = t[0]
    seg = _segments(len(t))
    tables = (t[2], t[3], t[4]) if seg else (t[1], t[2])
    gamma = t[5] if seg else t[3]
    if ids.ndim != 2 or any(w.ndim != 2 or w.shape[1] != tables[0].shape[1] for w in tables):
        raise GraphError(f"embed_layernorm: ids {ids.shape} and tables {[w.shape for w in tables]} do not fit")
    if len(t) in (7, 9) and t[-1].size != 1:
        raise GraphError(f"embed_layernorm: the epsilon input has {t[-1].size} elements, not one")
    if any(not str(t[i].dtype).startswith(("int", "uint")) and t[i].dtype != gamma.dtype
           for i in _embed_index_inputs(len(t))):
        raise GraphError("embed_layernorm: indices must be integers")


EMBED_LAYERNORM = register_decomposed(
    "embed_layernorm", None, _embed_ln, attrs={"epsilon": 1e-12}, check=_embed_ln_check,
    value_input=2, index_inputs=_embed_index_inputs,
    doc="layer norm (last axis) of word[ids] + position[position_ids] (+ segment[segment_ids]): embeddings")

FUSED_NORM_OPS = ("skip_layernorm_sum", "embed_layernorm")

__all__ = ["FUSED_NORM_OPS", "SKIP_LAYERNORM_SUM", "EMBED_LAYERNORM"]
