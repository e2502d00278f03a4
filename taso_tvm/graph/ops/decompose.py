"""Operators defined by a decomposition into registry operators: the runtime's fused operators.

A fused operator (ONNX Runtime's MultiHeadAttention, SkipLayerNormalization, BiasGelu, ...) has no semantics of its
own: it *is* a small program over the primitive operators, written once as a Python function over an evaluator.
Running that program with each evaluator gives every slot of its `OpDef`: shape inference (over `TensorType`s),
the NumPy reference, the Z3 semantics the rule verifier reads (so a rule that produces a fused operator is proven
against its decomposition like any other rule), and the Relax lowering.

How a fused operator is lowered to Relax depends on what will run the result (`fused_lowering`):

* ``"decompose"`` (the default): its decomposition, inline, in primitive Relax operators (TVM builds it);
* ``"relax_attention"``: the same, except that attention becomes Relax's own `R.nn.attention` (targets that have
  a kernel for it);
* ``"composite"``: a call to a private Relax function whose body is the decomposition and whose attributes name the
  fused operator (``Composite: "taso.<name>"``, ``taso.attrs``: its attributes as JSON). The ONNX exporter writes
  such a call as the runtime's fused node, or inlines the body when asked for standard operators only.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
from tvm import relax

from .base import OPS, OpDef, register
from ..types import GraphError, TensorType

# (evaluator, input values, attrs) -> output values
Program = Callable[["Evaluator", Sequence[Any], dict], list]

COMPOSITE_PREFIX = "taso."  # the Composite attribute of a lowered fused operator: "taso.<operator name>"
ATTRS_KEY = "taso.attrs"  # its attributes, as JSON
LOWERINGS = ("decompose", "relax_attention", "composite")

_LOWERING: contextvars.ContextVar[str] = contextvars.ContextVar("taso_fused_lowering", default="decompose")
_PROGRAMS: dict[str, tuple[Program, bool]] = {}  # fused operator -> (decomposition, has its own relax_attention lowering)


def fused_lowering() -> str:
    """How fused operators are lowered to Relax right now (see the module docstring)."""
    return _LOWERING.get()


@contextlib.contextmanager
def lowering(mode: str) -> Iterator[None]:
    """Lower fused operators as `mode` inside the block: ``decompose``, ``relax_attention`` or ``composite``."""
    if mode not in LOWERINGS:
        raise ValueError(f"fused lowering must be one of {LOWERINGS}, got {mode!r}")
    token = _LOWERING.set(mode)
    try:
        yield
    finally:
        _LOWERING.reset(token)


class Evaluator:
    """Runs a decomposition: `op` applies a registry operator, `const` makes a constant, `shape` reads a shape."""

    def op(self, name: str, *args: Any, **attrs: Any) -> Any:
        outs = self.apply(OPS[name], list(args), attrs)
        return outs[0] if len(outs) == 1 else outs

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        raise NotImplementedError

    def const(self, value: float, like: Any) -> Any:
        raise NotImplementedError

    def shape(self, v: Any) -> tuple:
        raise NotImplementedError

    def type_of(self, v: Any) -> TensorType:
        return TensorType(tuple(int(d) for d in self.shape(v)), "float32")

    def full_attrs(self, opdef: OpDef, args: list, attrs: dict) -> dict:
        return opdef.make_attrs(attrs, [self.type_of(a) for a in args])


class TypeEvaluator(Evaluator):
    """Values are `TensorType`s: shape inference (and every shape check of the primitives on the way)."""

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        return list(opdef.infer(args, opdef.make_attrs(attrs, args)))

    def const(self, value: float, like: TensorType) -> TensorType:
        return TensorType((), like.dtype)

    def shape(self, v: TensorType) -> tuple:
        return v.shape

    def type_of(self, v: TensorType) -> TensorType:
        return v


class NumpyEvaluator(Evaluator):
    """Values are NumPy arrays: the reference semantics."""

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        return list(opdef.numpy(args, self.full_attrs(opdef, args, attrs)))

    def const(self, value: float, like: np.ndarray) -> np.ndarray:
        return np.asarray(value, dtype=like.dtype)

    def shape(self, v: np.ndarray) -> tuple:
        return np.shape(v)

    def type_of(self, v: np.ndarray) -> TensorType:
        return TensorType(tuple(int(d) for d in np.shape(v)), str(np.asarray(v).dtype))


class Z3Evaluator(Evaluator):
    """Values are object arrays of Z3 terms (or of the verifier's polynomials): the verifier's semantics."""

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        fn = opdef.z3 or opdef.numpy
        return [np.asarray(v, dtype=object) for v in fn(args, self.full_attrs(opdef, args, attrs))]

    def const(self, value: float, like: Any) -> np.ndarray:
        return np.asarray(value, dtype=object)

    def shape(self, v: Any) -> tuple:
        return np.shape(v)


class RelaxEvaluator(Evaluator):
    """Values are (Relax expression, TensorType) pairs; every operator is emitted into the block builder."""

    def __init__(self, bb: relax.BlockBuilder):
        self.bb = bb

    def apply(self, opdef: OpDef, args: list, attrs: dict) -> list:
        types = [t for _, t in args]
        full = opdef.make_attrs(attrs, types)
        out_types = opdef.infer(types, full)
        res = opdef.lower(self.bb, [e for e, _ in args], full, types)
        exprs = list(res) if isinstance(res, (list, tuple)) else [res]
        return [(self.bb.emit(e), t) for e, t in zip(exprs, out_types)]

    def const(self, value: float, like: tuple) -> tuple:
        dtype = like[1].dtype
        return relax.const(np.asarray(value, dtype=dtype), dtype), TensorType((), dtype)

    def shape(self, v: tuple) -> tuple:
        return v[1].shape

    def type_of(self, v: tuple) -> TensorType:
        return v[1]


def _composite_call(name: str, program: Program, bb: relax.BlockBuilder, args: Sequence[Any], attrs: dict,
                    in_types: Sequence[TensorType]) -> Any:
    """A call to a private function holding the decomposition, marked as the fused operator `name`."""
    params = [relax.Var(f"x{i}", relax.TensorType(list(t.shape), t.dtype)) for i, t in enumerate(in_types)]
    fbb = relax.BlockBuilder()
    fname = f"taso_{name}"
    with fbb.function(fname, params, private=True):
        with fbb.dataflow():
            outs = program(RelaxEvaluator(fbb), list(zip(params, in_types)), attrs)
            results = [fbb.emit_output(e) for e, _ in outs]
        fbb.emit_func_output(results[0] if len(results) == 1 else relax.Tuple(results))
    func = fbb.get()[fname]
    func = func.with_attr("Composite", COMPOSITE_PREFIX + name)
    func = func.with_attr(ATTRS_KEY, json.dumps(_jsonable(attrs), sort_keys=True))
    gv = bb.add_func(func, fname)
    call = relax.Call(gv, list(args))
    if len(outs) == 1:
        return call
    tup = bb.emit(call)
    return [relax.TupleGetItem(tup, i) for i in range(len(outs))]


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def decomposition(name: str, mode: Optional[str] = None) -> Optional[Program]:
    """The decomposition that lowering operator `name` in `mode` (default: the current one) inlines, or None when
    the lowering keeps it whole (not a fused operator, ``composite``, or ``relax_attention`` with its own operator)."""
    entry = _PROGRAMS.get(name)
    mode = mode or fused_lowering()
    if entry is None or mode == "composite" or (mode == "relax_attention" and entry[1]):
        return None
    return entry[0]


def composite_attrs(func: Any) -> Optional[tuple[str, dict]]:
    """(fused operator name, attributes) of a Relax function made by a composite lowering, else None."""
    fattrs = getattr(func, "attrs", None)
    if fattrs is None or "Composite" not in fattrs:
        return None
    comp = str(fattrs["Composite"])
    if not comp.startswith(COMPOSITE_PREFIX):
        return None
    raw = str(fattrs[ATTRS_KEY]) if ATTRS_KEY in fattrs else "{}"
    return comp[len(COMPOSITE_PREFIX):], json.loads(raw)


def register_decomposed(name: str, inputs: int, program: Program, attrs: dict, doc: str,
                        check: Optional[Callable[[Sequence[TensorType], dict], None]] = None,
                        relax_lower: Optional[Callable[..., Any]] = None, value_input: int = 0,
                        index_inputs: Callable[[int], Sequence[int]] = lambda n: ()) -> OpDef:
    """Register operator `name` whose every semantics is `program` run by the matching evaluator.

    check: extra validation of input types and attributes (raise GraphError) before the program runs.
    relax_lower: the lowering used in ``relax_attention`` mode (default: the decomposition).
    value_input: the input whose dtype the outputs have; index_inputs(number of inputs): the positions of integer
    index inputs, whose dtype may differ (every other input has the outputs' dtype)."""

    def infer(types: Sequence[TensorType], a: dict) -> list[TensorType]:
        if check is not None:
            check(types, a)
        skip = set(index_inputs(len(types)))
        dtypes = {t.dtype for i, t in enumerate(types) if i not in skip}
        if len(dtypes) != 1:
            raise GraphError(f"{name}: mixed dtypes {sorted(dtypes)}")
        dtype = types[value_input].dtype
        return [TensorType(t.shape, dtype) for t in program(TypeEvaluator(), list(types), a)]

    def numpy_fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        return [np.asarray(v).astype(np.asarray(x[value_input]).dtype, copy=False) for v in
                program(NumpyEvaluator(), list(x), a)]

    def z3_fn(x: Sequence[np.ndarray], a: dict) -> list[np.ndarray]:
        return program(Z3Evaluator(), [np.asarray(v, dtype=object) for v in x], a)

    def lower(bb: relax.BlockBuilder, args: Sequence[Any], a: dict, in_types: Sequence[TensorType]) -> Any:
        mode = fused_lowering()
        if mode == "composite":
            return _composite_call(name, program, bb, args, a, in_types)
        if mode == "relax_attention" and relax_lower is not None:
            return relax_lower(bb, args, a, in_types)
        outs = program(RelaxEvaluator(bb), list(zip(args, in_types)), a)
        return outs[0][0] if len(outs) == 1 else [e for e, _ in outs]

    op = register(OpDef(name, inputs, infer, numpy_fn, attrs=attrs, lower=lower, z3=z3_fn, doc=doc))
    _PROGRAMS[name] = (program, relax_lower is not None)
    return op


__all__ = ["Evaluator", "register_decomposed", "decomposition", "fused_lowering", "lowering", "composite_attrs", "LOWERINGS",
           "COMPOSITE_PREFIX"]
