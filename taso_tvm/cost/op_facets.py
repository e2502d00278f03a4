"""What the cost package knows of an operator: its `cost.*` facets, declared and registered here (and only here).

* `cost.fusion`: `(attrs, in_types, out_types) -> (patterns, tuple_reads)`: how the node looks to TVM's FuseOps
  after LegalizeOps and AnnotateTIROpPattern: the pattern kinds of the chain of `call_tir`s it legalizes to, and
  how many `TupleGetItem` sub-nodes read the last call's tuple (see `patterns.expand`). The kinds are what TVM 0.27
  reports (`relax/analysis/tir_op_pattern_kind.cc`; `tests/test_cost_fusion.py` checks every operator against it).
* `cost.tvm_names`: base names of the PrimFunc(s) LegalizeOps emits for it, in binding order (FuseTIR names fused
  functions after them).
* `cost.view`: TVM turns a kernel of only such operators into a view of its input (RewriteDataflowReshape), no
  kernel launch (default: no).
* `cost.flops`: `(attrs, in_shapes, out_shapes) -> float`: floating-point operations of one node (multiply-add = 2;
  transcendentals cost a polynomial evaluation; data movement costs none), for the roofline backend.

Every operator that computes must register all three; graph inputs and weights need none, opaque nodes only their
fusion kind (never fused).
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..graph.ops import OpDef, declare_facet, facet, register_facet
from ..graph.types import TensorType
from .flops import prod
from .patterns import BROADCAST, ELEMWISE, INJECTIVE, OPAQUE, OUT_EWISE_FUSABLE

FUSION, TVM_NAMES, VIEW, FLOPS = "cost.fusion", "cost.tvm_names", "cost.view", "cost.flops"

Chain = tuple[tuple[int, ...], int]  # (pattern kinds of the chained calls, TupleGetItem sub-nodes)
FusionFn = Callable[[dict, Sequence[TensorType], Sequence[TensorType]], Chain]
FlopsFn = Callable[[dict, list, list], float]

_NOT_COMPUTED = ("input", "weight", "opaque")


def _computes(op: OpDef) -> bool:
    return op.name not in _NOT_COMPUTED


declare_facet(FUSION, "its call_tir pattern kinds under TVM's FuseOps",
              required=lambda op: op.name not in ("input", "weight"))
declare_facet(TVM_NAMES, "the PrimFunc names LegalizeOps gives it", required=_computes)
declare_facet(VIEW, "TVM makes a view of it, not a kernel", default=False)
declare_facet(FLOPS, "its floating-point operations", required=_computes)


def activation(attrs: dict) -> str:
    """The node's fused activation ('none' when it has none)."""
    act = attrs.get("activation", "none")
    return "none" if act is None else act


def _fusion(chain: Chain) -> FusionFn:
    return lambda attrs, in_types, out_types: chain


def _reduction(attrs: dict, in_types: Sequence[TensorType], out_types: Sequence[TensorType]) -> Chain:
    """FMA reductions and reductions with an output block: OUT_EWISE_FUSABLE; a fused activation is a separate
    element-wise call."""
    return ((OUT_EWISE_FUSABLE,) if activation(attrs) == "none" else (OUT_EWISE_FUSABLE, ELEMWISE)), 0


def _binary(attrs: dict, in_types: Sequence[TensorType], out_types: Sequence[TensorType]) -> Chain:
    """ELEMWISE when one operand already has the output shape (TVM then calls the whole block element-wise),
    otherwise BROADCAST."""
    out = out_types[0].shape
    return ((ELEMWISE if any(t.shape == out for t in in_types) else BROADCAST),), 0


def _split(attrs: dict, in_types: Sequence[TensorType], out_types: Sequence[TensorType]) -> Chain:
    return (INJECTIVE,), len(out_types)


def _per_element(k: int) -> FlopsFn:
    return lambda attrs, in_shapes, out_shapes: float(prod(out_shapes[0]) * k)


def _no_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    return 0.0


def _activation_flops(attrs: dict, out_shape: tuple) -> float:
    act = activation(attrs)
    return 0.0 if act == "none" else facet(act, FLOPS)({}, [out_shape], [out_shape])


