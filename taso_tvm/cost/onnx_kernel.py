"""A kernel signature as a small ONNX model, written by the project's exporter, for measuring it in ONNX Runtime.

The kernel's Relax module (`relax_kernel.kernel_module`: each operator's `lower`) goes through `export_relax` as
`export_onnx` writes a whole model (same converters, same opset choice), so ONNX Runtime measures the nodes the
optimized model will contain. Weight inputs are bound as constants and so become initializers (random data unless
given, as ONNX Runtime pre-packs constant weights in deployment); the other inputs stay graph inputs `p<k>`. A
kernel the exporter cannot write raises `UnsupportedOp`.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx
import tvm
from tvm import relax

from ..onnx_io.export import ExportError, export_relax
from .kernel import KernelSig
from .relax_kernel import kernel_module


class UnsupportedOp(ValueError):
    """The kernel has an operator (or attribute value, or element type) the ONNX exporter cannot write."""


def kernel_onnx(sig: KernelSig, weights: Optional[dict[int, np.ndarray]] = None, seed: int = 0) \
        -> onnx.ModelProto:
    """ONNX model of the kernel as the exporter writes it. Weight inputs become initializers (`weights[k]` or
    random data); output names are the exporter's."""
    mod = bind_weights(kernel_module(sig), sig, weights, seed)
    try:
        return export_relax(mod)
    except ExportError as e:
        raise UnsupportedOp(str(e)) from None


def bind_weights(mod: tvm.IRModule, sig: KernelSig, weights: Optional[dict[int, np.ndarray]] = None,
                 seed: int = 0) -> tvm.IRModule:
    """`mod` (a kernel module of `sig`) with its weight inputs bound as constants (`weights[k]` or random data;
    a one-element constant's value is the signature's)."""
    rng = np.random.default_rng(seed)
    consts = {}
    for k, (shape, dtype, is_weight) in enumerate(sig.inputs):
        if is_weight:
            if weights and k in weights:
                arr = weights[k]
            elif isinstance(is_weight, tuple):  # a one-element constant: its value is part of the kernel
                arr = np.full(tuple(shape), is_weight[1], dtype=dtype)
            else:
                arr = _random(rng, shape, dtype)
            # (ascontiguousarray makes a scalar 1-D: keep the signature's shape)
            consts[f"p{k}"] = tvm.runtime.tensor(np.ascontiguousarray(arr, dtype=dtype).reshape(tuple(shape)))
    return relax.transform.BindParams("main", consts)(mod) if consts else mod


RANDOM_BLOCK = 1 << 20  # values drawn at most; a larger tensor repeats them (an embedding table is 23M values)


def _random(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.floating):  # drawn in float32, a block at most: only the timing reads them
        n = math.prod(shape)
        arr = rng.standard_normal(min(n, RANDOM_BLOCK), dtype=np.float32)
        arr *= 0.1
        if n > RANDOM_BLOCK:
            arr = np.resize(arr, n)
        return arr.astype(dt, copy=False).reshape(tuple(shape))
    return np.zeros(tuple(shape), dt)


def random_feeds(sig: KernelSig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for the non-weight inputs of `kernel_onnx(sig)`."""
    rng = np.random.default_rng(seed)
    return {f"p{k}": _random(rng, s, d) for k, (s, d, w) in enumerate(sig.inputs) if not w}


__all__ = ["kernel_onnx", "bind_weights", "random_feeds", "UnsupportedOp"]
