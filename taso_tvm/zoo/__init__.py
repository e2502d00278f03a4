"""Model zoo: the DNNs of the TASO paper's evaluation as ONNX models with seeded weights.

>>> from taso_tvm import zoo
>>> model = zoo.get_model("bert", layers=2)
>>> feeds = zoo.random_inputs(model)

Every model uses opset 17, has fixed input shapes and a single output named
``"output"``.  :func:`load_light` gives the ONNX "light" test models with
randomized weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from .bert import bert
from .inception import inception_v3
from .light import light_models, load_light, randomize_weights
from .nasnet import nasnet_a
from .nasrnn import nasrnn
from .resnet import resnet50, resnext50
from .seed_example import seed_example
from .squeezenet import squeezenet

__all__ = ["MODELS", "ModelInfo", "get_model", "list_models", "random_inputs", "randomize_weights",
           "light_models", "load_light"]


@dataclass(frozen=True)
class ModelInfo:
    """A zoo entry: ``builder(seed=..., **kwargs)`` returns the ONNX model."""

    name: str
    description: str
    builder: Callable[..., onnx.ModelProto]


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        ModelInfo("resnet50", "ResNet-50, 1x3x224x224, bottlenecks [3,4,6,3], Conv+BN+Relu", resnet50),
        ModelInfo("resnext50", "ResNeXt-50 32x4d, grouped 3x3 convs (group=32)", resnext50),
        ModelInfo("nasnet_a", "NASNet-A, 3 stages of 2 normal + 1 reduction cell, separable convs", nasnet_a),
        ModelInfo("nasrnn", "NASRNN cell unrolled over 5 steps, hidden 512 (MatMul/Add/Mul/Sigmoid/Tanh/Relu)",
                  nasrnn),
        ModelInfo("squeezenet", "SqueezeNet 1.1 with fire modules", squeezenet),
        ModelInfo("inception_v3", "Inception-v3, 1x3x299x299", inception_v3),
        ModelInfo("bert", "BERT-base encoder, 12 layers, seq 128, hidden 768, 12 heads (layers=N)", bert),
        ModelInfo("seed_example", "TASO README example: conv3x3/conv3x3 + conv1x1, add, relu", seed_example),
    )
}


def list_models() -> list[str]:
    """Names of the zoo models."""
    return list(MODELS)


def get_model(name: str, seed: int = 0, **kwargs) -> onnx.ModelProto:
    """Build zoo model ``name`` with weights drawn from ``default_rng(seed)``."""
    if name not in MODELS:
        raise ValueError(f"unknown zoo model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name].builder(seed=seed, **kwargs)


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        ttype = vi.type.tensor_type
        dims = []
        for d in ttype.shape.dim:
            if not d.HasField("dim_value"):
                raise ValueError(f"input {vi.name!r} has a non-static dimension {d.dim_param!r}")
            dims.append(d.dim_value)
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(dims, dtype=dtype)
    return feeds