def _conv2d_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    _, cg, kh, kw = in_shapes[1]
    out = prod(out_shapes[0])
    return 2.0 * out * cg * kh * kw + _activation_flops(attrs, out_shapes[0])


def _matmul_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    out = prod(out_shapes[0])
    return 2.0 * out * in_shapes[0][-1] + _activation_flops(attrs, out_shapes[0])


def _pool_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    kh, kw = attrs["kernel"]
    return float(prod(out_shapes[0]) * kh * kw)


def _mean_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    return float(prod(in_shapes[0]))


# ------------------------------------------------------------------ reductions
for _op, _names, _flops in (("conv2d", ("conv2d",), _conv2d_flops), ("matmul", ("matmul",), _matmul_flops),
                            ("maxpool2d", ("max_pool2d",), _pool_flops), ("avgpool2d", ("avg_pool2d",), _pool_flops),
                            ("mean", ("mean",), _mean_flops), ("softmax", ("softmax",), _per_element(12)),
                            ("layernorm", ("layer_norm",), _per_element(8)),
                            ("rmsnorm", ("rms_norm",), _per_element(5))):
    register_facet(_op, FUSION, _reduction)
    register_facet(_op, TVM_NAMES, _names)
    register_facet(_op, FLOPS, _flops)

# ------------------------------------------------------------------ element-wise: (operator, PrimFunc, FLOPs each)
for _op, _name, _k in (("add", "add", 1), ("sub", "subtract", 1), ("mul", "multiply", 1), ("div", "divide", 1),
                       ("where", "where", 1)):
    register_facet(_op, FUSION, _binary)
    register_facet(_op, TVM_NAMES, (_name,))
    register_facet(_op, FLOPS, _per_element(_k))

for _op, _name, _k in (("relu", "relu", 1), ("sigmoid", "sigmoid", 10), ("tanh", "tanh", 10), ("gelu", "gelu", 14),
                       ("gelu_tanh", "gelu_tanh", 16), ("isnan", "isnan", 1),
                       ("erf", "erf", 10), ("exp", "exp", 8), ("sqrt", "sqrt", 4), ("neg", "negative", 1),
                       ("cos", "cos", 10), ("sin", "sin", 10)):
    register_facet(_op, FUSION, _fusion(((ELEMWISE,), 0)))
    register_facet(_op, TVM_NAMES, (_name,))
    register_facet(_op, FLOPS, _per_element(_k))

register_facet("pow", FUSION, _fusion(((ELEMWISE,), 0)))  # by a constant: the exponent is an attribute
register_facet("pow", TVM_NAMES, ("power",))
register_facet("pow", FLOPS, _per_element(4))

# ------------------------------------------------------------------ data movement
for _op, _name in (("concat", "concatenate"), ("transpose", "transpose"), ("reshape", "reshape"),
                   ("enlarge", "pad")):
    register_facet(_op, FUSION, _fusion(((INJECTIVE,), 0)))
    register_facet(_op, TVM_NAMES, (_name,))
    register_facet(_op, FLOPS, _no_flops)
register_facet("reshape", VIEW, True)
register_facet("broadcast_to", FUSION, _fusion(((BROADCAST,), 0)))  # graph/ops/tensor.py: ONNX's Expand
register_facet("broadcast_to", TVM_NAMES, ("broadcast_to",))
register_facet("broadcast_to", FLOPS, _no_flops)

register_facet("take", FUSION, _fusion(((INJECTIVE,), 0)))  # graph/ops/gather.py: an embedding lookup
register_facet("take", TVM_NAMES, ("take",))
register_facet("take", FLOPS, _no_flops)

for _op, _name in (("slice", "strided_slice"), ("slice_step", "strided_slice"), ("pick", "take")):  # graph/ops/slice.py: rows of one axis
    register_facet(_op, FUSION, _fusion(((INJECTIVE,), 0)))
    register_facet(_op, TVM_NAMES, (_name,))
    register_facet(_op, FLOPS, _no_flops)

register_facet("split", FUSION, _split)  # a tuple, read by one TupleGetItem per output
register_facet("split", TVM_NAMES, ("split",))
register_facet("split", FLOPS, _no_flops)

