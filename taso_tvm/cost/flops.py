"""FLOPs and bytes of a kernel, for the analytic roofline backend."""
from __future__ import annotations

import math

import numpy as np

from ..graph.ops import facet
from .kernel import KernelSig, rebuild


def prod(shape) -> int:
    """Number of elements of a static shape."""
    return int(math.prod(int(d) for d in shape))


def nbytes_of(shape: tuple, dtype: str) -> int:
    """Bytes of a tensor; 0 for symbolic shapes and non-tensor values."""
    try:
        size = np.dtype(dtype).itemsize
    except TypeError:
        return 0
    if not all(isinstance(d, int) for d in shape):
        return 0
    return prod(shape) * size


def node_flops(op: str, attrs: dict, in_shapes: list[tuple], out_shapes: list[tuple]) -> float:
    """Floating-point operations of one operator (its `cost.flops` facet; multiply-add = 2)."""
    return facet(op, "cost.flops")(attrs, in_shapes, out_shapes)


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
