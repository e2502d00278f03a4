"""How each TensorGraph operator looks to TVM's FuseOps after LegalizeOps and AnnotateTIROpPattern.

A registry operator lowers to one or more Relax calls, each legalized to one `call_tir` whose PrimFunc gets an
`op_pattern` from TVM's TIR analysis (`relax/analysis/tir_op_pattern_kind.cc`), plus a `TupleGetItem` binding
(pattern INJECTIVE) per output of a tuple-valued call. `expand(node)` gives that chain of *sub-nodes*; the
fusion model works on sub-nodes. The table below is what AnnotateTIROpPattern reports in TVM 0.27 (checked by
`tests/test_cost_fusion.py` against TVM itself for every operator):

- reductions with an FMA body (conv2d, matmul) and reductions followed by an output block or with non-pure
  reduce indices (pooling, mean, softmax, layer_norm): OUT_EWISE_FUSABLE; a fused activation is a separate
  element-wise call;
- binary arithmetic: ELEMWISE when one operand already has the output shape (TVM then calls the whole block
  element-wise), otherwise BROADCAST; unary functions: ELEMWISE;
- batch_norm (inference), concat, split, transpose, reshape, pad: INJECTIVE; batch_norm and split return tuples;
- opaque nodes and unknown operators: OPAQUE (never fused).
"""
from __future__ import annotations

from typing import Sequence

from ..graph.types import TensorType

# TVM's OpPatternKind, which FuseOps uses to decide what fuses into what.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8

__all__ = ["ELEMWISE", "BROADCAST", "INJECTIVE", "COMM_REDUCE", "OUT_EWISE_FUSABLE", "TUPLE", "OPAQUE",
           "expand", "TVM_NAMES"]

_REDUCE_ANCHORS = frozenset({"conv2d", "matmul", "maxpool2d", "avgpool2d", "mean", "softmax", "layernorm"})
_BINARY = frozenset({"add", "sub", "mul", "div"})
_UNARY = frozenset({"relu", "sigmoid", "tanh", "gelu", "erf", "exp", "sqrt", "neg"})
_INJECTIVE = frozenset({"concat", "transpose", "reshape", "enlarge"})

# Registry operator -> base name of the PrimFunc(s) LegalizeOps emits (FuseTIR names fused functions after them).
TVM_NAMES: dict[str, tuple[str, ...]] = {
    "conv2d": ("conv2d",), "matmul": ("matmul",), "maxpool2d": ("max_pool2d",), "avgpool2d": ("avg_pool2d",),
    "mean": ("mean",), "softmax": ("softmax",), "layernorm": ("layer_norm",), "batchnorm": ("batch_norm",),
    "concat": ("concatenate",), "split": ("split",), "transpose": ("transpose",), "reshape": ("reshape",),
    "enlarge": ("pad",), "merge_gconv": ("reshape", "multiply", "reshape"),
    "add": ("add",), "sub": ("subtract",), "mul": ("multiply",), "div": ("divide",), "relu": ("relu",),
    "sigmoid": ("sigmoid",), "tanh": ("tanh",), "gelu": ("gelu",), "erf": ("erf",), "exp": ("exp",),
    "sqrt": ("sqrt",), "neg": ("negative",),
}
ACTIVATION_NAMES = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}


def expand(op: str, attrs: dict, in_types: Sequence[TensorType], out_types: Sequence[TensorType]) \
        -> tuple[tuple[int, ...], int]:
    """(patterns of the chained calls, number of TupleGetItem sub-nodes reading the last call's tuple)."""
    if op in _REDUCE_ANCHORS:
        act = attrs.get("activation", "none")
        return ((OUT_EWISE_FUSABLE,) if act in (None, "none") else (OUT_EWISE_FUSABLE, ELEMWISE)), 0
    if op in _BINARY:
        out = out_types[0].shape
        return ((ELEMWISE if any(t.shape == out for t in in_types) else BROADCAST),), 0
    if op in _UNARY:
        return (ELEMWISE,), 0
    if op in _INJECTIVE:
        return (INJECTIVE,), 0
    if op == "batchnorm":
        return (INJECTIVE,), 1
    if op == "split":
        return (INJECTIVE,), len(out_types)
    if op == "merge_gconv":
        return (INJECTIVE, BROADCAST, INJECTIVE), 0
    return (OPAQUE,), 0


def tvm_names(op: str, attrs: dict) -> tuple[str, ...]:
    """PrimFunc base names for one node, in binding order (for comparing groupings with FuseTIR's names)."""
    names = TVM_NAMES.get(op, (op,))
    act = attrs.get("activation", "none") if op in _REDUCE_ANCHORS else "none"
    return names + ((ACTIVATION_NAMES[act],) if act not in (None, "none") else ())
