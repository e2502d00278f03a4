"""What the rule generator knows about an operator, as facets of the operator registry.

- ``rules.generate.attrs``: the attribute values the generator enumerates, ``{attr: values}`` where values is a
  tuple, or a word the generator resolves from the argument types (``axis``: the axes that concat or split may use,
  ``groups``: 1 and depthwise when the weight allows it). An operator without it is not enumerated.
- ``rules.generate.arity``: how many tensor arguments a variadic operator gets (concat: 2).
- ``rules.generate.outputs``: how many outputs a multi-output operator produces (split: 2).
- ``rules.generate.inputs``: the input kinds (see `pool.py`) that the operator needs in the input pool.
- ``rules.generate.partition``: ``join`` (concat) or ``cut`` (split, whose sizes are a concatenation's parts).
- ``rules.generate.operands``: ``{argument: {axis: classes}}``: the pool dimension classes (see `pool.py`) an
  argument's axis must stem from: conv2d convolves activations (spatial class H) with kernels (classes K, I).
- ``rules.generate.same_shape``: element-wise operators combine equal shapes, or a lower-rank operand that
  broadcasts (a scalar, a channel vector), as TASO's do.
- ``rules.generate.carries``: ``(argument, input axis, output axis)`` triples along which a concatenation of the
  argument stays a concatenation of the output (so a later split may undo it): relu keeps every axis, matmul keeps
  the rows of its first and the columns of its second argument, conv2d the batch of its input and the output
  channels of its weight.
"""
from __future__ import annotations

from ...graph.ops import declare_facet, register_facet

ATTRS = "rules.generate.attrs"
ARITY = "rules.generate.arity"
OUTPUTS = "rules.generate.outputs"
INPUTS = "rules.generate.inputs"
CARRIES = "rules.generate.carries"
PARTITION = "rules.generate.partition"
OPERANDS = "rules.generate.operands"
SAME_SHAPE = "rules.generate.same_shape"

declare_facet(ATTRS, "attribute values the rule generator enumerates (no facet: not generated)", default=None)
declare_facet(ARITY, "tensor arguments the rule generator gives a variadic operator", default=None)
declare_facet(OUTPUTS, "outputs of a multi-output operator in generated graphs", default=1)
declare_facet(INPUTS, "input kinds the rule generator adds to its pool for the operator", default=())
declare_facet(PARTITION, "'join' for an operator that concatenates its arguments along its axis attribute, 'cut' for "
              "one that splits its argument at a concatenation's boundary (its sizes come from it)", default=None)
declare_facet(OPERANDS, "{argument: {axis: dimension classes allowed}}: what an argument's dimension must stem from "
              "(a dimension computed by an operator that carries none passes)", default=None)
declare_facet(SAME_SHAPE, "whether the arguments must have one shape (a lower-rank argument broadcasts)", default=False)
declare_facet(CARRIES, "(argument, input axis, output axis) along which a concatenation is carried", default=())

_ACT = ("none", "relu")
_SAME_RANK = ((0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3), (1, 0, 0), (1, 1, 1), (1, 2, 2), (1, 3, 3))
_UNARY_RANK = ((0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3))

# TASO's operators
register_facet("matmul", ATTRS, {"activation": ("none",)})
register_facet("matmul", INPUTS, ("mat",))
register_facet("matmul", CARRIES, ((0, -2, -2), (1, -1, -1), (0, -3, -3), (1, -3, -3)))
register_facet("conv2d", ATTRS, {"strides": ((1, 1), (2, 2)), "padding": ("SAME", "VALID"), "activation": _ACT,
                                 "groups": "groups"})
register_facet("conv2d", INPUTS, ("act4", "conv3x3", "conv1x1", "conv1x3", "conv3x1", "dwconv"))
register_facet("conv2d", OPERANDS, {0: {2: ("H",)}, 1: {2: ("K", "I")}})
register_facet("conv2d", CARRIES, ((0, 0, 0), (1, 0, 1)))
for _op in ("add", "mul"):
    register_facet(_op, ATTRS, {})
    register_facet(_op, INPUTS, ("mat", "scalar"))
    register_facet(_op, CARRIES, _SAME_RANK)
    register_facet(_op, SAME_SHAPE, True)
register_facet("relu", ATTRS, {})
register_facet("relu", CARRIES, _UNARY_RANK)
register_facet("concat", ATTRS, {"axis": "axis"})
register_facet("concat", ARITY, 2)
register_facet("concat", PARTITION, "join")
register_facet("split", PARTITION, "cut")
register_facet("split", ATTRS, {"axis": "axis"})
register_facet("split", OUTPUTS, 2)
register_facet("enlarge", ATTRS, {"kernel": ((3, 3),)})
register_facet("enlarge", INPUTS, ("conv1x1",))
register_facet("enlarge", OPERANDS, {0: {2: ("K", "I")}})
for _op in ("maxpool2d", "avgpool2d"):
    register_facet(_op, ATTRS, {"kernel": ((3, 3),), "strides": ((1, 1), (2, 2)), "padding": ("SAME",)})
    register_facet(_op, INPUTS, ("act4",))
    register_facet(_op, OPERANDS, {0: {2: ("H",)}})
    register_facet(_op, CARRIES, ((0, 0, 0), (0, 1, 1)))
register_facet("batchnorm", ATTRS, {})
register_facet("batchnorm", INPUTS, ("act4", "chan"))
register_facet("batchnorm", CARRIES, ((0, 0, 0),))
# what transformers need
register_facet("softmax", ATTRS, {"axis": (-1,)})
register_facet("softmax", INPUTS, ("batched",))
register_facet("softmax", CARRIES, ((0, -2, -2), (0, -3, -3)))
register_facet("gelu", ATTRS, {})
register_facet("gelu", CARRIES, _UNARY_RANK)
register_facet("layernorm", ATTRS, {"axes": ((-1,),)})
register_facet("layernorm", INPUTS, ("mat", "row"))
register_facet("layernorm", CARRIES, ((0, -2, -2), (0, -3, -3)))
register_facet("transpose", ATTRS, {"perm": "swap_last"})
register_facet("transpose", INPUTS, ("batched",))
