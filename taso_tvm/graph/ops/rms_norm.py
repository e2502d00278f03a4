"""RMS normalization (Llama-family decoders) and its residual forms.

| operator | semantics | ONNX Runtime |
|---|---|---|
| `rmsnorm(x, gamma, [epsilon])` | x / sqrt(mean(x * x, axes) + eps) * gamma | SimplifiedLayerNormalization; ONNX 23 RMSNormalization |
| `skip_rmsnorm(x, skip, gamma, bias, [epsilon])` | rmsnorm of x + bias + skip (last axis) | SkipSimplifiedLayerNormalization |
| `skip_rmsnorm_sum(x, skip, gamma, bias, [epsilon])` | [rmsnorm of s, s], s = x + bias + skip | SkipSimplifiedLayerNormalization (outputs 0 and 3) |

The epsilon is the `epsilon` attribute or a one-element last input (exporters add it as a constant tensor, so a rule
lifting the pieces states it as an input), as for `layernorm`. The skip forms are defined by their decomposition
(`decompose.py`); `skip_rmsnorm_sum` is the pre-norm residual block: the sum is the residual stream read again.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from tvm import relax
from tvm.relax import op as R

from .base import OpDef, register
from .decompose import Evaluator, register_decomposed
from .relax_util import ints
from ..types import GraphError, TensorType, normalize_axis


def _eps(x: Sequence[Any], a: dict) -> Any:
    """The epsilon: the third input's one element when there is one, else the attribute."""
    return np.asarray(x[2]).reshape(-1)[0] if len(x) == 3 else a["epsilon"]


def _infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    if len(t) not in (2, 3):
        raise GraphError(f"rmsnorm: takes x, gamma and, optionally, a one-element epsilon ({len(t)} inputs)")
    x = t[0]
    axes = [normalize_axis(ax, x.ndim) for ax in a["axes"]]
    want = tuple(x.shape[ax] for ax in axes)
    if t[1].shape != want:
        raise GraphError(f"rmsnorm: gamma's shape {t[1].shape} != {want}")
    if len(t) == 3 and (t[2].size != 1 or t[2].dtype != x.dtype):
        raise GraphError(f"rmsnorm: epsilon input {t[2].shape} {t[2].dtype} is not one {x.dtype} element")
    if any(ty.dtype != x.dtype for ty in t):
        raise GraphError(f"rmsnorm: mixed dtypes {[ty.dtype for ty in t]}")
    return [x]


def _np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    data, gamma = x[:2]
    axes = tuple(normalize_axis(ax, data.ndim) for ax in a["axes"])
    ms = (data * data).mean(axis=axes, keepdims=True)
    return [(data / np.sqrt(ms + _eps(x, a)) * gamma).astype(data.dtype)]


def _z3(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    from .elementwise import z3_apply, z3_map, z3_recip, z3_val

    data, gamma = (np.asarray(v, dtype=object) for v in x[:2])
    axes = tuple(normalize_axis(ax, data.ndim) for ax in a["axes"])
    ms = (data * data).mean(axis=axes, keepdims=True)
    eps = _eps(x, a)
    inv = z3_map(lambda v: z3_recip(z3_apply("sqrt", z3_val(v) + eps)), ms)
    return [data * inv * gamma]


def _lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    return list(call.args), {"axes": ints(call.attrs.axes), "epsilon": float(call.attrs.epsilon)}


def _lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
    """Relax's rms_norm; with an epsilon input, its value where it is a constant, else the pieces written out in the
    form ONNX Runtime fuses into SimplifiedLayerNormalization (Pow 2, ReduceMean, Add, Sqrt, Div, Mul)."""
    from tvm.ir import GenericConst

    eps = a["epsilon"]
    if len(args) == 3:
        if not isinstance(args[2], GenericConst):
            x = args[0]
            two = relax.const(2.0, in_types[0].dtype)
            ms = R.mean(R.power(x, two), axis=list(a["axes"]), keepdims=True)
            return R.multiply(R.divide(x, R.sqrt(R.add(ms, args[2]))), args[1])
        eps = float(args[2].value.numpy().reshape(-1)[0])
    return R.nn.rms_norm(args[0], args[1], axes=list(a["axes"]), epsilon=eps)


RMSNORM = register(OpDef("rmsnorm", None, _infer, _np, attrs={"axes": (-1,), "epsilon": 1e-5},
                         relax=("relax.nn.rms_norm",), lift=_lift, lower=_lower, z3=_z3,
                         doc="RMS normalisation over the given axes (no mean subtracted, no shift); epsilon from a "
                             "one-element third input when given"))


# ---------------------------------------------------------------- residual forms (decomposed)
def _sum(e: Evaluator, x: Sequence[Any]) -> Any:
    inp, skip, _gamma, bias = x[:4]
    return e.op("add", e.op("add", inp, bias), skip)


def _skip(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    return [e.op("rmsnorm", _sum(e, x), x[2], *x[4:], axes=(-1,), epsilon=a["epsilon"])]


def _skip_sum(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    s = _sum(e, x)
    return [e.op("rmsnorm", s, x[2], *x[4:], axes=(-1,), epsilon=a["epsilon"]), s]


def _skip_check(t: Sequence[TensorType], a: dict) -> None:
    if len(t) not in (4, 5) or (len(t) == 5 and t[4].size != 1):
        raise GraphError("skip_rmsnorm: takes x, skip, gamma, bias and, optionally, a one-element epsilon")
    x, skip, gamma, bias = t[:4]
    h = x.shape[-1] if x.ndim else None
    if x.ndim < 2 or skip.shape != x.shape or gamma.shape != (h,) or bias.shape not in ((h,), (), (1,)):
        raise GraphError(f"skip_rmsnorm: shapes {[ty.shape for ty in t]} do not fit")


SKIP_RMSNORM = register_decomposed(
    "skip_rmsnorm", None, _skip, attrs={"epsilon": 1e-5}, check=_skip_check,
    doc="RMS normalisation (last axis) of input + bias + skip; epsilon from a one-element fifth input when given")
SKIP_RMSNORM_SUM = register_decomposed(
    "skip_rmsnorm_sum", None, _skip_sum, attrs={"epsilon": 1e-5}, check=_skip_check,
    doc="[RMS normalisation (last axis) of s, s] with s = input + bias + skip: the norm and the residual stream")

RMS_NORM_OPS = ("rmsnorm", "skip_rmsnorm", "skip_rmsnorm_sum")

__all__ = ["RMSNORM", "SKIP_RMSNORM", "SKIP_RMSNORM_SUM", "RMS_NORM_OPS"]
