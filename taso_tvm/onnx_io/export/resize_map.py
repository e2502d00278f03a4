"""ONNX ``Resize`` along one axis as a matrix, to identify a ``resize1d`` PrimFunc.

TVM's ONNX frontend lowers a rank-3 ``Resize`` to ``call_tir`` of a TOPI ``resize1d``
PrimFunc whose mode and coordinate transformation survive only as arithmetic.  A 1-D resize
(nearest / linear / cubic, no ``tf_crop_and_resize``) is a linear map ``y = M x`` per row;
the exporter computes the PrimFunc's ``M`` by evaluating it on the identity, and writes the
ONNX ``Resize`` whose ``M`` (computed here from the ONNX specification, with ``sizes`` given,
so ``scale = out / in``) is the same.
"""
from __future__ import annotations

import itertools
from typing import Iterator, Optional

import numpy as np

COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _coords(n_in: int, n_out: int, ctm: str) -> np.ndarray:
    i = np.arange(n_out, dtype=np.float64)
    scale = n_out / n_in
    if ctm == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if ctm == "align_corners":
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if ctm == "asymmetric":
        return i / scale
    raise ValueError(ctm)


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    if mode == "round_prefer_ceil":
        return np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    raise ValueError(mode)


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic weights of the taps at offsets -1, 0, 1, 2 for fractional position t."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def resize1d_matrix(n_in: int, n_out: int, mode: str, ctm: str, nearest_mode: str = "round_prefer_floor",
                    cubic_a: float = -0.75, exclude_outside: int = 0) -> np.ndarray:
    """``M`` (n_out x n_in) of ONNX Resize along one axis, edge-clamped like ONNX Runtime."""
    x = _coords(n_in, n_out, ctm)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if mode == "nearest":
        idx = np.clip(_nearest(x, nearest_mode), 0, n_in - 1).astype(np.int64)
        m[rows, idx] = 1.0
        return m
    if mode == "linear":
        x = np.clip(x, 0, n_in - 1)
        x0 = np.floor(x)
        t = x - x0
        i0 = x0.astype(np.int64)
        np.add.at(m, (rows, i0), 1 - t)
        np.add.at(m, (rows, np.minimum(i0 + 1, n_in - 1)), t)
        return m
    if mode == "cubic":
        x0 = np.floor(x)
        w = _cubic_weights(x - x0, cubic_a)
        taps = x0[:, None].astype(np.int64) + np.arange(-1, 3)[None, :]
        if exclude_outside:
            w = np.where((taps >= 0) & (taps < n_in), w, 0.0)
            w = w / w.sum(axis=1, keepdims=True)
        for k in range(4):
            np.add.at(m, (rows, np.clip(taps[:, k], 0, n_in - 1)), w[:, k])
        return m
    raise ValueError(mode)


def candidates(cubic_coeffs=(-0.75, -0.5)) -> Iterator[dict]:
    """The ONNX Resize attribute sets tried, most common first."""
    for ctm in COORD_MODES:
        yield dict(mode="linear", coordinate_transformation_mode=ctm)
    for nm, ctm in itertools.product(NEAREST_MODES, COORD_MODES):
        yield dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nm)
    for a, ex, ctm in itertools.product(cubic_coeffs, (0, 1), COORD_MODES):
        yield dict(mode="cubic", coordinate_transformation_mode=ctm, cubic_coeff_a=float(a), exclude_outside=ex)


def match(m: np.ndarray, cubic_coeffs=(-0.75, -0.5), atol: float = 1e-5) -> Optional[dict]:
    """The first candidate attribute set whose matrix equals ``m`` (None if none does)."""
    n_out, n_in = m.shape
    for c in candidates(cubic_coeffs):
        ref = resize1d_matrix(n_in, n_out, c["mode"], c["coordinate_transformation_mode"],
                              c.get("nearest_mode", "round_prefer_floor"), c.get("cubic_coeff_a", -0.75),
                              c.get("exclude_outside", 0))
        if np.allclose(ref, m, rtol=0, atol=atol):
            return c
    return None
