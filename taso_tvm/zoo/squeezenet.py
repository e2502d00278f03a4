"""SqueezeNet 1.1 built from fire modules (convolutions with bias, no BN)."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder

# (squeeze, expand1x1, expand3x3) per fire module; None marks a 3x3/2 max pool.
_LAYOUT = [(16, 64, 64), (16, 64, 64), None, (32, 128, 128), (32, 128, 128), None,
           (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)]


def _fire(b: GraphBuilder, x: str, squeeze: int, e1: int, e3: int) -> str:
    s = b.relu(b.conv(x, squeeze, 1, bias=True))
    left = b.relu(b.conv(s, e1, 1, bias=True))
    right = b.relu(b.conv(s, e3, 3, pad=1, bias=True))
    return b.concat([left, right])


def squeezenet(seed: int = 0, image_size: int = 224, batch: int = 1, num_classes: int = 1000) -> onnx.ModelProto:
    """SqueezeNet 1.1 (1x3x224x224 -> 1x1000)."""
    b = GraphBuilder("squeezenet", seed)
    x = b.input("input", (batch, 3, image_size, image_size))
    x = b.relu(b.conv(x, 64, 3, stride=2, bias=True))
    x = b.maxpool(x, 3, stride=2)
    for spec in _LAYOUT:
        x = b.maxpool(x, 3, stride=2) if spec is None else _fire(b, x, *spec)
    x = b.relu(b.conv(x, num_classes, 1, bias=True))
    x = b.flatten(b.global_avgpool(x))
    return b.build(x, doc="SqueezeNet 1.1")
