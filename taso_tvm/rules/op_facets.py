"""What the rules package knows of an operator: its `rules.*` facets, declared and registered here (and only here).

* `rules.commutative`: the matcher may bind the two inputs in either order.
* `rules.axis_attr`: the attribute holding an axis; the matcher compares it with negative axes made non-negative.
* `rules.multi_output`: a pattern may name several outputs of one application.
* `rules.in_patterns`: the operator may appear in a rule pattern (sources such as graph inputs may not).
* `rules.domains`: values the verifier tries for an attribute a rule leaves free: a tuple of values, or a word for
  values derived from the input types (`instances.DOMAIN_WORDS`); an attribute not listed takes its default only.
* `rules.positive_inputs`: input positions that get positive random values in NumPy checks (a variance, a sqrt).
* `rules.generate.*`: what the rule generator (`rules/generate/`) enumerates, see the section at the end.

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
register_facet("rmsnorm", DOMAINS, {"axes": "trailing_axes", "epsilon": (1e-5, 1e-3)})
register_facet("mean", DOMAINS, {"axes": "axes", "keepdims": (False, True)})

register_facet("concat", AXIS_ATTR, "axis")
register_facet("concat", DOMAINS, {"axis": "axis"})
register_facet("split", AXIS_ATTR, "axis")
register_facet("split", MULTI_OUTPUT, True)
register_facet("skip_layernorm_sum", MULTI_OUTPUT, True)  # graph/ops/fused_norm.py: the norm and the sum
register_facet("skip_rmsnorm_sum", MULTI_OUTPUT, True)  # graph/ops/rms_norm.py: the norm and the sum
register_facet("gqa_heads_cache", MULTI_OUTPUT, True)  # graph/ops/grouped_attention.py: the output and the caches
register_facet("split", DOMAINS, {"axis": "axis", "sizes": "partition"})
register_facet("slice", AXIS_ATTR, "axis")  # graph/ops/slice.py
register_facet("slice", DOMAINS, {"axis": "axis", "begin": (0, 1, -1), "end": (1, 2, -1)})
register_facet("slice_step", AXIS_ATTR, "axis")
register_facet("slice_step", DOMAINS, {"axis": "axis", "begin": (0, 1), "end": (9223372036854775807,), "step": (2,)})
register_facet("pick", AXIS_ATTR, "axis")
register_facet("pick", DOMAINS, {"axis": "axis", "index": (0, 1, -1)})
register_facet("transpose", DOMAINS, {"perm": "perm"})
register_facet("reshape", DOMAINS, {"shape": "reshape"})

register_facet("enlarge", DOMAINS, {"kernel": ((3, 3), (5, 5), (3, 5))})
register_facet("merge_gconv", DOMAINS, {"count": (1, 2, 4), "groups": (1, 2, 4)})


# ---------------------------------------------------------------- the rule generator's facets
# What the rule generator (rules/generate/) knows about an operator:
#
# - ``rules.generate.attrs``: the attribute values the generator enumerates, ``{attr: values}`` where values is a
#   tuple, or a word the generator resolves from the argument types (``axis``: the axes that concat or split may use,
#   ``groups``: 1 and depthwise when the weight allows it). An operator without it is not enumerated.
# - ``rules.generate.arity``: how many tensor arguments a variadic operator gets (concat: 2).
# - ``rules.generate.outputs``: how many outputs a multi-output operator produces (split: 2).
# - ``rules.generate.inputs``: the input kinds (see `pool.py`) that the operator needs in the input pool.
# - ``rules.generate.partition``: ``join`` (concat) or ``cut`` (split, whose sizes are a concatenation's parts).
# - ``rules.generate.operands``: ``{argument: {axis: classes}}``: the pool dimension classes (see `pool.py`) an
#   argument's axis must stem from: conv2d convolves activations (spatial class H) with kernels (classes K, I).
#   Words of ``attrs`` for transformers: ``swap_last_or_heads`` (transpose: the last two axes, and on 4-D tensors
#   heads and sequence, perm (0, 2, 1, 3)); ``head_forms`` (reshape: split_heads, merge_heads, flatten).
# - ``rules.generate.same_shape``: element-wise operators combine equal shapes, or a lower-rank operand that
#   broadcasts (a scalar, a channel vector), as TASO's do.
# - ``rules.generate.carries``: ``(argument, input axis, output axis)`` triples along which a concatenation of the
#   argument stays a concatenation of the output (so a later split may undo it): relu keeps every axis, matmul keeps
#   the rows of its first and the columns of its second argument, conv2d the batch of its input and the output
#   channels of its weight.

GEN_ATTRS = "rules.generate.attrs"
GEN_ARITY = "rules.generate.arity"
GEN_OUTPUTS = "rules.generate.outputs"
GEN_INPUTS = "rules.generate.inputs"
GEN_CARRIES = "rules.generate.carries"
GEN_PARTITION = "rules.generate.partition"
GEN_OPERANDS = "rules.generate.operands"
GEN_SAME_SHAPE = "rules.generate.same_shape"

declare_facet(GEN_ATTRS, "attribute values the rule generator enumerates (no facet: not generated)", default=None)
declare_facet(GEN_ARITY, "tensor arguments the rule generator gives a variadic operator", default=None)
declare_facet(GEN_OUTPUTS, "outputs of a multi-output operator in generated graphs", default=1)
declare_facet(GEN_INPUTS, "input kinds the rule generator adds to its pool for the operator", default=())
declare_facet(GEN_PARTITION, "'join': concatenates its arguments along its axis; 'cut': splits its argument at a "
              "concatenation's boundary", default=None)
declare_facet(GEN_OPERANDS, "{argument: {axis: dimension classes}}: what an argument's dimension must stem from",
              default=None)
declare_facet(GEN_SAME_SHAPE, "the arguments have one shape (a lower-rank argument broadcasts)", default=False)
declare_facet(GEN_CARRIES, "(argument, input axis, output axis) along which a concatenation is carried", default=())

_GEN_ACT = ("none", "relu")
_SAME_RANK = ((0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3), (1, 0, 0), (1, 1, 1), (1, 2, 2), (1, 3, 3))
_UNARY_RANK = ((0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3))

# TASO's operators
register_facet("matmul", GEN_ATTRS, {"activation": ("none",)})
register_facet("matmul", GEN_INPUTS, ("mat",))
# matrices, not conv kernels; per-head tensors contract the head size (q @ k^T) or the sequence (scores @ v)
register_facet("matmul", GEN_OPERANDS, {0: {-1: ("S", "D", "L")}, 1: {-2: ("S", "D", "L")}})
register_facet("matmul", GEN_CARRIES, ((0, -2, -2), (1, -1, -1), (0, -3, -3), (1, -3, -3)))
register_facet("conv2d", GEN_ATTRS, {"strides": ((1, 1), (2, 2)), "padding": ("SAME", "VALID"), "activation": _GEN_ACT,
                                 "groups": "groups"})
register_facet("conv2d", GEN_INPUTS, ("act4", "conv3x3", "conv1x1", "conv1x3", "conv3x1", "dwconv"))
register_facet("conv2d", GEN_OPERANDS, {0: {2: ("H",)}, 1: {2: ("K", "I")}})
register_facet("conv2d", GEN_CARRIES, ((0, 0, 0), (1, 0, 1)))
for _op in ("add", "mul"):
    register_facet(_op, GEN_ATTRS, {})
    register_facet(_op, GEN_INPUTS, ("mat",))
    register_facet(_op, GEN_CARRIES, _SAME_RANK)
    register_facet(_op, GEN_SAME_SHAPE, True)
register_facet("relu", GEN_ATTRS, {})
register_facet("relu", GEN_CARRIES, _UNARY_RANK)
register_facet("concat", GEN_ATTRS, {"axis": domains("concat")["axis"]})
register_facet("concat", GEN_ARITY, 2)
register_facet("concat", GEN_PARTITION, "join")
register_facet("split", GEN_PARTITION, "cut")
register_facet("split", GEN_ATTRS, {"axis": domains("split")["axis"]})
register_facet("split", GEN_OUTPUTS, 2)
register_facet("enlarge", GEN_ATTRS, {"kernel": ((3, 3),)})
register_facet("enlarge", GEN_INPUTS, ("conv1x1",))
register_facet("enlarge", GEN_OPERANDS, {0: {2: ("K", "I")}})
for _op in ("maxpool2d", "avgpool2d"):
    register_facet(_op, GEN_ATTRS, {"kernel": ((3, 3),), "strides": ((1, 1), (2, 2)), "padding": ("SAME",)})
    register_facet(_op, GEN_INPUTS, ("act4",))
    register_facet(_op, GEN_OPERANDS, {0: {2: ("H",)}})
    register_facet(_op, GEN_CARRIES, ((0, 0, 0), (0, 1, 1)))
register_facet("batchnorm", GEN_ATTRS, {})
register_facet("batchnorm", GEN_INPUTS, ("act4", "chan"))
register_facet("batchnorm", GEN_CARRIES, ((0, 0, 0),))
# what transformers need
register_facet("softmax", GEN_ATTRS, {"axis": (-1,)})
register_facet("softmax", GEN_INPUTS, ("batched",))
register_facet("softmax", GEN_CARRIES, ((0, -2, -2), (0, -3, -3)))
register_facet("gelu", GEN_ATTRS, {})
register_facet("gelu", GEN_CARRIES, _UNARY_RANK)
register_facet("layernorm", GEN_ARITY, 3)  # x, gamma, beta (the optional epsilon input is a lifted form's)
register_facet("layernorm", GEN_ATTRS, {"axes": ((-1,),)})
register_facet("layernorm", GEN_INPUTS, ("mat", "row"))
register_facet("layernorm", GEN_CARRIES, ((0, -2, -2), (0, -3, -3)))
# the runtime's fused operators (graph/ops/fused.py): the generator finds rules into them like into any operator
for _op in ("bias_gelu", "fast_gelu"):
    register_facet(_op, GEN_ATTRS, {})
    register_facet(_op, GEN_INPUTS, ("mat", "row"))
register_facet("gelu_tanh", GEN_ATTRS, {})
register_facet("gelu_tanh", GEN_CARRIES, _UNARY_RANK)
register_facet("fused_matmul", GEN_ATTRS, {"trans_a": (0, 1), "trans_b": (0, 1), "alpha": (1.0,)})
register_facet("fused_matmul", GEN_INPUTS, ("mat",))
register_facet("fused_matmul", GEN_OPERANDS, {0: {-1: ("S", "D", "L")}, 1: {-2: ("S", "D", "L")}})
register_facet("transpose", GEN_ATTRS, {"perm": "swap_last_or_heads"})
register_facet("transpose", GEN_INPUTS, ("batched", "heads"))
# attention heads: a [B, L, E] activation split into heads, per-head tensors merged back, or flattened (the forms of
# `generate.graphs.ShapeForm`); only what stems from an embedding or a head size is reshaped (not images, matrices)
register_facet("reshape", GEN_ATTRS, {"shape": "head_forms"})
register_facet("reshape", GEN_INPUTS, ("seq", "heads"))
register_facet("reshape", GEN_OPERANDS, {0: {-1: ("E", "D")}})
