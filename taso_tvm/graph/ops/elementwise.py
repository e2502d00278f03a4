"""Element-wise operators: binary arithmetic with broadcasting and unary activations."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np
from tvm import relax

from .base import OpDef, Z3Fn, broadcast_shapes, register, same_dtype
from ..types import TensorType


def _binary(name: str, relax_name: str, fn: Callable, relax_fn: Callable, z3: Optional[Z3Fn] = None) -> OpDef:
    def infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
        return [TensorType(broadcast_shapes(t[0].shape, t[1].shape, name), same_dtype(t, name))]

    def np_fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        return [fn(x[0], x[1])]

    def lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], attrs: dict, in_types: Sequence[TensorType]) -> Any:
        return relax_fn(args[0], args[1])

    return register(OpDef(name, 2, infer, np_fn, relax=(relax_name,), lift=lambda call: (list(call.args), {}),
                          lower=lower, z3=z3 or np_fn,
                          doc=f"element-wise {name} with NumPy broadcasting"))


def _unary(name: str, relax_name: str, fn: Callable, relax_fn: Callable, z3: Optional[Z3Fn] = None) -> OpDef:
    def infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
        return [t[0]]

    def np_fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        return [np.asarray(fn(x[0])).astype(x[0].dtype, copy=False) if x[0].dtype != object else fn(x[0])]

    def lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], attrs: dict, in_types: Sequence[TensorType]) -> Any:
        return relax_fn(args[0])

    return register(OpDef(name, 1, infer, np_fn, relax=(relax_name,), lift=lambda call: (list(call.args), {}),
                          lower=lower, z3=z3, doc=f"element-wise {name}"))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + _erf(x / np.sqrt(2.0).astype(x.dtype)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.sqrt(2.0 / np.pi).astype(x.dtype)
    return x * 0.5 * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------- Z3 semantics (for taso_tvm.rules.verify)
# Values are NumPy object arrays of z3 Real expressions (plain numbers allowed). ReLU is exact (If); other
# non-linear functions are uninterpreted Real -> Real functions; a / b is a * recip(b) with recip uninterpreted
# unless b is a numeral (exact for b != 0; what IEEE gives for b == 0 is outside the real-number model anyway).
# The slots also accept the verifier's exact polynomials (`rules.verify.poly.Poly`): any value with a `sym_apply(name,
# *others)` method gets relu, the functions, recip and max through it (`z3_apply`, `z3_max`).
_Z3_FUNCS: dict = {}


def _symbolic(v: Any) -> bool:
    """A symbolic value that is not a z3 expression (it applies functions itself)."""
    return hasattr(v, "sym_apply")


def z3_fn(name: str) -> Any:
    """The uninterpreted function `name`: Real -> Real (one declaration per process)."""
    import z3

    f = _Z3_FUNCS.get(name)
    if f is None:
        f = _Z3_FUNCS[name] = z3.Function(name, z3.RealSort(), z3.RealSort())
    return f


def z3_val(v: Any) -> Any:
    """A z3 Real for a number or a z3 expression."""
    import z3

    if z3.is_expr(v) or _symbolic(v):
        return v
    if isinstance(v, (bool, np.bool_)):
        return z3.RealVal(int(v))
    if isinstance(v, (int, np.integer)):
        return z3.RealVal(int(v))
    return z3.RealVal(float(v))


def z3_map(fn, x: np.ndarray) -> np.ndarray:
    """Apply fn to every element of an object array."""
    x = np.asarray(x, dtype=object)
    out = np.empty(x.shape, dtype=object)
    for i, v in np.ndenumerate(x):
        out[i] = fn(v)
    return out


def z3_recip(v: Any) -> Any:
    """1 / v: exact for a non-zero numeral, else the uninterpreted `recip`."""
    import z3

    v = z3_val(v)
    if _symbolic(v):
        return v.sym_apply("recip")
    s = z3.simplify(v) if not z3.is_rational_value(v) else v
    if z3.is_rational_value(s) and s.as_fraction() != 0:
        return z3.RealVal(1) / s
    return z3_fn("recip")(v)


def _z3_div(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    a_, b_ = np.broadcast_arrays(np.asarray(x[0], dtype=object), np.asarray(x[1], dtype=object))
    out = np.empty(a_.shape, dtype=object)
    for i in np.ndindex(a_.shape):
        out[i] = z3_val(a_[i]) * z3_recip(b_[i])
    return [out]


def z3_apply(name: str, v: Any) -> Any:
    """The uninterpreted function `name` applied to v."""
    v = z3_val(v)
    return v.sym_apply(name) if _symbolic(v) else z3_fn(name)(v)


def z3_apply_n(name: str, *args: Any) -> Any:
    """The uninterpreted function `name` of several Real arguments (booleans as 0 / 1)."""
    import z3

    sym = next((v for v in args if _symbolic(v)), None)
    if sym is not None:
        i = next(k for k, v in enumerate(args) if v is sym)
        return sym.sym_apply(f"{name}@{i}", *(args[:i] + args[i + 1:]))
    key = f"{name}/{len(args)}"
    f = _Z3_FUNCS.get(key)
    if f is None:
        f = _Z3_FUNCS[key] = z3.Function(name, *([z3.RealSort()] * (len(args) + 1)))
    return f(*(z3_val(v) for v in args))


def z3_max(a: Any, b: Any) -> Any:
    """max(a, b), exact (If)."""
    import z3

    if _symbolic(a):
        return a.sym_apply("max", b)
    if _symbolic(b):
        return b.sym_apply("max", a)
    a, b = z3_val(a), z3_val(b)
    return z3.If(b > a, b, a)


def _z3_relu(v: Any) -> Any:
    import z3

    v = z3_val(v)
    if _symbolic(v):
        return v.sym_apply("relu")
    return z3.If(v > 0, v, z3.RealVal(0))


def _z3_unary(fn: Callable[[Any], Any]) -> Z3Fn:
    return lambda x, a: [z3_map(fn, x[0])]


def _z3_uf(name: str) -> Z3Fn:
    return lambda x, a: [z3_map(lambda v: z3_apply(name, v), x[0])]


R = relax.op
ADD = _binary("add", "relax.add", np.add, R.add)
SUB = _binary("sub", "relax.subtract", np.subtract, R.subtract)
MUL = _binary("mul", "relax.multiply", np.multiply, R.multiply)
DIV = _binary("div", "relax.divide", np.divide, R.divide, z3=_z3_div)
RELU = _unary("relu", "relax.nn.relu", lambda x: np.maximum(x, 0), R.nn.relu, z3=_z3_unary(_z3_relu))
SIGMOID = _unary("sigmoid", "relax.sigmoid", _sigmoid, R.sigmoid, z3=_z3_uf("sigmoid"))
TANH = _unary("tanh", "relax.tanh", np.tanh, R.tanh, z3=_z3_uf("tanh"))
GELU = _unary("gelu", "relax.nn.gelu", _gelu, R.nn.gelu, z3=_z3_uf("gelu"))
GELU_TANH = _unary("gelu_tanh", "relax.nn.gelu_tanh", _gelu_tanh, R.nn.gelu_tanh, z3=_z3_uf("gelu_tanh"))
ERF = _unary("erf", "relax.erf", _erf, R.erf, z3=_z3_uf("erf"))
EXP = _unary("exp", "relax.exp", np.exp, R.exp, z3=_z3_uf("exp"))
COS = _unary("cos", "relax.cos", np.cos, R.cos, z3=_z3_uf("cos"))  # rotary embeddings' tables
SIN = _unary("sin", "relax.sin", np.sin, R.sin, z3=_z3_uf("sin"))
SQRT = _unary("sqrt", "relax.sqrt", np.sqrt, R.sqrt, z3=_z3_uf("sqrt"))
NEG = _unary("neg", "relax.negative", np.negative, R.negative, z3=_z3_unary(lambda v: -z3_val(v)))



# ---------------------------------------------------------------- power by a constant
# ONNX's Pow by a one-element constant (layer norm in pieces squares with Pow(x, 2) before opset 17). The exponent is
# an attribute, so the verifier knows it: a whole power from 0 to MAX_EXACT_POWER is an exact product (Pow by 2 is
# x * x), 0.5 is sqrt, any other one an uninterpreted function of x named for the exponent.
MAX_EXACT_POWER = 4


def _pow_np(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
    v = x[0]
    return [np.power(v, np.asarray(a["exponent"], dtype=v.dtype)).astype(v.dtype, copy=False)]


def _z3_pow_element(v: Any, e: float) -> Any:
    if e.is_integer() and 0 <= e <= MAX_EXACT_POWER:
        if e == 0:
            return z3_val(1)
        out = v
        for _ in range(int(e) - 1):
            out = out * v
        return out
    if e == 0.5:
        return z3_apply("sqrt", v)
    return z3_apply(f"pow_{e!r}", v)


def _pow_lift(call: relax.Call) -> Optional[tuple[list, dict]]:
    from tvm.ir import GenericConst

    c = call.args[1]
    if not isinstance(c, GenericConst):
        return None
    arr = c.value.numpy()
    if arr.size != 1 or not np.issubdtype(arr.dtype, np.floating):
        return None
    return [call.args[0]], {"exponent": float(arr.reshape(-1)[0])}


def _pow_lower(bb: relax.BlockBuilder, args: Sequence[relax.Expr], a: dict, in_types: Sequence[TensorType]) -> Any:
    return R.power(args[0], relax.const(a["exponent"], in_types[0].dtype))


def _pow_infer(t: Sequence[TensorType], a: dict) -> list[TensorType]:
    return [t[0]]


POW = register(OpDef("pow", 1, _pow_infer, _pow_np, attrs={"exponent": None}, relax=("relax.power",),
                     lift=_pow_lift, lower=_pow_lower,
                     z3=lambda x, a: [z3_map(lambda v: _z3_pow_element(v, float(a["exponent"])), x[0])],
                     doc="x to a constant power (ONNX Pow by a one-element floating-point constant)"))

ACTIVATIONS = {"none": None, "relu": RELU, "sigmoid": SIGMOID, "tanh": TANH}


def apply_activation(name: str, x: np.ndarray) -> np.ndarray:
    """Apply a fused activation (TASO's ActiMode) in NumPy."""
    op = ACTIVATIONS[name]
    return x if op is None else op.numpy([x], {})[0]


def z3_activation(name: str, x: np.ndarray) -> np.ndarray:
    """Apply a fused activation to an object array of z3 expressions."""
    op = ACTIVATIONS[name]
    return x if op is None else op.z3([x], {})[0]


def lower_activation(name: str, expr: relax.Expr) -> relax.Expr:
    op = ACTIVATIONS[name]
    return expr if op is None else op.lower(None, [expr], {}, [])


def check_activation(name: str, op: str) -> str:
    name = str(name).lower()
    if name not in ACTIVATIONS:
        from ..types import GraphError

        raise GraphError(f"{op}: unknown activation '{name}' (one of {sorted(ACTIVATIONS)})")
    return name
