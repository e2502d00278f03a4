"""Fused layer norms with extra outputs or gathers, each defined by its decomposition (`decompose.py`).

| operator | decomposition | ONNX Runtime (com.microsoft) |
|---|---|---|
| `skip_layernorm_sum(x, skip, gamma, beta, bias)` | [layer norm of s, s], s = x + bias + skip | SkipLayerNormalization (outputs 0 and 3) |

`skip_layernorm_sum` is the pre-norm residual block (GPT-2, ViT): the sum x + skip is the residual stream read
again later, so it is an output of the fused node (ONNX Runtime's `input_skip_bias_sum`, output index 3).
"""
from __future__ import annotations

from typing import Any, Sequence

from .decompose import Evaluator, register_decomposed
from .fused import SKIP_LAYERNORM


def _skip_ln_sum(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    inp, skip, gamma, beta, bias = x
    s = e.op("add", e.op("add", inp, bias), skip)
    return [e.op("layernorm", s, gamma, beta, axes=(-1,), epsilon=a["epsilon"]), s]


def _skip_ln_sum_check(t: Sequence[Any], a: dict) -> None:
    SKIP_LAYERNORM.infer(t, a)  # the same inputs as skip_layernorm


SKIP_LAYERNORM_SUM = register_decomposed(
    "skip_layernorm_sum", 5, _skip_ln_sum, attrs={"epsilon": 1e-5}, check=_skip_ln_sum_check,
    doc="[layer norm (last axis) of s, s] with s = input + bias + skip: the norm and the residual stream")

FUSED_NORM_OPS = ("skip_layernorm_sum",)

__all__ = ["FUSED_NORM_OPS", "SKIP_LAYERNORM_SUM"]
