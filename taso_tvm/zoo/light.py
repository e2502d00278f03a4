"""Seeded re-initialisation of model weights, and the ONNX "light" test models.

The onnx wheel ships nine small-weight copies of classic CNNs under
``onnx/backend/test/data/light/``.  Their weights are either initializers or
``ConstantOfShape`` nodes filled with 0.02, which makes every output nearly
constant.  :func:`randomize_weights` gives every weight seeded random values
whose scale depends on how the weight is used (He-style for Conv, ``1/sqrt(fan_in)``
for Gemm/MatMul, batch-norm statistics around mean 0 / variance 1, ...).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .builder import BN_VAR, scaled_uniform, set_array

log = logging.getLogger(__name__)

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

# ops whose output is just a re-shaped / re-typed view of a weight
_PASS_THROUGH = {"Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Cast", "Flatten"}
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
# gamma multiplier for a BatchNormalization that feeds a residual Add/Sum
RESIDUAL_GAMMA = 0.3

Consumers = dict[str, list[tuple[onnx.NodeProto, int]]]
Generator = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def _consumers(graph: onnx.GraphProto) -> Consumers:
    out: Consumers = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name:
                out.setdefault(name, []).append((node, i))
    return out


def _ints(node: onnx.NodeProto, key: str, idx: int, inits: dict[str, onnx.TensorProto]) -> list[int] | None:
    """An int-list operand given as attribute ``key`` or as constant input ``idx``."""
    for a in node.attribute:
        if a.name == key:
            return list(helper.get_attribute_value(a))
    if len(node.input) > idx and node.input[idx] in inits:
        return [int(v) for v in numpy_helper.to_array(inits[node.input[idx]]).reshape(-1)]
    return None


def _view_shape(node: onnx.NodeProto, shape: tuple[int, ...],
                inits: dict[str, onnx.TensorProto]) -> tuple[int, ...] | None:
    """Output shape of a reshape-like op applied to a constant of ``shape`` (None if unknown)."""
    op = node.op_type
    if op in ("Identity", "Cast"):
        return shape
    if op == "Transpose":
        perm = _ints(node, "perm", 99, inits) or list(range(len(shape)))[::-1]
        return tuple(shape[p] for p in perm)
    if op == "Flatten":
        axis = _attr(node, "axis", 1) % (len(shape) + 1) if shape else 0
        return (math.prod(shape[:axis]), math.prod(shape[axis:]))
    if op == "Unsqueeze":
        axes = _ints(node, "axes", 1, inits)
        if axes is None:
            return None
        rank = len(shape) + len(axes)
        axes = sorted(a % rank for a in axes)
        out = list(shape)
        for a in axes:
            out.insert(a, 1)
        return tuple(out)
    if op == "Squeeze":
        axes = _ints(node, "axes", 1, inits)
        axes = {a % len(shape) for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
        return tuple(d for i, d in enumerate(shape) if i not in axes)
    if op == "Reshape":
        target = _ints(node, "shape", 1, inits)
        if target is None:
            return None
        out = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(target)]
        if -1 in out:
            known = math.prod(d for d in out if d != -1)
            out[out.index(-1)] = math.prod(shape) // max(known, 1)
        return tuple(out)
    return None


def _use(name: str, shape: tuple[int, ...], consumers: Consumers, inits: dict[str, onnx.TensorProto]
         ) -> tuple[onnx.NodeProto, int, tuple[int, ...]] | None:
    """The first real consumer of constant ``name``, looking through reshape-like ops.

    Returns the consumer, the input index and the constant's shape as seen there.
    """
    seen = set()
    while name not in seen:
        seen.add(name)
        uses = consumers.get(name, [])
        if not uses:
            return None
        node, idx = uses[0]
        if node.op_type in _PASS_THROUGH and idx == 0:
            view = _view_shape(node, shape, inits)
            if view is None:
                return None
            name, shape = node.output[0], view
            continue
        return node, idx, shape
    return None


def _attr(node: onnx.NodeProto, key: str, default: int = 0) -> int:
    for a in node.attribute:
        if a.name == key:
            return helper.get_attribute_value(a)
    return default


def _normal(std: float) -> Generator:
    """Zero mean, standard deviation ``std`` (drawn uniformly: much faster for 100M-element weights)."""
    return lambda rng, shape: scaled_uniform(rng, shape, std)


def _uniform(low: float, high: float) -> Generator:
    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        out = rng.random(shape, dtype=np.float32)
        out *= np.float32(high - low)
        out += np.float32(low)
        return out
    return gen


def _residual_gamma(node: onnx.NodeProto, consumers: Consumers, producers: dict[str, onnx.NodeProto]) -> float:
    """Gamma multiplier for a BatchNormalization ``node`` feeding a residual Add/Sum.

    A BN that ends a residual branch next to an identity shortcut gets
    RESIDUAL_GAMMA; when all operands are BNs (a projection shortcut) each gets
    ``1/sqrt(n)`` so the sum keeps the scale of its operands.
    """
    for user, _ in consumers.get(node.output[0], []):
        if user.op_type in ("Add", "Sum"):
            others = [t for t in user.input if t != node.output[0]]
            if not others or not all(t in producers for t in others):
                continue  # bias add
            if all(producers[t].op_type == "BatchNormalization" for t in others):
                return 1.0 / math.sqrt(len(others) + 1)
            return RESIDUAL_GAMMA
    return 1.0


def _generator(use: tuple[onnx.NodeProto, int, tuple[int, ...]] | None, consumers: Consumers,
               producers: dict[str, onnx.NodeProto]) -> Generator | None:
    """Pick the random distribution for a constant used as ``use`` (consumer, index, shape there)."""
    if use is None:
        return None
    node, idx, shape = use
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        if idx == 1 and len(shape) >= 3:
            fan_in = math.prod(shape[1:]) if op == "Conv" else shape[0] * math.prod(shape[2:])
            return _normal(math.sqrt(2.0 / max(fan_in, 1)))
        return _normal(0.05) if idx == 2 else None
    if op == "Gemm":
        if idx == 2:
            return _normal(0.05)
        if len(shape) != 2:
            return None
        trans = _attr(node, "transB") if idx == 1 else 1 - _attr(node, "transA")
        fan_in = shape[1] if trans else shape[0]
        return _normal(1.0 / math.sqrt(max(fan_in, 1)))
    if op == "MatMul" and len(shape) >= 2:
        fan_in = shape[-2] if idx == 1 else shape[-1]
        return _normal(1.0 / math.sqrt(max(fan_in, 1)))
    if op == "BatchNormalization":
        if idx == 1:
            g = _residual_gamma(node, consumers, producers)
            return _uniform(0.5 * g, 1.5 * g)
        return {2: _normal(0.1), 3: _normal(0.1), 4: _uniform(*BN_VAR)}.get(idx)
    if op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization"):
        if idx == 1:
            return _uniform(0.8, 1.2)
        return _normal(0.1) if idx == 2 else None
    if op == "Mul":
        return _uniform(0.5, 1.5)
    if op in ("Add", "Sub", "Sum"):
        return _normal(0.05)
    if op == "PRelu" and idx == 1:
        return _uniform(0.05, 0.3)
    return None


def _constant_of_shape_weights(graph: onnx.GraphProto, inits: dict[str, onnx.TensorProto]
                               ) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
    """Float ``ConstantOfShape(constant shape)`` nodes: output name -> (shape, 1-element fill)."""
    found = {}
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is None or value.data_type in _FLOAT_TYPES:
                fill = numpy_helper.to_array(value).reshape(-1)[:1] if value is not None else np.zeros(1, np.float32)
                shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]).reshape(-1))
                found[node.output[0]] = (shape, fill)
    return found


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` whose weights are seeded random values of a sensible scale.

    Float ``ConstantOfShape`` weights become initializers, unused initializers
    are dropped, initializers are removed from the graph inputs (IR version
    raised to >= 4 for that), and every float constant with more than one
    element used as a Conv/Gemm/MatMul weight, a bias, a normalization
    parameter or a per-channel Mul/Add operand is redrawn.  Scalars and
    constants of unknown use keep their values.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    cos = _constant_of_shape_weights(graph, inits)
    nodes = [n for n in graph.node if not (n.op_type == "ConstantOfShape" and n.output[0] in cos)]
    del graph.node[:]
    graph.node.extend(nodes)
    consumers = _consumers(graph)
    producers = {o: n for n in graph.node for o in n.output}
    used = set(consumers) | {o.name for o in graph.output}

    # drop unused initializers (e.g. the ConstantOfShape shapes) and initializer graph inputs
    keep_inputs = [i for i in graph.input if i.name not in inits]
    del graph.input[:]
    graph.input.extend(keep_inputs)
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name not in used:
            del graph.initializer[i]
    # ConstantOfShape weights become initializers, after the existing ones
    fills = {}
    for name, (shape, fill) in cos.items():
        t = graph.initializer.add()
        t.name, t.data_type = name, helper.np_dtype_to_tensor_dtype(fill.dtype)
        t.dims.extend(shape)
        fills[name] = fill
    inits = {t.name: t for t in graph.initializer}

    rng = np.random.default_rng(seed)
    changed = 0
    for t in graph.initializer:
        shape = tuple(int(d) for d in t.dims)
        gen = None
        if t.data_type in _FLOAT_TYPES and math.prod(shape) > 1:
            gen = _generator(_use(t.name, shape, consumers, inits), consumers, producers)
        if gen is not None:
            set_array(t, gen(rng, shape).astype(helper.tensor_dtype_to_np_dtype(t.data_type), copy=False))
            changed += 1
        elif t.name in fills:
            set_array(t, np.full(shape, fills[t.name][0], dtype=fills[t.name].dtype))
        else:
            log.debug("randomize_weights: keeping %s (unknown use)", t.name)
    log.debug("randomize_weights: redrew %d of %d initializers", changed, len(graph.initializer))
    out.ir_version = max(out.ir_version, 4)
    return out


def light_models() -> list[str]:
    """Paths of the ONNX "light" test models shipped with the onnx wheel."""
    if not os.path.isdir(LIGHT_DIR):
        return []
    return sorted(os.path.join(LIGHT_DIR, f) for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))


def load_light(name_or_path: str, seed: int = 0) -> onnx.ModelProto:
    """Load a light model (``"resnet50"``, ``"light_resnet50"`` or a path) with randomized weights."""
    path = name_or_path
    if not os.path.isfile(path):
        base = os.path.basename(name_or_path)
        base = base if base.startswith("light_") else f"light_{base}"
        base = base if base.endswith(".onnx") else f"{base}.onnx"
        path = os.path.join(LIGHT_DIR, base)
        if not os.path.isfile(path):
            names = [os.path.basename(p)[len("light_"):-len(".onnx")] for p in light_models()]
            raise ValueError(f"unknown light model {name_or_path!r}; available: {', '.join(names)}")
    return randomize_weights(onnx.load(path), seed)
