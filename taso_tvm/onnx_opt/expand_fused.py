"""ONNX Runtime's fused nodes (``com.microsoft``) written back as their decomposition in default-domain ONNX.

A model already run through ONNX Runtime's transformer optimizer holds Attention, SkipLayerNormalization, BiasGelu,
... nodes that TVM's ONNX frontend does not import, so they would stay out of every region. Each such node whose
operator is in the registry is expanded here, before preparation, into the standard nodes of the registry
operator's decomposition (the forms exporters write, which the library's fusion rules reach); the search then
re-forms the fused operator where it pays, together with its neighbours. The user's model is never changed: the
expansion is a working copy, checked against the original like any rewrite.

A node is expanded only where its expansion is exact: optional inputs and attributes outside what is written here
(a past state, a rotary embedding, a mask_index of another form, the mean or inv_std_var outputs read, the
mask_index of an EmbedLayerNormalization without a mask read) leave it as it is. Expanded nodes are named ``taso_expand/<the node's name or type>/<k>``.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .onnx_graph import default_opset

log = logging.getLogger(__name__)

MS = "com.microsoft"
EXPAND_PREFIX = "taso_expand/"
LAYERNORM_OPSET = 17  # LayerNormalization; below it the norm is written in pieces
SPLIT_INPUT_OPSET = 13  # Split's sizes an input from here on
MASK_FILTER_VALUE = -10000.0  # Attention's default mask_filter_value


class _Writer:
    """Appends the nodes of one expansion, with fresh names, and its constants as initializers."""

    def __init__(self, graph: onnx.GraphProto, node: onnx.NodeProto, opset: int, taken: set):
        self.graph, self.opset, self.taken = graph, opset, taken
        self.base = f"{EXPAND_PREFIX}{node.name or node.op_type}/"
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.k = 0

    def _fresh(self) -> str:
        while True:
            name = f"{self.base}{self.k}"
            self.k += 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def op(self, op_type: str, *inputs: str, out: Optional[str] = None, n_out: int = 1, **attrs) -> list[str]:
        outs = [out] if out is not None else [self._fresh() for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self._fresh(), **attrs))
        return outs

    def one(self, op_type: str, *inputs: str, out: Optional[str] = None, **attrs) -> str:
        return self.op(op_type, *inputs, out=out, **attrs)[0]

    def const(self, value, dtype=np.float32) -> str:
        name = self._fresh()
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def layernorm(self, s: str, gamma: str, beta: str, eps: float, out: str) -> str:
        if self.opset >= LAYERNORM_OPSET:
            return self.one("LayerNormalization", s, gamma, *([beta] if beta else []), out=out, axis=-1, epsilon=eps)
        mean = self.one("ReduceMean", s, axes=[-1])
        d = self.one("Sub", s, mean)
        var = self.one("ReduceMean", self.one("Mul", d, d), axes=[-1])
        n = self.one("Div", d, self.one("Sqrt", self.one("Add", var, self.const(eps))))
        if not beta:
            return self.one("Mul", n, gamma, out=out)
        return self.one("Add", self.one("Mul", n, gamma), beta, out=out)

    def rmsnorm(self, s: str, gamma: str, eps: float, out: str) -> str:
        """s / sqrt(mean(s * s) + eps) * gamma on the last axis (the pieces the rules lift to rmsnorm)."""
        sq = self.one("Mul", s, s)
        ms = self.one("ReduceMean", sq, axes=[-1]) if self.opset < 18 else \
            self.one("ReduceMean", sq, self.const([-1], np.int64))  # axes an input from opset 18
        return self.one("Mul", self.one("Div", s, self.one("Sqrt", self.one("Add", ms, self.const(eps)))), gamma,
                        out=out)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _used(node: onnx.NodeProto, i: int) -> bool:
    return len(node.output) > i and bool(node.output[i])


def _erf_gelu(w: _Writer, v: str, out: str) -> None:
    """v (erf(v / sqrt 2) + 1) / 2, torch's form (the division written as its product)."""
    e = w.one("Erf", w.one("Mul", v, w.const(1 / np.sqrt(2.0))))
    w.one("Mul", w.one("Mul", v, w.one("Add", e, w.const(1.0))), w.const(0.5), out=out)


