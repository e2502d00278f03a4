"""Element-wise operators: binary arithmetic with broadcasting and unary activations."""
from __future__ import annotations

import math

import numpy as np
from tvm import relax

from .base import BROADCAST, ELEMWISE, OpDef, broadcast_shapes, register, same_dtype
from ..types import TensorType


def _binary(name: str, relax_name: str, fn, relax_fn) -> OpDef:
    def infer(t, a):
        return [TensorType(broadcast_shapes(t[0].shape, t[1].shape, name), same_dtype(t, name))]

    def np_fn(x, a):
        return [fn(x[0], x[1])]

    def lower(bb, args, attrs, in_types):
        return relax_fn(args[0], args[1])

    return register(OpDef(name, 2, infer, np_fn, relax=(relax_name,), lift=lambda call: (list(call.args), {}),
                          lower=lower, pattern=BROADCAST, doc=f"element-wise {name} with NumPy broadcasting"))


def _unary(name: str, relax_name: str, fn, relax_fn) -> OpDef:
    def infer(t, a):
        return [t[0]]

    def np_fn(x, a):
        return [np.asarray(fn(x[0])).astype(x[0].dtype, copy=False) if x[0].dtype != object else fn(x[0])]

    def lower(bb, args, attrs, in_types):
        return relax_fn(args[0])

    return register(OpDef(name, 1, infer, np_fn, relax=(relax_name,), lift=lambda call: (list(call.args), {}),
                          lower=lower, pattern=ELEMWISE, doc=f"element-wise {name}"))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + _erf(x / np.sqrt(2.0).astype(x.dtype)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


R = relax.op
ADD = _binary("add", "relax.add", np.add, R.add)
SUB = _binary("sub", "relax.subtract", np.subtract, R.subtract)
MUL = _binary("mul", "relax.multiply", np.multiply, R.multiply)
DIV = _binary("div", "relax.divide", np.divide, R.divide)
RELU = _unary("relu", "relax.nn.relu", lambda x: np.maximum(x, 0), R.nn.relu)
SIGMOID = _unary("sigmoid", "relax.sigmoid", _sigmoid, R.sigmoid)
TANH = _unary("tanh", "relax.tanh", np.tanh, R.tanh)
GELU = _unary("gelu", "relax.nn.gelu", _gelu, R.nn.gelu)
ERF = _unary("erf", "relax.erf", _erf, R.erf)
EXP = _unary("exp", "relax.exp", np.exp, R.exp)
SQRT = _unary("sqrt", "relax.sqrt", np.sqrt, R.sqrt)
NEG = _unary("neg", "relax.negative", np.negative, R.negative)

ACTIVATIONS = {"none": None, "relu": RELU, "sigmoid": SIGMOID, "tanh": TANH}


def apply_activation(name: str, x):
    """Apply a fused activation (TASO's ActiMode) in NumPy."""
    op = ACTIVATIONS[name]
    return x if op is None else op.numpy([x], {})[0]


def lower_activation(name: str, expr):
    op = ACTIVATIONS[name]
    return expr if op is None else op.lower(None, [expr], {}, [])


def check_activation(name: str, op: str) -> str:
    name = str(name).lower()
    if name not in ACTIVATIONS:
        from ..types import GraphError

        raise GraphError(f"{op}: unknown activation '{name}' (one of {sorted(ACTIVATIONS)})")
    return name
