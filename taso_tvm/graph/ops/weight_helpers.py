"""TASO's helper operators that rules apply to weights: enlarge a kernel, merge grouped-conv weights."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, register
from ..types import GraphError, TensorType

R = relax.op


def _enlarge_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    w = t[0]
    if w.ndim != 4:
        raise GraphError(f"enlarge: expects an OIHW kernel, got {w}")
    kh, kw = a["kernel"]
    dh, dw = kh - w.shape[2], kw - w.shape[3]
    if dh < 0 or dw < 0 or dh % 2 or dw % 2:
        raise GraphError(f"enlarge: cannot centre a {w.shape[2]}x{w.shape[3]} kernel in {kh}x{kw}")
    return [TensorType((w.shape[0], w.shape[1], kh, kw), w.dtype)]


def _enlarge_pads(shape: Sequence[int], a: dict) -> tuple:
    dh, dw = (a["kernel"][0] - shape[2]) // 2, (a["kernel"][1] - shape[3]) // 2
    return ((0, 0), (0, 0), (dh, dh), (dw, dw))


ENLARGE = register(OpDef(
    "enlarge", 1, _enlarge_infer,
    lambda x, a: [np.pad(x[0], _enlarge_pads(x[0].shape, a))], attrs={"kernel": None},
    z3=lambda x, a: [np.pad(np.asarray(x[0], dtype=object), _enlarge_pads(np.shape(x[0]), a), constant_values=0)],
    normalize=lambda a, t: {"kernel": tuple(int(k) for k in a["kernel"])},
    lower=lambda bb, args, a, t: R.nn.pad(args[0], [p for pair in _enlarge_pads(t[0].shape, a) for p in pair]),
    doc="zero-pad a conv kernel (OIHW) to a larger centred size"))


def _merge_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    w = t[0]
    c, g = a["count"], a["groups"]
    if w.ndim != 4 or c < 1 or g % c or w.shape[0] % g:
        raise GraphError(f"merge_gconv: cannot merge {w} with {g} groups by {c}")
    return [TensorType((w.shape[0], w.shape[1] * c, w.shape[2], w.shape[3]), w.dtype)]


def _merge_mask(o: int, groups: int, count: int, dtype) -> np.ndarray:
    """mask[o, j] = 1 where output channel o's old group sits at position j of its merged group."""
    mask = np.zeros((o, count, 1, 1, 1), dtype=dtype)
    mask[np.arange(o), (np.arange(o) // (o // groups)) % count] = 1
    return mask


def _merge_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    w = x[0]
    o, cg, kh, kw = w.shape
    mask = _merge_mask(o, a["groups"], a["count"], w.dtype if w.dtype != object else np.int64)
    return [(w[:, None] * mask).reshape(o, a["count"] * cg, kh, kw)]


def _merge_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, t: Sequence[TensorType]) -> Any:
    o, cg, kh, kw = t[0].shape
    mask = relax.const(_merge_mask(o, a["groups"], a["count"], t[0].dtype), t[0].dtype)
    y = R.multiply(R.reshape(args[0], [o, 1, cg, kh, kw]), mask)
    return R.reshape(y, [o, a["count"] * cg, kh, kw])


MERGE_GCONV = register(OpDef(
    "merge_gconv", 1, _merge_infer, _merge_np, attrs={"count": None, "groups": None},
    normalize=lambda a, t: {"count": int(a["count"]), "groups": int(a["groups"])}, lower=_merge_lower,
    z3=lambda x, a: _merge_np([np.asarray(x[0], dtype=object)], a),
    doc="weights of a grouped conv (groups=G) rewritten for G/count groups: each group's kernel placed "
        "block-diagonally among count neighbours, zeros elsewhere"))
