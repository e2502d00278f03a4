"""Embeddings whose positions are a constant arange sliced to the run-time sequence length, written as ONNX Runtime's
EmbedLayerNormalization.

Exporters write BERT's position lookup as Gather(table, Slice(arange, 0, S)) with S read from the ids' shape: a
value of the symbolic sequence length, so the partition keeps it out of every region (it folds to another constant
at each binding) and the search never sees word + segment + position together. This pass reads the spliced model:
layernorm(word[ids] + segment[seg] + table[0..S-1]) (as LayerNormalization, SkipLayerNormalization with no bias, or
at opsets < 17 in pieces: ReduceMean, Sub, Pow or Mul, ReduceMean, Add epsilon, Sqrt, Div, Mul gamma, Add beta;
in any order of the sum) becomes EmbedLayerNormalization with no position_ids input, whose positions are 0..S-1 of
the run-time length (the op's default). Exact where matched: the arange is checked element by element, S is the
ids' own dim 1, the slice starts at 0 on axis 1 with step 1. The result is checked against the user's model at two
bindings like every rewrite.
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper

from .onnx_graph import topo_order
from .graph_match import GraphView, attr, fresh_name, is_value, remove_dead

log = logging.getLogger(__name__)

MS = "com.microsoft"


def _sum_leaves(view: GraphView, name: str, owners: list, out: list, nodes: list,
                shapes: Optional[list] = None) -> None:
    """The terms of the Add tree ending in `name` (read only by `owners`; with `shapes`, also by Shape nodes, which
    are collected there: the sum has the norm's shape)."""
    add = view.node(name, "Add")
    extra = [r for r in view.readers.get(name, []) if not any(r is o for o in owners)]
    if shapes is not None and extra and all(r.op_type == "Shape" and r.domain == "" for r in extra) \
            and name not in view.outputs:
        shapes += extra
    elif extra or name in view.outputs:
        add = None
    if add is None:
        out.append(name)
        return
    nodes.append(add)
    for x in add.input:
        _sum_leaves(view, x, [add], out, nodes)


def _lookup(view: GraphView, name: str) -> Optional[tuple[str, str]]:
    """(table, ids) of Gather(table, ids) on axis 0 with a constant table, else None."""
    g = view.node(name, "Gather")
    if g is None or attr(g, "axis", 0) != 0 or view.const_type(g.input[0]) is None:
        return None
    return g.input[0], g.input[1]


def _seq_length_of(view: GraphView, name: str) -> Optional[str]:
    """The ids input X where `name` is Unsqueeze(Gather(Shape(X), 1), [0]) (X's dim 1 as a 1-element tensor)."""
    u = view.node(name, "Unsqueeze")
    if u is not None:
        axes = view.const(u.input[1]) if len(u.input) > 1 else np.asarray(attr(u, "axes", []))
        if not is_value(axes, 0):
            return None
        name = u.input[0]
    g = view.node(name, "Gather")
    if g is None or attr(g, "axis", 0) != 0 or not is_value(view.const(g.input[1]), 1):
        return None
    if u is None and view.const(g.input[1]).ndim != 1:
        return None
    s = view.node(g.input[0], "Shape")
    if s is None or attr(s, "start", 0) != 0 or attr(s, "end") is not None:
        return None
    return s.input[0]


def _first_positions(view: GraphView, ids: str) -> Optional[str]:
    """X where `ids` is Slice(arange(P)[None], [0], X's dim 1, [1], [1]): the positions 0..S-1 of ids X."""
    sl = view.node(ids, "Slice")
    if sl is None or len(sl.input) < 4:
        return None
    a = view.const(sl.input[0])
    if a is None or a.ndim != 2 or a.shape[0] != 1 or not np.array_equal(a[0], np.arange(a.shape[1])):
        return None
    steps = view.const(sl.input[4]) if len(sl.input) > 4 and sl.input[4] else np.ones(1, np.int64)
    if not (is_value(view.const(sl.input[1]), 0) and is_value(view.const(sl.input[3]), 1) and is_value(steps, 1)):
        return None
    return _seq_length_of(view, sl.input[2])


def _norm(node: onnx.NodeProto, view: GraphView) -> Optional[tuple[list, str, str, float, list, list]]:
    """(summed inputs, gamma, beta, epsilon, the norm's nodes reading them, the norm's other nodes) of a layer norm on
    the last axis (2: the lookups' sum is of rank 3) with its main output only read."""
    if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx"):
        if attr(node, "axis", -1) not in (-1, 2) or len(node.input) < 3 or not node.input[2] \
                or any(o for o in node.output[1:]):
            return None
        return [node.input[0]], node.input[1], node.input[2], float(attr(node, "epsilon", 1e-5)), [node], []
    if node.op_type == "SkipLayerNormalization" and node.domain == MS:
        if len(node.input) != 4 or any(o and view.readers.get(o) for o in node.output[1:]) \
                or any(o in view.outputs for o in node.output[1:] if o):
            return None
        return [node.input[0], node.input[1]], node.input[2], node.input[3], float(attr(node, "epsilon", 1e-12)), \
            [node], []
    if node.op_type == "Add" and node.domain in ("", "ai.onnx"):
        return _pieces(node, view)
    return None


def _operands(view: GraphView, node: onnx.NodeProto, op_type: str) -> Optional[tuple[onnx.NodeProto, str]]:
    """(the `op_type` node producing one input of binary `node`, the other input), either order, the producer read
    by `node` only."""
    for a, b in ((0, 1), (1, 0)):
        p = view.node(node.input[a], op_type)
        if p is not None and view.only_read_by(node.input[a], node):
            return p, node.input[b]
    return None


def _last_axis_mean(view: GraphView, node: Optional[onnx.NodeProto]) -> bool:
    if node is None or not attr(node, "keepdims", 1):
        return False
    axes = view.const(node.input[1]) if len(node.input) > 1 and node.input[1] else np.asarray(attr(node, "axes", []))
    return axes is not None and (is_value(axes, -1) or is_value(axes, 2))


def _pieces(end: onnx.NodeProto, view: GraphView) -> Optional[tuple[list, str, str, float, list, list]]:
    """A layer norm in pieces ending in Add `end` (beta): Add(Mul(Div(d, Sqrt(Add(ReduceMean(Pow(d, 2) or d * d),
    eps))), gamma), beta) with d = Sub(x, ReduceMean(x)) on the last axis; gamma, beta and eps constants."""
    mul = _operands(view, end, "Mul")
    if mul is None or view.const_type(mul[1]) is None:
        return None
    mul, beta = mul
    div = _operands(view, mul, "Div")
    if div is None or view.const_type(div[1]) is None:
        return None
    div, gamma = div
    sub, sqrt = view.node(div.input[0], "Sub"), view.node(div.input[1], "Sqrt")
    if sub is None or sqrt is None or not view.only_read_by(sqrt.output[0], div):
        return None
    add_eps = view.node(sqrt.input[0], "Add")
    found = _operands(view, add_eps, "ReduceMean") if add_eps is not None and \
        view.only_read_by(add_eps.output[0], sqrt) else None
    eps = view.const(found[1]) if found is not None else None
    if eps is None or eps.size != 1 or not _last_axis_mean(view, found[0]):
        return None
    var = found[0]
    sq = view.node(var.input[0], "Pow") or view.node(var.input[0], "Mul")
    d = sub.output[0]
    if sq is None or not view.only_read_by(sq.output[0], var) or sq.input[0] != d or \
            (sq.op_type == "Pow" and not is_value(view.const(sq.input[1]), 2)) or \
            (sq.op_type == "Mul" and sq.input[1] != d):
        return None
    if d in view.outputs or any(r is not sq and r is not div for r in view.readers.get(d, [])):
        return None
    x, mean = sub.input[0], view.node(sub.input[1], "ReduceMean")
    if not _last_axis_mean(view, mean) or mean.input[0] != x or not view.only_read_by(mean.output[0], sub):
        return None
    return [x], gamma, beta, float(eps.reshape(-1)[0]), [sub, mean], [mean, sub, sq, var, add_eps, sqrt, div, mul]


def _match(view: GraphView, node: onnx.NodeProto):
    norm = _norm(node, view)
    if norm is None:
        return None
    summed, gamma, beta, eps, owners, inner = norm
    leaves, adds, shapes = [], [], []
    for x in summed:
        _sum_leaves(view, x, owners, leaves, adds, shapes if node.op_type != "SkipLayerNormalization" else None)
    if len(leaves) not in (2, 3):
        return None
    looks = [_lookup(view, x) for x in leaves]
    if any(lk is None for lk in looks):
        return None
    pos = [(i, _first_positions(view, lk[1])) for i, lk in enumerate(looks)]
    pos = [(i, src) for i, src in pos if src is not None]
    if len(pos) != 1:
        return None
    p, src = pos[0]
    rest = [looks[i] for i in range(len(looks)) if i != p]
    word = next((lk for lk in rest if lk[1] == src), None)
    if word is None or view.input_rank(src) != 2 or \
            view.input_elem(src) not in (TensorProto.INT32, TensorProto.INT64):
        return None
    seg = next((lk for lk in rest if lk is not word), None)
    if seg is not None and (view.input_rank(seg[1]) != 2 or
                            view.input_elem(seg[1]) not in (TensorProto.INT32, TensorProto.INT64)):
        return None
    tables = [view.const_type(word[0]), view.const_type(looks[p][0])] + ([view.const_type(seg[0])] if seg else [])
    if any(len(d) != 2 or e != TensorProto.FLOAT or d[1] != tables[0][1][1] for e, d in tables):
        return None
    gathers = [view.prod[x] for x in leaves]
    return word, looks[p][0], seg, gamma, beta, eps, adds + gathers + inner, [r.output[0] for r in shapes]


def fuse_embed_positions(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` with each embedding layer norm whose positions are the sliced arange written as one
    EmbedLayerNormalization; returns (model, fused count). The model itself is returned when none matched."""
    view = GraphView(model.graph)
    found = [(i, m) for i, n in enumerate(model.graph.node) if (m := _match(view, n)) is not None]
    if not found:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    old = []
    for i, (word, table, seg, gamma, beta, eps, parts, shape_reads) in reversed(found):
        norm = g.node[i]
        for r in g.node:  # shapes of the sum read from the norm's output (the same shape)
            if r.op_type == "Shape" and r.output[0] in shape_reads:
                r.input[0] = norm.output[0]
        casts, names = [], []
        for ids in [word[1]] + ([seg[1]] if seg else []):
            name = fresh_name(g, f"taso_embed/{ids}_int32_")
            casts.append(helper.make_node("Cast", [ids], [name], to=TensorProto.INT32))
            names.append(name)
        inputs = [names[0], names[1] if seg else "", word[0], table, seg[0] if seg else "", gamma, beta]
        fused = helper.make_node("EmbedLayerNormalization", inputs, [norm.output[0], fresh_name(g, "taso_embed/mask")],
                                 domain=MS, epsilon=eps)
        del g.node[i]
        for k, n in enumerate(casts + [fused]):
            g.node.insert(i + k, n)
        old += parts
    remove_dead(g, [n for n in g.node if tuple(n.output) in {tuple(p.output) for p in old}]
                + [n for n in g.node if n.op_type in ("Slice", "Unsqueeze", "Gather", "Shape", "Constant")])
    order = topo_order(list(g.node), [x.name for x in g.input] + [t.name for t in g.initializer])
    nodes = [g.node[k] for k in order]
    del g.node[:]
    g.node.extend(nodes)
    if not any(o.domain == MS for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS, 1))
    log.info("%d embedding layer norm(s) with sliced positions written as EmbedLayerNormalization", len(found))
    return out, len(found)


__all__ = ["fuse_embed_positions"]