def _gelu(w: _Writer, n: onnx.NodeProto) -> bool:
    _erf_gelu(w, n.input[0], n.output[0])
    return True


def _bias_gelu(w: _Writer, n: onnx.NodeProto) -> bool:
    _erf_gelu(w, w.one("Add", n.input[0], n.input[1]), n.output[0])
    return True


def _fast_gelu(w: _Writer, n: onnx.NodeProto) -> bool:
    """v (tanh((v + v v v c) k) + 1) / 2, v = x (+ bias): torch's tanh form."""
    v = w.one("Add", n.input[0], n.input[1]) if _input(n, 1) else n.input[0]
    cube = w.one("Mul", w.one("Mul", v, w.one("Mul", v, v)), w.const(0.044715))
    t = w.one("Tanh", w.one("Mul", w.one("Add", v, cube), w.const(np.sqrt(2 / np.pi))))
    w.one("Mul", w.one("Mul", v, w.one("Add", t, w.const(1.0))), w.const(0.5), out=n.output[0])
    return True


def _quick_gelu(w: _Writer, n: onnx.NodeProto) -> bool:
    x = n.input[0]
    w.one("Mul", x, w.one("Sigmoid", w.one("Mul", x, w.const(float(_attr(n, "alpha", 1.702))))), out=n.output[0])
    return True


def _fused_matmul(w: _Writer, n: onnx.NodeProto, rank: Callable[[str], Optional[int]]) -> bool:
    if _attr(n, "transBatchA", 0) or _attr(n, "transBatchB", 0):
        return False
    a, b = n.input[0], n.input[1]
    for flag, name in (("transA", "a"), ("transB", "b")):
        if _attr(n, flag, 0):
            r = rank(a if name == "a" else b)
            if r is None or r < 2:
                return False
            t = w.one("Transpose", a if name == "a" else b, perm=list(range(r - 2)) + [r - 1, r - 2])
            a, b = (t, b) if name == "a" else (a, t)
    alpha = float(_attr(n, "alpha", 1.0))
    if alpha == 1.0:
        w.one("MatMul", a, b, out=n.output[0])
    else:
        w.one("Mul", w.one("MatMul", a, b), w.const(alpha), out=n.output[0])
    return True


def _residual_sum(w: _Writer, n: onnx.NodeProto, bias: int) -> str:
    """(input + bias) + skip of a Skip(Simplified)LayerNormalization (the registry's order, and how exporters write a
    residual block), written to its sum output (3) where that is named."""
    s = n.input[0]
    if _input(n, bias):
        s = w.one("Add", s, n.input[bias])
    s = w.one("Add", s, n.input[1])
    return w.one("Identity", s, out=n.output[3]) if _used(n, 3) else s


def _skip_layernorm(w: _Writer, n: onnx.NodeProto) -> bool:
    if _used(n, 1) or _used(n, 2):  # mean and inv_std_var have no place in the decomposition's outputs
        return False
    w.layernorm(_residual_sum(w, n, 4), n.input[2], _input(n, 3), float(_attr(n, "epsilon", 1e-12)), n.output[0])
    return True


def _skip_rmsnorm(w: _Writer, n: onnx.NodeProto, read: set) -> bool:
    if any(_used(n, i) and n.output[i] in read for i in (1, 2)):  # mean and inv_std_var: not in the decomposition
        return False
    w.rmsnorm(_residual_sum(w, n, 3), n.input[2], float(_attr(n, "epsilon", 1e-5)), n.output[0])
    return True


