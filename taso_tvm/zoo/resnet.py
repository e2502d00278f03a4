"""ResNet-50 and ResNeXt-50 (32x4d) with Conv+BatchNormalization+Relu bottlenecks.

The stride of a down-sampling bottleneck sits on its 3x3 convolution, as in
TASO's ``resnet50.py`` example and torchvision.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from .builder import GraphBuilder

# gamma multiplier of the last BN of each residual branch; keeps activations
# from doubling in variance at every residual Add.
RESIDUAL_GAMMA = 0.3


def _bottleneck(b: GraphBuilder, x: str, planes: int, width: int, stride: int, groups: int,
                downsample: bool) -> str:
    out = b.conv_bn_relu(x, width, 1)
    out = b.conv_bn_relu(out, width, 3, stride=stride, pad=1, group=groups)
    out = b.bn(b.conv(out, planes * 4, 1), gamma_scale=RESIDUAL_GAMMA)
    shortcut = b.bn(b.conv(x, planes * 4, 1, stride=stride)) if downsample else x
    return b.relu(b.add(out, shortcut))


def _resnet(name: str, seed: int, groups: int, width_per_group: int, layers: Sequence[int] = (3, 4, 6, 3),
            image_size: int = 224, batch: int = 1, num_classes: int = 1000) -> onnx.ModelProto:
    b = GraphBuilder(name, seed)
    x = b.input("input", (batch, 3, image_size, image_size))
    x = b.conv_bn_relu(x, 64, 7, stride=2, pad=3)
    x = b.maxpool(x, 3, stride=2, pad=1)
    for stage, (blocks, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
        width = planes * width_per_group // 64 * groups
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _bottleneck(b, x, planes, width, stride, groups, downsample=i == 0)
    x = b.flatten(b.global_avgpool(x))
    return b.build(b.gemm(x, num_classes), doc=f"{name}: bottleneck layers {list(layers)}, groups={groups}")


def resnet50(seed: int = 0, layers: Sequence[int] = (3, 4, 6, 3), image_size: int = 224, batch: int = 1,
             num_classes: int = 1000) -> onnx.ModelProto:
    """ResNet-50 v1 (1x3x224x224 -> 1x1000 logits)."""
    return _resnet("resnet50", seed, 1, 64, layers, image_size, batch, num_classes)


def resnext50(seed: int = 0, layers: Sequence[int] = (3, 4, 6, 3), image_size: int = 224, batch: int = 1,
              num_classes: int = 1000, groups: int = 32, width_per_group: int = 4) -> onnx.ModelProto:
    """ResNeXt-50 32x4d: bottlenecks with a grouped (group=32) 3x3 convolution."""
    return _resnet("resnext50", seed, groups, width_per_group, layers, image_size, batch, num_classes)
