"""NASNet-A built from normal and reduction cells, following TASO's ``nasnet_a.py``.

A separable convolution is a depthwise (group = channels) KxK convolution
followed by a pointwise 1x1 convolution.  Each cell first squeezes its current
input to ``channels`` with a 1x1 conv + Relu and fits the previous input to the
same shape (1x1 conv, or a strided 3x3 conv after a reduction).
"""

from __future__ import annotations

import onnx

from .builder import GraphBuilder

_PW_GAIN = 0.5  # pointwise gain: a branch sum then keeps roughly the input's scale
_SQUEEZE_GAIN = 1.25  # below He's 2: the cell's sums grow the scale by ~1.6x per cell


def _squeeze(b: GraphBuilder, x: str, channels: int) -> str:
    return b.relu(b.conv(x, channels, 1, gain=_SQUEEZE_GAIN))


def _fit(b: GraphBuilder, cur: str, prev: str) -> str:
    c, h = b.shape(cur)[1], b.shape(cur)[2]
    if b.shape(prev)[2] == h:
        return _squeeze(b, prev, c)
    return b.relu(b.conv(prev, c, 3, stride=2, pad="same", gain=_SQUEEZE_GAIN))


def _sep(b: GraphBuilder, x: str, k: int, stride: int = 1) -> str:
    c = b.shape(x)[1]
    t = b.conv(x, c, k, stride=stride, pad="same", group=c, gain=1.0)
    return b.conv(t, c, 1, gain=_PW_GAIN)


def _avg(b: GraphBuilder, x: str, stride: int = 1) -> str:
    return b.avgpool(x, 3, stride, "same")


def _max(b: GraphBuilder, x: str, stride: int = 1) -> str:
    return b.maxpool(x, 3, stride, "same")


def _normal_cell(b: GraphBuilder, prev: str, cur: str, channels: int) -> str:
    cur = _squeeze(b, cur, channels)
    prev = _fit(b, cur, prev)
    outs = [
        b.add(_sep(b, cur, 3), cur),
        b.add(_sep(b, prev, 3), _sep(b, cur, 3)),
        b.add(_avg(b, cur), prev),
        b.add(_avg(b, prev), _avg(b, prev)),
        b.add(_sep(b, prev, 3), _sep(b, prev, 3)),
    ]
    return b.concat(outs)


def _reduction_cell(b: GraphBuilder, prev: str, cur: str, channels: int) -> str:
    cur = _squeeze(b, cur, channels)
    prev = _fit(b, cur, prev)
    o0 = b.add(_sep(b, prev, 7, 2), _sep(b, cur, 5, 2))
    o1 = b.add(_max(b, cur, 2), _sep(b, prev, 7, 2))
    o2 = b.add(_avg(b, cur, 2), _sep(b, prev, 5, 2))
    o3 = b.add(_max(b, cur, 2), _sep(b, o0, 3))
    o4 = b.add(_avg(b, o0), o1)
    return b.concat([o0, o1, o2, o3, o4])


def nasnet_a(seed: int = 0, normal_cells: int = 2, stages: int = 3, channels: int = 128, image_size: int = 224,
             batch: int = 1, num_classes: int = 1000) -> onnx.ModelProto:
    """NASNet-A: a 7x7/2 conv stem, then per stage ``normal_cells`` normal cells and one reduction cell."""
    b = GraphBuilder("nasnet_a", seed)
    x = b.input("input", (batch, 3, image_size, image_size))
    x = b.relu(b.conv(x, 64, 7, stride=2, pad="same"))
    x = b.maxpool(x, 3, 2, "same")
    for _ in range(stages):
        prev = cur = x
        for _ in range(normal_cells):
            prev, cur = cur, _normal_cell(b, prev, cur, channels)
        channels *= 2
        x = _reduction_cell(b, prev, cur, channels)
    x = b.flatten(b.global_avgpool(x))
    return b.build(b.gemm(x, num_classes), doc=f"NASNet-A, {stages} stages x {normal_cells} normal cells")