register_facet("batchnorm", FUSION, _fusion(((INJECTIVE,), 1)))  # inference batch_norm returns a tuple
register_facet("batchnorm", TVM_NAMES, ("batch_norm",))
register_facet("batchnorm", FLOPS, _per_element(2))

register_facet("merge_gconv", FUSION, _fusion(((INJECTIVE, BROADCAST, INJECTIVE), 0)))  # reshape * mask, reshape
register_facet("merge_gconv", TVM_NAMES, ("reshape", "multiply", "reshape"))
register_facet("merge_gconv", FLOPS, _no_flops)

register_facet("opaque", FUSION, _fusion(((OPAQUE,), 0)))  # never fused


# ------------------------------------------------------------------ the runtime's fused operators
# One kernel each, never fused with a neighbour: the runtime runs the fused node as one call (ONNX Runtime does not
# fuse an element-wise op into MultiHeadAttention). For TVM, which builds their decomposition, this is the
# approximation the kernel's measured cost corrects.
def _mha_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    (b, s, e), (_, l, _) = in_shapes[0], in_shapes[1]
    ev = in_shapes[2][2]
    return 2.0 * b * s * l * (e + ev) + 14.0 * b * attrs["num_heads"] * s * l


def _attention_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    (b, s, h), (_, e3) = in_shapes[0], in_shapes[1]
    e = e3 // 3
    proj = 2.0 * b * s * h * e3
    return proj + _mha_flops(attrs, [(b, s, e), (b, s, e), (b, s, e)], out_shapes)


def _heads_flops(b: int, h: int, s: int, t: int, d: int, dv: int) -> float:
    """h heads of s queries against t keys (head size d, value size dv): the two products and the softmax."""
    return 2.0 * b * h * s * t * (d + dv) + 14.0 * b * h * s * t


def _gqa_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    b, h, s, d = in_shapes[0]
    return _heads_flops(b, h, s, in_shapes[1][2], d, in_shapes[2][3])


def _gqa_heads_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    (b, s, w), h = in_shapes[0], attrs["num_heads"]
    t = in_shapes[1][1] + (in_shapes[3][2] if len(in_shapes) > 6 else 0)  # gqa_heads_cache: + the past
    return _heads_flops(b, h, s, t, w // h, out_shapes[0][2] // h)


def _fused_matmul_flops(attrs: dict, in_shapes: list, out_shapes: list) -> float:
    k = in_shapes[0][-2] if attrs["trans_a"] else in_shapes[0][-1]
    return 2.0 * prod(out_shapes[0]) * k + (0.0 if float(attrs["alpha"]) == 1.0 else prod(out_shapes[0]))


for _op, _flops in (("mha", _mha_flops), ("attention", _attention_flops), ("gqa", _gqa_flops), ("gqa_heads", _gqa_heads_flops),
                    ("gqa_heads_cache", _gqa_heads_flops), ("skip_layernorm", _per_element(10)),
                    ("bias_gelu", _per_element(15)), ("fast_gelu", _per_element(17)),
                    ("quick_gelu", _per_element(12)), ("fused_matmul", _fused_matmul_flops),
                    ("erf_gelu", _per_element(15)), ("tanh_gelu", _per_element(17))):
    register_facet(_op, FUSION, _fusion(((OPAQUE,), 0)))
    register_facet(_op, TVM_NAMES, (_op,))
    register_facet(_op, FLOPS, _flops)

# graph/ops/fused_norm.py: layer norms with extra outputs or gathers, one kernel each
for _op, _flops in (("skip_layernorm_sum", _per_element(10)), ("embed_layernorm", _per_element(10)),
                    ("skip_rmsnorm", _per_element(7)), ("skip_rmsnorm_sum", _per_element(7)),  # graph/ops/rms_norm.py
                    ("rotary", _per_element(3)), ("rotary_heads", _per_element(3))):  # graph/ops/rotary.py
    register_facet(_op, FUSION, _fusion(((OPAQUE,), 0)))
    register_facet(_op, TVM_NAMES, (_op,))
    register_facet(_op, FLOPS, _flops)

del _op, _name, _names, _k, _flops

__all__ = ["FUSION", "TVM_NAMES", "VIEW", "FLOPS", "activation"]
