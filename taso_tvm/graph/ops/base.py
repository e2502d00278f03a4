"""The operator registry: one `OpDef` per operator holds what the IR itself needs to know about it.

An `OpDef` carries the attribute schema (defaults, normalisation), shape inference, NumPy reference semantics,
the Z3 semantics used by the rule verifier, the Relax operator names it lifts from, and its lowering back to
Relax. What other packages know about an operator (cost, rule matching, ...) they register as facets from their
own modules (`facets.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..types import GraphError, TensorType, freeze

InferFn = Callable[[Sequence[TensorType], dict], list[TensorType]]  # (input types, attrs) -> output types
NumpyFn = Callable[[Sequence[np.ndarray], dict], list[np.ndarray]]  # (input arrays, attrs) -> output arrays
Z3Fn = Callable[[Sequence[np.ndarray], dict], list[np.ndarray]]  # the same over object arrays of z3 expressions
# relax Call -> (tensor args, attrs), or (tensor args, attrs, name of the registered operator it lifts as: one Relax
# operator may lift as several of ours, e.g. `take` of a scalar index as `pick`); None: not liftable
LiftFn = Callable[[Any], "Optional[tuple]"]
# (block builder, relax exprs, attrs, input types) -> relax expr (a list of them for several outputs)
LowerFn = Callable[[Any, Sequence[Any], dict, Sequence[TensorType]], Any]
NormalizeFn = Callable[[dict, Sequence[TensorType]], dict]  # (attrs, input types) -> canonical attrs


@dataclass
class OpDef:
    """Everything about one operator. `inputs` is the arity (None = variadic, at least one)."""

    name: str
    inputs: Optional[int]
    infer: InferFn
    numpy: NumpyFn
    attrs: dict[str, Any] = field(default_factory=dict)  # attribute name -> default (None: required)
    relax: tuple[str, ...] = ()  # Relax operator names lifted into this op
    lift: Optional[LiftFn] = None
    lower: Optional[LowerFn] = None
    z3: Optional[Z3Fn] = None  # symbolic semantics, read by the rule verifier
    normalize: Optional[NormalizeFn] = None  # canonicalise attrs given input types
    doc: str = ""

    def make_attrs(self, given: dict, in_types: Sequence[TensorType]) -> dict:
        """Fill defaults, reject unknown or missing attributes, and canonicalise values."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise GraphError(f"{self.name}: unknown attribute(s) {sorted(unknown)}")
        out = {}
        for k, default in self.attrs.items():
            v = given.get(k, default)
            if v is None and default is None and k not in given:
                raise GraphError(f"{self.name}: missing required attribute '{k}'")
            out[k] = freeze(v)
        if self.normalize is not None:
            out = {k: freeze(v) for k, v in self.normalize(out, in_types).items()}
        return out

    def check_arity(self, n: int) -> None:
        """Raise a GraphError unless the operator takes `n` inputs."""
        if self.inputs is None:
            if n < 1:
                raise GraphError(f"{self.name}: needs at least one input")
        elif n != self.inputs:
            raise GraphError(f"{self.name}: expects {self.inputs} input(s), got {n}")


OPS: dict[str, OpDef] = {}
RELAX_TO_OP: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add an operator to the registry (and its Relax names to the lift table)."""
    if op.name in OPS:
        raise ValueError(f"operator {op.name} registered twice")
    OPS[op.name] = op
    for r in op.relax:
        RELAX_TO_OP[r] = op
    return op


def get_op(name: str) -> OpDef:
    """The registered operator `name` (a GraphError when there is none)."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown operator '{name}'") from None


def same_dtype(types: Sequence[TensorType], op: str) -> str:
    """The one dtype of `types` (a GraphError naming `op` when they differ)."""
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise GraphError(f"{op}: mixed dtypes {sorted(dts)}")
    return dts.pop()


def broadcast_shapes(a: Sequence, b: Sequence, op: str = "broadcast") -> tuple:
    """NumPy broadcasting of two shapes (symbolic dims must match exactly or meet a 1)."""
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise GraphError(f"{op}: shapes {tuple(a)} and {tuple(b)} do not broadcast")
    return tuple(reversed(out))
