"""Inception-v3 at 299x299 (torchvision layout, without the auxiliary head)."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder, IntOrPair

_EPS = 1e-3


def _conv(b: GraphBuilder, x: str, cout: int, kernel: IntOrPair, stride: int = 1, pad: IntOrPair = 0) -> str:
    """BasicConv2d: Conv (no bias) + BatchNormalization + Relu."""
    return b.conv_bn_relu(x, cout, kernel, stride=stride, pad=pad, eps=_EPS)


def _pool_branch(b: GraphBuilder, x: str, cout: int) -> str:
    return _conv(b, b.avgpool(x, 3, 1, 1), cout, 1)


def _inception_a(b: GraphBuilder, x: str, pool_features: int) -> str:
    b1 = _conv(b, x, 64, 1)
    b5 = _conv(b, _conv(b, x, 48, 1), 64, 5, pad=2)
    b3 = _conv(b, _conv(b, _conv(b, x, 64, 1), 96, 3, pad=1), 96, 3, pad=1)
    return b.concat([b1, b5, b3, _pool_branch(b, x, pool_features)])


def _inception_b(b: GraphBuilder, x: str) -> str:
    b3 = _conv(b, x, 384, 3, stride=2)
    bd = _conv(b, _conv(b, _conv(b, x, 64, 1), 96, 3, pad=1), 96, 3, stride=2)
    return b.concat([b3, bd, b.maxpool(x, 3, 2)])


def _inception_c(b: GraphBuilder, x: str, c7: int) -> str:
    b1 = _conv(b, x, 192, 1)
    b7 = _conv(b, x, c7, 1)
    b7 = _conv(b, b7, c7, (1, 7), pad=(0, 3))
    b7 = _conv(b, b7, 192, (7, 1), pad=(3, 0))
    bd = _conv(b, x, c7, 1)
    bd = _conv(b, bd, c7, (7, 1), pad=(3, 0))
    bd = _conv(b, bd, c7, (1, 7), pad=(0, 3))
    bd = _conv(b, bd, c7, (7, 1), pad=(3, 0))
    bd = _conv(b, bd, 192, (1, 7), pad=(0, 3))
    return b.concat([b1, b7, bd, _pool_branch(b, x, 192)])


def _inception_d(b: GraphBuilder, x: str) -> str:
    b3 = _conv(b, _conv(b, x, 192, 1), 320, 3, stride=2)
    b7 = _conv(b, x, 192, 1)
    b7 = _conv(b, b7, 192, (1, 7), pad=(0, 3))
    b7 = _conv(b, b7, 192, (7, 1), pad=(3, 0))
    b7 = _conv(b, b7, 192, 3, stride=2)
    return b.concat([b3, b7, b.maxpool(x, 3, 2)])


def _inception_e(b: GraphBuilder, x: str) -> str:
    b1 = _conv(b, x, 320, 1)
    b3 = _conv(b, x, 384, 1)
    b3 = b.concat([_conv(b, b3, 384, (1, 3), pad=(0, 1)), _conv(b, b3, 384, (3, 1), pad=(1, 0))])
    bd = _conv(b, _conv(b, x, 448, 1), 384, 3, pad=1)
    bd = b.concat([_conv(b, bd, 384, (1, 3), pad=(0, 1)), _conv(b, bd, 384, (3, 1), pad=(1, 0))])
    return b.concat([b1, b3, bd, _pool_branch(b, x, 192)])


def inception_v3(seed: int = 0, image_size: int = 299, batch: int = 1, num_classes: int = 1000) -> onnx.ModelProto:
    """Inception-v3: stem, InceptionA x3, B, C x4, D, E x2, pooling and a 1000-way Gemm."""
    b = GraphBuilder("inception_v3", seed)
    x = b.input("input", (batch, 3, image_size, image_size))
    x = _conv(b, x, 32, 3, stride=2)
    x = _conv(b, x, 32, 3)
    x = _conv(b, x, 64, 3, pad=1)
    x = b.maxpool(x, 3, 2)
    x = _conv(b, x, 80, 1)
    x = _conv(b, x, 192, 3)
    x = b.maxpool(x, 3, 2)
    for pf in (32, 64, 64):
        x = _inception_a(b, x, pf)
    x = _inception_b(b, x)
    for c7 in (128, 160, 160, 192):
        x = _inception_c(b, x, c7)
    x = _inception_d(b, x)
    x = _inception_e(b, x)
    x = _inception_e(b, x)
    x = b.flatten(b.global_avgpool(x))
    return b.build(b.gemm(x, num_classes), doc="Inception-v3")
