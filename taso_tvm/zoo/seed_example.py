"""The example block from TASO's README (two 3x3 convs and a 1x1 conv, add, relu)."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder


def seed_example(seed: int = 0, channels: int = 128, size: int = 56) -> onnx.ModelProto:
    """``relu(conv3x3(relu(conv3x3(i))) + relu(conv1x1(i)))`` on a 1x128x56x56 input."""
    b = GraphBuilder("seed_example", seed)
    i = b.input("input", (1, channels, size, size))
    left = b.relu(b.conv(i, channels, 3, pad=1))
    left = b.conv(left, channels, 3, pad=1, gain=1.0)
    right = b.relu(b.conv(i, channels, 1))
    t = b.relu(b.add(left, right))
    return b.build(t, doc="TASO README example")
