"""A kernel signature as a small ONNX model (opset 17), for measuring it in ONNX Runtime.

Weights become initializers (random data, as ONNX Runtime pre-packs constant weights in deployment), other
inputs become graph inputs. Operators without an ONNX mapping raise `UnsupportedOp`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..graph.types import normalize_axis
from .kernel import KernelSig, rebuild

OPSET = 17
_SIMPLE = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "relu": "Relu", "sigmoid": "Sigmoid",
           "tanh": "Tanh", "erf": "Erf", "exp": "Exp", "sqrt": "Sqrt", "neg": "Neg"}
_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


class UnsupportedOp(ValueError):
    """The kernel has an operator (or attribute value) with no ONNX mapping here."""


class _Emitter:
    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def node(self, op: str, ins: list[str], n_out: int = 1, **attrs) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs

    def const(self, arr: np.ndarray, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name


def _act(e: _Emitter, act: str, x: str) -> str:
    if act in (None, "none"):
        return x
    return e.node(_ACT[act], [x])[0]


def _emit(e: _Emitter, op: str, a: dict, args: list[str], in_shapes: list[tuple]) -> list[str]:
    if op in _SIMPLE:
        return e.node(_SIMPLE[op], args)
    if op == "gelu":  # opset 17 has no Gelu: the erf form, which ORT's optimizer fuses back into Gelu
        x = args[0]
        half = e.const(np.array(0.5, np.float32))
        one = e.const(np.array(1.0, np.float32))
        rs2 = e.const(np.array(1 / np.sqrt(2.0), np.float32))
        t = e.node("Erf", e.node("Mul", [x, rs2]))[0]
        return e.node("Mul", [e.node("Mul", [x, half])[0], e.node("Add", [t, one])[0]])
    if op == "conv2d":
        t, l, b, r = a["padding"]
        y = e.node("Conv", args, pads=[t, l, b, r], strides=list(a["strides"]), dilations=list(a["dilation"]),
                   group=a["groups"], kernel_shape=list(in_shapes[1][2:]))[0]
        return [_act(e, a["activation"], y)]
    if op == "matmul":
        return [_act(e, a["activation"], e.node("MatMul", args)[0])]
    if op in ("maxpool2d", "avgpool2d"):
        t, l, b, r = a["padding"]
        kw = dict(kernel_shape=list(a["kernel"]), pads=[t, l, b, r], strides=list(a["strides"]),
                  ceil_mode=int(a["ceil_mode"]))
        if op == "maxpool2d":
            return e.node("MaxPool", args, dilations=list(a["dilation"]), **kw)
        if tuple(a["dilation"]) != (1, 1):
            raise UnsupportedOp("avgpool2d with dilation (AveragePool has dilations only from opset 19)")
        return e.node("AveragePool", args, count_include_pad=int(a["count_include_pad"]), **kw)
    if op == "batchnorm":
        if normalize_axis(a["axis"], len(in_shapes[0])) != 1:
            raise UnsupportedOp("batchnorm on an axis other than 1")
        return e.node("BatchNormalization", args, epsilon=float(a["epsilon"]))
    if op == "softmax":
        return e.node("Softmax", args, axis=int(a["axis"]))
    if op == "layernorm":
        nd = len(in_shapes[0])
        axes = sorted(normalize_axis(x, nd) for x in a["axes"])
        if axes != list(range(axes[0], nd)):
            raise UnsupportedOp(f"layernorm over non-trailing axes {a['axes']}")
        return e.node("LayerNormalization", args, axis=axes[0], epsilon=float(a["epsilon"]))
    if op == "mean":
        return e.node("ReduceMean", args, axes=list(a["axes"]), keepdims=int(a["keepdims"]))
    if op == "concat":
        return e.node("Concat", args, axis=int(a["axis"]))
    if op == "split":
        sizes = e.const(np.array(a["sizes"], np.int64), "sizes")
        return e.node("Split", [args[0], sizes], n_out=len(a["sizes"]), axis=int(a["axis"]))
    if op == "transpose":
        return e.node("Transpose", args, perm=list(a["perm"]))
    if op == "reshape":
        return e.node("Reshape", [args[0], e.const(np.array(a["shape"], np.int64), "shape")])
    if op == "enlarge":
        shape = in_shapes[0]
        dh, dw = (a["kernel"][0] - shape[2]) // 2, (a["kernel"][1] - shape[3]) // 2
        pads = e.const(np.array([0, 0, dh, dw, 0, 0, dh, dw], np.int64), "pads")
        return e.node("Pad", [args[0], pads])
    raise UnsupportedOp(f"no ONNX mapping for operator '{op}'")


def kernel_onnx(sig: KernelSig, weights: Optional[dict[int, np.ndarray]] = None, seed: int = 0) \
        -> onnx.ModelProto:
    """ONNX model of the kernel. Weight inputs become initializers (`weights[k]` or random data)."""
    rng = np.random.default_rng(seed)
    e = _Emitter()
    graph_inputs = []
    names = []
    shapes_of: dict[str, tuple] = {}
    for k, (shape, dtype, is_weight) in enumerate(sig.inputs):
        name = f"p{k}"
        names.append(name)
        shapes_of[name] = tuple(shape)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        if is_weight:
            arr = weights[k] if weights and k in weights else _random(rng, shape, dtype)
            e.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
    produced: list[list[str]] = []
    node_shapes: list[list[tuple]] = []
    _, _, nodes = rebuild(sig)  # node types from the registry's shape inference
    for (op, attrs, refs), node in zip(sig.nodes, nodes):
        args, in_shapes = [], []
        for i, j in refs:
            args.append(names[-1 - i] if i < 0 else produced[i][j])
            in_shapes.append(tuple(sig.inputs[-1 - i][0]) if i < 0 else node_shapes[i][j])
        produced.append(_emit(e, op, dict(attrs), args, in_shapes))
        node_shapes.append([tuple(t.shape) for t in node.types])
    outputs, rename = [], {}
    for i, j in sig.outputs:
        ty = nodes[i].types[j]
        out_name = rename[produced[i][j]] = f"out{len(outputs)}"
        outputs.append(helper.make_tensor_value_info(out_name, helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype)),
                                                     list(ty.shape)))
    return _model(e, "kernel", graph_inputs, outputs, rename)


def graph_onnx(graph) -> onnx.ModelProto:
    """A whole TensorGraph as one ONNX model (weight-only subgraphs folded into initializers), e.g. to time it
    end to end in ONNX Runtime. Raises UnsupportedOp for opaque nodes or unmapped operators."""
    e = _Emitter()
    names: dict[tuple, str] = {}
    folded: dict[int, list] = {}
    inputs = []
    weight_only = graph.weight_only_ids()
    for node in graph.topo_order():
        if node.op == "input":
            t = node.types[0]
            names[(node.id, 0)] = node.attrs["name"]
            inputs.append(helper.make_tensor_value_info(node.attrs["name"], helper.np_dtype_to_tensor_dtype(
                np.dtype(t.dtype)), list(t.shape)))
        elif node.op == "opaque":
            raise UnsupportedOp("opaque node")
        elif node.op == "weight" or node.id in weight_only:
            if node.op == "weight":
                from ..graph.tensor_graph import weight_array

                vals = [weight_array(node)]
            else:
                vals = node.opdef.numpy([folded[i][j] for i, j in node.inputs], node.attrs)
            folded[node.id] = [np.ascontiguousarray(v, dtype=t.dtype) for v, t in zip(vals, node.types)]
            for k, v in enumerate(folded[node.id]):
                names[(node.id, k)] = e.const(v, "w")
        else:
            args = [names[r] for r in node.inputs]
            in_shapes = [tuple(graph.type(r).shape) for r in node.inputs]
            for k, out in enumerate(_emit(e, node.op, dict(node.attrs), args, in_shapes)):
                names[(node.id, k)] = out
    outputs, rename = [], {}
    for ref in graph.outputs:
        t = graph.type(ref)
        out_name = f"out{len(outputs)}"
        outputs.append(helper.make_tensor_value_info(out_name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)),
                                                     list(t.shape)))
        if names[ref] in rename or any(names[ref] == i.name for i in inputs):
            e.nodes.append(helper.make_node("Identity", [names[ref]], [out_name]))
        else:
            rename[names[ref]] = out_name
    return _model(e, "graph", inputs, outputs, rename)


def _model(e: "_Emitter", name: str, inputs: list, outputs: list, rename: dict) -> onnx.ModelProto:
    """The emitted nodes as a model, with tensors in `rename` written under their output names (no Identity
    nodes)."""
    for n in e.nodes:
        for field in (n.input, n.output):
            for k, v in enumerate(field):
                if v in rename:
                    field[k] = rename[v]
    g = helper.make_graph(e.nodes, name, inputs, outputs, initializer=e.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="taso_tvm.cost")
    model.ir_version = min(model.ir_version, 8)
    return model


def _random(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.floating):
        return (rng.standard_normal(tuple(shape)) * 0.1).astype(dt)
    return np.zeros(tuple(shape), dt)


def random_feeds(sig: KernelSig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for the non-weight inputs of `kernel_onnx(sig)`."""
    rng = np.random.default_rng(seed)
    return {f"p{k}": _random(rng, s, d) for k, (s, d, w) in enumerate(sig.inputs) if not w}


__all__ = ["kernel_onnx", "graph_onnx", "random_feeds", "UnsupportedOp", "TensorProto"]
