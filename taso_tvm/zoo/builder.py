"""A small helper around :mod:`onnx.helper` for building zoo graphs.

:class:`GraphBuilder` generates unique tensor names, seeded random initializers
with a sensible scale (He-style for convolutions, ``1/sqrt(fan_in)`` for dense
layers, batch-norm statistics around mean 0 / variance 1) and tracks static
shapes so that callers do not have to thread channel counts around.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17  # the opset every zoo model is written in
IR_VERSION = 8  # the IR version that goes with opset 17

# BN running variance range: with gamma ~ U(0.5, 1.5), E[gamma^2 / var] ~= 1, so
# Conv+BN+Relu chains with He-initialised convs keep their activation scale.
BN_VAR = (0.65, 1.65)

Shape = tuple[int, ...]
IntOrPair = int | Sequence[int]


def set_array(t: onnx.TensorProto, arr: np.ndarray, name: str | None = None) -> onnx.TensorProto:
    """Store ``arr`` in ``t`` as raw data in place (cheaper than ``numpy_helper.from_array`` + copy)."""
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data",
                  "external_data", "dims"):
        t.ClearField(field)
    t.data_location = onnx.TensorProto.DEFAULT
    if name is not None:
        t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    t.dims.extend(arr.shape)
    t.raw_data = np.ascontiguousarray(arr).tobytes()
    return t


def scaled_uniform(rng: np.random.Generator, shape: Sequence[int], std: float) -> np.ndarray:
    """float32 samples of U(-sqrt(3)*std, sqrt(3)*std), i.e. zero mean and standard deviation ``std``."""
    out = rng.random(tuple(shape), dtype=np.float32)
    out -= np.float32(0.5)
    out *= np.float32(2.0 * math.sqrt(3.0) * std)
    return out


def _pair(v: IntOrPair) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


class GraphBuilder:
    """Incrementally builds an ONNX graph with seeded weights and tracked shapes."""

    def __init__(self, name: str, seed: int = 0, opset: int = OPSET) -> None:
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.model = onnx.ModelProto()  # initializers are written straight into its graph
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.shapes: dict[str, Shape] = {}
        self._counts: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}

    # ------------------------------------------------------------------ naming
    def fresh(self, prefix: str) -> str:
        """Return a new unique name ``prefix_N``."""
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}_{n}"

    def shape(self, x: str) -> Shape:
        """Static shape of tensor ``x``."""
        return self.shapes[x]

    # ------------------------------------------------------- inputs / weights
    def input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input."""
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)
        return name

    def param(self, name: str, value: np.ndarray) -> str:
        """Add an initializer called ``name`` holding ``value``."""
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        set_array(self.model.graph.initializer.add(), arr, name)
        self.shapes[name] = tuple(arr.shape)
        return name

    def const(self, value: float | Sequence[int] | np.ndarray, dtype: type = np.float32) -> str:
        """A (deduplicated) constant initializer, e.g. a scalar or a reshape target."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.param(self.fresh("const"), arr)
        return self._consts[key]

    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        """float32 samples of N(0, std^2) (used for small vectors: biases, BN shifts)."""
        return (self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)).astype(np.float32)

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        """float32 samples of U(low, high)."""
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)

    def init(self, shape: Sequence[int], std: float) -> np.ndarray:
        """Weight values with zero mean and standard deviation ``std`` (uniform, which is fast to draw)."""
        return scaled_uniform(self.rng, shape, std)

    def weight(self, prefix: str, shape: Sequence[int], std: float) -> str:
        """A fresh initializer with zero mean and standard deviation ``std``."""
        return self.param(self.fresh(prefix), self.init(shape, std))

    # ------------------------------------------------------------- raw nodes
    def node(self, op: str, inputs: Sequence[str], shape: Sequence[int], prefix: str | None = None, **attrs) -> str:
        """Append one single-output node; returns its output tensor name."""
        out = self.fresh(prefix or op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        self.shapes[out] = tuple(int(d) for d in shape)
        return out

    def _unary(self, op: str, x: str) -> str:
        return self.node(op, [x], self.shape(x))

    def _binary(self, op: str, a: str, b: str) -> str:
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        return self.node(op, [a, b], shape)

    def relu(self, x: str) -> str:
        return self._unary("Relu", x)

    def sigmoid(self, x: str) -> str:
        return self._unary("Sigmoid", x)

    def tanh(self, x: str) -> str:
        return self._unary("Tanh", x)

    def erf(self, x: str) -> str:
        return self._unary("Erf", x)

    def add(self, a: str, b: str) -> str:
        return self._binary("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self._binary("Sub", a, b)

    def mul(self, a: str, b: str) -> str:
        return self._binary("Mul", a, b)

    def div(self, a: str, b: str) -> str:
        return self._binary("Div", a, b)

    def softmax(self, x: str, axis: int = -1) -> str:
        return self.node("Softmax", [x], self.shape(x), axis=axis)

    # -------------------------------------------------------------- conv net
    def _pads(self, in_hw: tuple[int, int], k: tuple[int, int], s: tuple[int, int],
              d: tuple[int, int], pad: IntOrPair | str) -> list[int]:
        if isinstance(pad, str):
            if pad.lower() != "same":
                raise ValueError(f"unsupported padding {pad!r}")
            from ..graph.ops.nn import same_padding

            pads = [same_padding(size, kk, ss, dd) for size, kk, ss, dd in zip(in_hw, k, s, d)]
            return [p[0] for p in pads] + [p[1] for p in pads]  # SAME_UPPER: extra padding at the end
        if isinstance(pad, int):
            return [pad] * 4
        pad = list(pad)
        if len(pad) == 2:
            return pad + pad
        if len(pad) == 4:
            return pad
        raise ValueError(f"bad padding {pad!r}")

    @staticmethod
    def _out_hw(in_hw: Sequence[int], k: Sequence[int], s: Sequence[int], d: Sequence[int],
                pads: Sequence[int]) -> tuple[int, int]:
        return tuple(
            (in_hw[i] + pads[i] + pads[i + 2] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)
        )  # type: ignore[return-value]

    def conv(self, x: str, cout: int, kernel: IntOrPair, stride: IntOrPair = 1, pad: IntOrPair | str = 0,
             group: int = 1, dilation: IntOrPair = 1, bias: bool = False, gain: float = 2.0) -> str:
        """2-D convolution with a He-initialised weight (std ``sqrt(gain / fan_in)``)."""
        n, cin, h, w = self.shape(x)
        if cin % group or cout % group:
            raise ValueError(f"channels {cin}->{cout} not divisible by group {group}")
        k, s, d = _pair(kernel), _pair(stride), _pair(dilation)
        pads = self._pads((h, w), k, s, d, pad)
        fan_in = (cin // group) * k[0] * k[1]
        name = self.fresh("conv")
        wname = self.param(f"{name}.weight", self.init((cout, cin // group, *k), math.sqrt(gain / fan_in)))
        inputs = [x, wname]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.normal((cout,), 0.05)))
        oh, ow = self._out_hw((h, w), k, s, d, pads)
        attrs = dict(kernel_shape=list(k), strides=list(s), pads=pads, dilations=list(d))
        if group != 1:
            attrs["group"] = group
        self.nodes.append(helper.make_node("Conv", inputs, [name], name=name, **attrs))
        self.shapes[name] = (n, cout, oh, ow)
        return name

    def bn(self, x: str, eps: float = 1e-5, gamma_scale: float = 1.0) -> str:
        """Inference BatchNormalization with gamma ~ U(0.5,1.5)*gamma_scale, var ~ U(0.65,1.65)."""
        c = self.shape(x)[1]
        name = self.fresh("bn")
        scale = self.param(f"{name}.scale", self.uniform((c,), 0.5, 1.5) * np.float32(gamma_scale))
        shift = self.param(f"{name}.bias", self.normal((c,), 0.1))
        mean = self.param(f"{name}.mean", self.normal((c,), 0.1))
        var = self.param(f"{name}.var", self.uniform((c,), BN_VAR[0], BN_VAR[1]))
        self.nodes.append(helper.make_node("BatchNormalization", [x, scale, shift, mean, var], [name],
                                           name=name, epsilon=eps))
        self.shapes[name] = self.shape(x)
        return name

    def conv_bn_relu(self, x: str, cout: int, kernel: IntOrPair, stride: IntOrPair = 1,
                     pad: IntOrPair | str = 0, group: int = 1, eps: float = 1e-5) -> str:
        return self.relu(self.bn(self.conv(x, cout, kernel, stride, pad, group), eps=eps))

    def _pool(self, op: str, x: str, kernel: IntOrPair, stride: IntOrPair, pad: IntOrPair | str) -> str:
        n, c, h, w = self.shape(x)
        k, s = _pair(kernel), _pair(stride)
        pads = self._pads((h, w), k, s, (1, 1), pad)
        oh, ow = self._out_hw((h, w), k, s, (1, 1), pads)
        return self.node(op, [x], (n, c, oh, ow), kernel_shape=list(k), strides=list(s), pads=pads)

    def maxpool(self, x: str, kernel: IntOrPair, stride: IntOrPair = 1, pad: IntOrPair | str = 0) -> str:
        return self._pool("MaxPool", x, kernel, stride, pad)

    def avgpool(self, x: str, kernel: IntOrPair, stride: IntOrPair = 1, pad: IntOrPair | str = 0) -> str:
        """AveragePool (count_include_pad=0, the ONNX default)."""
        return self._pool("AveragePool", x, kernel, stride, pad)

    def global_avgpool(self, x: str) -> str:
        n, c = self.shape(x)[:2]
        return self.node("GlobalAveragePool", [x], (n, c, 1, 1))

    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        shapes = [self.shape(x) for x in xs]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return self.node("Concat", list(xs), out, axis=axis)

    def flatten(self, x: str, axis: int = 1) -> str:
        s = self.shape(x)
        return self.node("Flatten", [x], (math.prod(s[:axis]), math.prod(s[axis:])), axis=axis)

    # ------------------------------------------------------------------ dense
    def gemm(self, x: str, nout: int, bias: bool = True, gain: float = 1.0) -> str:
        """``x @ W^T + b`` as a Gemm with transB=1; W has variance ``gain / fan_in``."""
        m, k = self.shape(x)
        name = self.fresh("gemm")
        inputs = [x, self.param(f"{name}.weight", self.init((nout, k), math.sqrt(gain / k)))]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.normal((nout,), 0.05)))
        self.nodes.append(helper.make_node("Gemm", inputs, [name], name=name, transB=1))
        self.shapes[name] = (m, nout)
        return name

    def matmul(self, a: str, b: str | int, gain: float = 1.0) -> str:
        """MatMul; if ``b`` is an int a fresh ``[K, b]`` weight is created."""
        if isinstance(b, int):
            k = self.shape(a)[-1]
            b = self.weight("matmul.weight", (k, b), math.sqrt(gain / k))
        sa, sb = self.shape(a), self.shape(b)
        batch = np.broadcast_shapes(sa[:-2], sb[:-2]) if len(sa) > 1 and len(sb) > 1 else ()
        return self.node("MatMul", [a, b], (*batch, sa[-2], sb[-1]))

    def linear(self, x: str, nout: int, gain: float = 1.0) -> str:
        """MatMul with a fresh weight followed by a bias Add."""
        y = self.matmul(x, nout, gain=gain)
        return self.add(y, self.weight("linear.bias", (nout,), 0.05))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        src = self.shape(x)
        out = [src[i] if d == 0 else d for i, d in enumerate(shape)]
        if -1 in out:
            known = math.prod(d for d in out if d != -1)
            out[out.index(-1)] = math.prod(src) // known
        return self.node("Reshape", [x, self.const(list(shape), np.int64)], out)

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        s = self.shape(x)
        return self.node("Transpose", [x], [s[p] for p in perm], perm=list(perm))

    def layernorm(self, x: str, eps: float = 1e-12) -> str:
        """LayerNormalization over the last axis with gamma ~ 1 + N(0, 0.1)."""
        c = self.shape(x)[-1]
        name = self.fresh("layernorm")
        scale = self.param(f"{name}.scale", 1.0 + self.normal((c,), 0.1))
        shift = self.param(f"{name}.bias", self.normal((c,), 0.1))
        self.nodes.append(helper.make_node("LayerNormalization", [x, scale, shift], [name], name=name,
                                           axis=-1, epsilon=eps))
        self.shapes[name] = self.shape(x)
        return name

    # ------------------------------------------------------------------ build
    def build(self, output: str, output_name: str = "output", doc: str = "") -> onnx.ModelProto:
        """Finish the graph with ``output`` renamed to ``output_name``."""
        for node in self.nodes:
            for seq in (node.input, node.output):
                for i, t in enumerate(seq):
                    if t == output:
                        seq[i] = output_name
        out_info = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(self.shape(output)))
        model, self.model = self.model, onnx.ModelProto()
        graph = model.graph
        graph.name = self.name
        graph.doc_string = doc
        graph.node.extend(self.nodes)
        graph.input.extend(self.inputs)
        graph.output.append(out_info)
        model.ir_version = IR_VERSION
        model.producer_name = "taso_tvm.zoo"
        model.opset_import.append(helper.make_opsetid("", self.opset))
        return model
