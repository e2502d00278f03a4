"""Open facet registry: what a package above `graph` knows about an operator, registered from that package's module.

An operator's `OpDef` holds what the IR itself needs (attributes, shape inference, NumPy and Z3 semantics, Relax
lift/lower). Everything else a package knows about an operator (the cost model's fusion kind and FLOPs, the rule
matcher's commutativity, ...) is a *facet*: the package declares the facet once, then registers a value per operator
next to its other facets, in the manner of TVM's `register_op_attr`:

    declare_facet("cost.flops", "FLOPs of one node", required=lambda op: op.name not in SOURCE_OPS)

    @register_facet("conv2d", "cost.flops")
    def _conv_flops(attrs, in_shapes, out_shapes): ...

    register_facet("add", "rules.commutative", True)

`facet(op, name)` returns the value, the declared default when the operator registered none, or raises
`FacetMissing` naming the operator and the facet. `missing_facets()` lists every registered operator that lacks a
facet its package requires (a test walks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..types import GraphError
from .base import OPS, OpDef

_NO_DEFAULT = object()


class FacetMissing(GraphError):
    """An operator lacks a facet that a package needs of it."""


@dataclass(frozen=True)
class FacetSpec:
    """A declared facet: `required(opdef)` says which operators must register it; `default` serves the others."""

    name: str
    doc: str
    required: Callable[[OpDef], bool]
    default: Any = _NO_DEFAULT


_SPECS: dict[str, FacetSpec] = {}
_VALUES: dict[str, dict[str, Any]] = {}


def _always(_op: OpDef) -> bool:
    return True


def declare_facet(name: str, doc: str, required: Optional[Callable[[OpDef], bool]] = None,
                  default: Any = _NO_DEFAULT) -> FacetSpec:
    """Declare a facet once (by the package that reads it). Without `required`, every operator must register it
    unless a `default` is given, in which case none must."""
    if name in _SPECS:
        raise ValueError(f"facet '{name}' declared twice")
    if required is None:
        required = _always if default is _NO_DEFAULT else (lambda _op: False)
    spec = _SPECS[name] = FacetSpec(name, doc, required, default)
    _VALUES.setdefault(name, {})
    return spec


def register_facet(op: str, name: str, value: Any = _NO_DEFAULT) -> Any:
    """Register `value` as operator `op`'s facet `name`; without a value, a decorator registering the function."""
    if value is _NO_DEFAULT:
        def deco(fn: Callable) -> Callable:
            register_facet(op, name, fn)
            return fn
        return deco
    if name not in _SPECS:
        raise ValueError(f"facet '{name}' is not declared (declare_facet it in the module that reads it)")
    table = _VALUES[name]
    if op in table:
        raise ValueError(f"operator '{op}': facet '{name}' registered twice")
    table[op] = value
    return value


def facet(op: str, name: str) -> Any:
    """Operator `op`'s facet `name`: its registered value, else the facet's default, else `FacetMissing`."""
    spec = _SPECS.get(name)
    if spec is None:
        raise FacetMissing(f"facet '{name}' is not declared")
    try:
        return _VALUES[name][op]
    except KeyError:
        if spec.default is not _NO_DEFAULT:
            return spec.default
        raise FacetMissing(f"operator '{op}' has no '{name}' facet ({spec.doc})") from None


def has_facet(op: str, name: str) -> bool:
    """Whether `op` registered facet `name` itself (not counting the default)."""
    return op in _VALUES.get(name, {})


def declared_facets() -> dict[str, FacetSpec]:
    """Every declared facet by name (only those of packages imported so far)."""
    return dict(_SPECS)


def missing_facets() -> list[tuple[str, str]]:
    """(operator, facet) for every registered operator lacking a facet its package requires of it."""
    out = []
    for name, spec in sorted(_SPECS.items()):
        for op_name, opdef in sorted(OPS.items()):
            if spec.required(opdef) and op_name not in _VALUES[name]:
                out.append((op_name, name))
    return out


def unknown_operators() -> list[tuple[str, str]]:
    """(operator, facet) for every facet registered against a name that is not a registered operator (a typo)."""
    return [(op, name) for name, table in sorted(_VALUES.items()) for op in sorted(table) if op not in OPS]


__all__ = ["FacetMissing", "FacetSpec", "declare_facet", "register_facet", "facet", "has_facet",
           "declared_facets", "missing_facets", "unknown_operators"]
