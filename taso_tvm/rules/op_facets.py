"""What the rules package knows of an operator: its `rules.*` facets, declared and registered here (and only here).

* `rules.commutative`: the matcher may bind the two inputs in either order.
* `rules.axis_attr`: the attribute holding an axis; the matcher compares it with negative axes made non-negative.
* `rules.multi_output`: a pattern may name several outputs of one application.
* `rules.in_patterns`: the operator may appear in a rule pattern (sources such as graph inputs may not).
* `rules.domains`: values the verifier tries for an attribute a rule leaves free: a tuple of values, or a word for
  values derived from the input types (`instances.DOMAIN_WORDS`); an attribute not listed takes its default only.
* `rules.positive_inputs`: input positions that get positive random values in NumPy checks (a variance, a sqrt).

Every facet has a natural default (not commutative, no axis, one output, allowed in patterns, no domains, no positive
inputs); an operator registers only what differs.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Optional

from ..graph.ops import declare_facet, facet, register_facet
from ..graph.ops.elementwise import ACTIVATIONS

COMMUTATIVE = "rules.commutative"
AXIS_ATTR = "rules.axis_attr"
MULTI_OUTPUT = "rules.multi_output"
IN_PATTERNS = "rules.in_patterns"
DOMAINS = "rules.domains"
POSITIVE_INPUTS = "rules.positive_inputs"

declare_facet(COMMUTATIVE, "the matcher may swap its two inputs", default=False)
declare_facet(AXIS_ATTR, "the attribute holding an axis (negative axes normalised when matching)", default=None)
declare_facet(MULTI_OUTPUT, "a pattern may name several of its outputs", default=False)
declare_facet(IN_PATTERNS, "it may appear in a rule pattern", default=True)
declare_facet(DOMAINS, "the verifier's values for attributes a rule leaves free", default=MappingProxyType({}))
declare_facet(POSITIVE_INPUTS, "input positions given positive values in NumPy checks", default=())


def commutative(op: str) -> bool:
    return bool(facet(op, COMMUTATIVE))


def axis_attr(op: str) -> Optional[str]:
    return facet(op, AXIS_ATTR)


def multi_output(op: str) -> bool:
    return bool(facet(op, MULTI_OUTPUT))


def in_patterns(op: str) -> bool:
    return bool(facet(op, IN_PATTERNS))


def domains(op: str) -> Mapping[str, Any]:
    return facet(op, DOMAINS)


def positive_inputs(op: str) -> tuple:
    return facet(op, POSITIVE_INPUTS)


# ---------------------------------------------------------------- registrations, by operator
ACTIVATION_DOMAIN = tuple(ACTIVATIONS)  # every fused activation
_STRIDES = ((1, 1), (2, 2), (1, 2))
_POOL_DOMAINS = {"kernel": ((1, 1), (2, 2), (3, 3), (2, 3)), "strides": _STRIDES,
                 "padding": ((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)), "ceil_mode": (False, True),
                 "count_include_pad": (False, True)}

for _op in ("input", "weight", "opaque"):  # sources: what a graph starts from, never rewritten
    register_facet(_op, IN_PATTERNS, False)

register_facet("add", COMMUTATIVE, True)
register_facet("mul", COMMUTATIVE, True)
register_facet("sqrt", POSITIVE_INPUTS, (0,))

register_facet("matmul", DOMAINS, {"activation": ACTIVATION_DOMAIN})
register_facet("conv2d", DOMAINS, {
    "strides": _STRIDES, "padding": ((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0), (1, 0, 0, 1)),
    "dilation": ((1, 1), (2, 2), (2, 1)), "groups": "groups", "activation": ACTIVATION_DOMAIN})
register_facet("maxpool2d", DOMAINS, _POOL_DOMAINS)
register_facet("avgpool2d", DOMAINS, _POOL_DOMAINS)

register_facet("batchnorm", AXIS_ATTR, "axis")
register_facet("batchnorm", DOMAINS, {"axis": "axis", "epsilon": (1e-5, 1e-3), "momentum": (0.1, 0.9)})
register_facet("batchnorm", POSITIVE_INPUTS, (4,))  # the variance
register_facet("softmax", AXIS_ATTR, "axis")
register_facet("softmax", DOMAINS, {"axis": "axis"})
register_facet("layernorm", DOMAINS, {"axes": "trailing_axes", "epsilon": (1e-5, 1e-3)})
register_facet("mean", DOMAINS, {"axes": "axes", "keepdims": (False, True)})

register_facet("concat", AXIS_ATTR, "axis")
register_facet("concat", DOMAINS, {"axis": "axis"})
register_facet("split", AXIS_ATTR, "axis")
register_facet("split", MULTI_OUTPUT, True)
register_facet("split", DOMAINS, {"axis": "axis", "sizes": "partition"})
register_facet("transpose", DOMAINS, {"perm": "perm"})
register_facet("reshape", DOMAINS, {"shape": "reshape"})

register_facet("enlarge", DOMAINS, {"kernel": ((3, 3), (5, 5), (3, 5))})
register_facet("merge_gconv", DOMAINS, {"count": (1, 2, 4), "groups": (1, 2, 4)})