def _rmsnorm(w: _Writer, n: onnx.NodeProto, read: set) -> bool:
    axis = int(_attr(n, "axis", -1))
    if (_used(n, 1) and n.output[1] in read) or axis != -1 or int(_attr(n, "stash_type", 1)) != 1:
        return False  # the last axis, in float, only
    w.rmsnorm(n.input[0], n.input[1], float(_attr(n, "epsilon", 1e-5)), n.output[0])
    return True


def _heads(w: _Writer, x: str, heads: int, head_size: int, perm: list) -> str:
    return w.one("Transpose", w.one("Reshape", x, w.const([0, 0, heads, head_size], np.int64)), perm=perm)


def _sdpa(w: _Writer, q: str, k: str, v: str, heads: int, width: int, v_width: int, scale: float, masks: list,
          out: str) -> None:
    """softmax(q kᵀ · scale + masks) v with heads split off and merged back: the registry's mha."""
    d = width // heads
    qh, kt = _heads(w, q, heads, d, [0, 2, 1, 3]), _heads(w, k, heads, d, [0, 2, 3, 1])
    vh = _heads(w, v, heads, v_width // heads, [0, 2, 1, 3])
    s = w.one("Mul", w.one("MatMul", qh, kt), w.const(scale))
    for m in masks:
        s = w.one("Add", s, m)
    o = w.one("MatMul", w.one("Softmax", s, axis=-1), vh)
    w.one("Reshape", w.one("Transpose", o, perm=[0, 2, 1, 3]), w.const([0, 0, v_width], np.int64), out=out)


def _padding_mask(w: _Writer, mask: str) -> str:
    """A [batch, key] raw mask as the additive [batch, 1, 1, key] one ONNX Runtime makes of it (0 where the mask is
    positive, mask_filter_value elsewhere)."""
    keep = w.one("Greater", mask, w.const(0, np.int32))
    add = w.one("Where", keep, w.const(0.0), w.const(MASK_FILTER_VALUE))
    axes = w.const([1, 2], np.int64)
    return w.one("Unsqueeze", add, axes) if w.opset >= SPLIT_INPUT_OPSET else w.one("Unsqueeze", add, axes=[1, 2])


def _end_mask(w: _Writer, x: str, ends: str) -> str:
    """A [batch] mask_index (each row's end: keys at or after it are masked) as the additive [batch, 1, 1, key] mask
    ONNX Runtime makes of it (x: the attention's [batch, sequence, hidden] input, no past)."""
    length = w.one("Cast", w.one("Gather", w.one("Shape", x), w.const(1, np.int64)), to=onnx.TensorProto.INT32)
    keys = w.one("Range", w.const(0, np.int32), length, w.const(1, np.int32))
    before = w.one("Less", keys, w.one("Unsqueeze", ends, w.const([1], np.int64)) if w.opset >= SPLIT_INPUT_OPSET
                   else w.one("Unsqueeze", ends, axes=[1]))
    add = w.one("Where", before, w.const(0.0), w.const(MASK_FILTER_VALUE))
    axes = w.const([1, 2], np.int64)
    return w.one("Unsqueeze", add, axes) if w.opset >= SPLIT_INPUT_OPSET else w.one("Unsqueeze", add, axes=[1, 2])


def _attention(w: _Writer, n: onnx.NodeProto, shape: Callable[[str], Optional[tuple]]) -> bool:
    heads = int(_attr(n, "num_heads", 0))
    wshape, mshape = shape(n.input[1]), shape(_input(n, 3)) if _input(n, 3) else None
    xshape = shape(n.input[0])
    ends = mshape is not None and len(mshape) == 1 and xshape is not None and mshape[0] is not None \
        and mshape[0] == xshape[0]  # [batch]: end positions ([2 batch], ends and starts, is not written here)
    if (heads < 1 or wshape is None or len(wshape) != 2 or wshape[1] % 3 or _attr(n, "unidirectional", 0)
            or _attr(n, "qkv_hidden_sizes") or _attr(n, "do_rotary", 0) or _attr(n, "past_present_share_buffer", 0)
            or any(_input(n, i) for i in (4, 6)) or any(_used(n, i) for i in range(1, len(n.output)))
            or (_input(n, 3) and (mshape is None or len(mshape) != 2) and not ends)
            or float(_attr(n, "mask_filter_value", MASK_FILTER_VALUE)) != MASK_FILTER_VALUE):
        return False
    width = wshape[1] // 3
    if width % heads:
        return False
    scale = float(_attr(n, "scale", 0.0)) or 1 / np.sqrt(width // heads)
    y = w.one("MatMul", n.input[0], n.input[1])
    if _input(n, 2):
        y = w.one("Add", y, n.input[2])
    if w.opset >= SPLIT_INPUT_OPSET:
        q, k, v = w.op("Split", y, w.const([width] * 3, np.int64), n_out=3, axis=-1)
    else:
        q, k, v = w.op("Split", y, n_out=3, axis=-1, split=[width] * 3)
    mask = (_end_mask(w, n.input[0], n.input[3]) if ends else _padding_mask(w, n.input[3])) if _input(n, 3) else None
    masks = ([mask] if mask else []) + ([n.input[5]] if _input(n, 5) else [])
    _sdpa(w, q, k, v, heads, width, width, scale, masks, n.output[0])
    return True


def _multi_head_attention(w: _Writer, n: onnx.NodeProto, shape: Callable[[str], Optional[tuple]]) -> bool:
    heads = int(_attr(n, "num_heads", 0))
    shapes = [shape(_input(n, i)) for i in range(3)]
    if (heads < 1 or any(s is None or len(s) != 3 for s in shapes) or any(_input(n, i) for i in (3, 4, 6, 7))
            or any(_used(n, i) for i in range(1, len(n.output))) or _attr(n, "unidirectional", 0)
            or not isinstance(shapes[0][2], int) or not isinstance(shapes[2][2], int)
            or shapes[0][2] % heads or shapes[2][2] % heads):
        return False
    scale = float(_attr(n, "scale", 0.0)) or 1 / np.sqrt(shapes[0][2] // heads)
    masks = [n.input[5]] if _input(n, 5) else []
    _sdpa(w, n.input[0], n.input[1], n.input[2], heads, shapes[0][2], shapes[2][2], scale, masks, n.output[0])
    return True


def _embed_layernorm(w: _Writer, n: onnx.NodeProto, read: set) -> bool:
    """layer norm of word[ids] + position[position_ids or 0..S-1] (+ segment[segment_ids]): the registry's
    embed_layernorm, its lookups as Gathers (ONNX Runtime's int32 ids read as they are)."""
    ids, seg_ids, word, pos, seg, gamma, beta, mask = (_input(n, i) for i in range(8))
    if len(n.output) > 1 and n.output[1] in read:
        if not mask:
            return False  # a mask_index of zeros: not written here
        ones = w.one("Cast", w.one("Equal", mask, w.const(1, np.int32)), to=onnx.TensorProto.INT32)
        axes = w.const([1], np.int64)  # mask_index: each row's count of ones (its end, for right padding)
        if w.opset >= SPLIT_INPUT_OPSET:
            w.one("ReduceSum", ones, axes, keepdims=0, out=n.output[1])
        else:
            w.one("ReduceSum", ones, axes=[1], keepdims=0, out=n.output[1])
    if bool(seg_ids) != bool(seg):
        return False
    if _input(n, 8):
        positions = w.one("Gather", pos, n.input[8])
    else:  # positions 0..S-1: the table's first S rows, broadcast over the batch
        length = w.one("Slice", w.one("Shape", ids), w.const([1], np.int64), w.const([2], np.int64))
        positions = w.one("Slice", pos, w.const([0], np.int64), length, w.const([0], np.int64))
    s = w.one("Add", w.one("Gather", word, ids), positions)
    if seg:
        s = w.one("Add", s, w.one("Gather", seg, seg_ids))
    if len(n.output) > 2 and n.output[2]:
        s = w.one("Identity", s, out=n.output[2])
    w.layernorm(s, gamma, beta, float(_attr(n, "epsilon", 1e-12)), n.output[0])
    return True


def _types(model: onnx.ModelProto) -> dict[str, tuple]:
    """Tensor name -> shape (ints for static dims, names for symbolic ones) where ONNX shape inference knows it."""
    lacks_ms = not any(o.domain == MS for o in model.opset_import)  # ONNX Runtime's optimizer may leave it out
    if lacks_ms:  # (added for the inference only: the model is not copied for it)
        model.opset_import.append(helper.make_opsetid(MS, 1))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # an invalid model: only the declared shapes
        log.debug("shape inference failed (%s)", e)
        inferred = model
    finally:
        if lacks_ms:
            del model.opset_import[-1]
    g = inferred.graph
    out = {t.name: tuple(t.dims) for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                 for d in tt.shape.dim)
    return out


# ONNX Runtime's own operators that its builders write in the default domain (onnx.checker knows no schema for them)
RUNTIME_DEFAULT_DOMAIN = ("SimplifiedLayerNormalization",)


def _runtime_node(n: onnx.NodeProto) -> bool:
    return n.domain == MS or (n.domain in ("", "ai.onnx") and n.op_type in RUNTIME_DEFAULT_DOMAIN)


def expand_fused(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` with each com.microsoft node of a registry operator written as its decomposition, and how
    many were expanded (the model itself when none). Repeated while it expands more: a node whose input shapes
    come from another fused node is known only once that one is expanded (ONNX's shape inference stops there)."""
    total = 0
    while any(_runtime_node(n) for n in model.graph.node):
        model, count = _expand_once(model)
        if not count:
            break
        total += count
    if total:
        log.info("%d com.microsoft node(s) expanded into their decomposition for the search", total)
    return model, total


def _expand_once(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    opset = default_opset(model)
    shapes = _types(model)
    shape = shapes.get
    rank = lambda name: len(shapes[name]) if name in shapes else None  # noqa: E731
    read = {x for n in model.graph.node for x in n.input} | {o.name for o in model.graph.output}
    expanders: dict[str, Callable[[_Writer, onnx.NodeProto], bool]] = {
        "Gelu": _gelu, "BiasGelu": _bias_gelu, "FastGelu": _fast_gelu, "QuickGelu": _quick_gelu,
        "FusedMatMul": lambda w, n: _fused_matmul(w, n, rank), "SkipLayerNormalization": _skip_layernorm,
        "SkipSimplifiedLayerNormalization": lambda w, n: _skip_rmsnorm(w, n, read),
        "SimplifiedLayerNormalization": lambda w, n: _rmsnorm(w, n, read),
        "Attention": lambda w, n: _attention(w, n, shape),
        "MultiHeadAttention": lambda w, n: _multi_head_attention(w, n, shape),
        "EmbedLayerNormalization": lambda w, n: _embed_layernorm(w, n, read),
    }
    out = onnx.ModelProto()
    out.CopyFrom(model)
    taken = {n.name for n in model.graph.node} | {t for n in model.graph.node for t in n.output}
    taken |= {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
    nodes, count = [], 0
    for n in model.graph.node:
        fn = expanders.get(n.op_type) if _runtime_node(n) else None
        w = _Writer(out.graph, n, opset, taken)
        if fn is not None and fn(w, n):
            nodes.extend(w.nodes)
            out.graph.initializer.extend(w.inits)
            count += 1
        else:
            nodes.append(n)
    if not count:
        return model, 0
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out, count


__all__ = ["expand_fused", "EXPAND_PREFIX"]
