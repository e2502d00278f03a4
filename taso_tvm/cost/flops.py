"""FLOPs and bytes of a kernel, for the analytic roofline backend."""
from __future__ import annotations

import math

import numpy as np

from .kernel import KernelSig, rebuild

# FLOPs per output element of element-wise functions (transcendentals cost a polynomial evaluation).
_PER_ELEMENT = {"add": 1, "sub": 1, "mul": 1, "div": 1, "relu": 1, "neg": 1, "sqrt": 4, "exp": 8, "erf": 10,
                "sigmoid": 10, "tanh": 10, "gelu": 14, "batchnorm": 2, "softmax": 12, "layernorm": 8}
_ACT_FLOPS = {"none": 0, "relu": 1, "sigmoid": 10, "tanh": 10}


def _prod(shape) -> int:
    return int(math.prod(int(d) for d in shape))


def nbytes_of(shape, dtype: str) -> int:
    """Bytes of a tensor; 0 for symbolic shapes and non-tensor values."""
    try:
        size = np.dtype(dtype).itemsize
    except TypeError:
        return 0
    if not all(isinstance(d, int) for d in shape):
        return 0
    return _prod(shape) * size


def node_flops(op: str, attrs: dict, in_shapes: list[tuple], out_shapes: list[tuple]) -> float:
    """Floating-point operations of one operator (multiply-add = 2)."""
    out = _prod(out_shapes[0]) if out_shapes else 0
    if op == "conv2d":
        _, cg, kh, kw = in_shapes[1]
        return 2.0 * out * cg * kh * kw + out * _ACT_FLOPS.get(attrs.get("activation", "none"), 1)
    if op == "matmul":
        x = in_shapes[0]
        k = x[-1]
        return 2.0 * out * k + out * _ACT_FLOPS.get(attrs.get("activation", "none"), 1)
    if op in ("maxpool2d", "avgpool2d"):
        kh, kw = attrs["kernel"]
        return float(out * kh * kw)
    if op == "mean":
        return float(_prod(in_shapes[0]))
    if op in _PER_ELEMENT:
        return float(out * _PER_ELEMENT[op])
    return 0.0  # data movement


def kernel_flops_bytes(sig: KernelSig) -> tuple[float, float]:
    """(FLOPs, bytes read + written) of a kernel: its external inputs and outputs cross memory once."""
    _, _, nodes = rebuild(sig)
    flops = 0.0
    for (op, attrs, refs), node in zip(sig.nodes, nodes):
        in_shapes = [tuple(sig.inputs[-1 - i][0]) if i < 0 else tuple(nodes[i].types[j].shape) for i, j in refs]
        flops += node_flops(op, dict(attrs), in_shapes, [tuple(t.shape) for t in node.types])
    nbytes = sum(nbytes_of(s, d) for s, d, _ in sig.inputs)
    for i, j in sig.outputs:
        t = nodes[i].types[j]
        nbytes += nbytes_of(t.shape, t.dtype)
    return flops, float(nbytes)


def opaque_bytes(sig: KernelSig) -> float:
    """Bytes an opaque kernel reads and writes (its output types travel in its signature)."""
    nbytes = sum(nbytes_of(s, d) for s, d, _ in sig.inputs)
    for i, j in sig.outputs:
        types = dict(sig.nodes[i][1]).get("types", ())
        if j < len(types):
            nbytes += nbytes_of(*types[j])
    return float(nbytes)
