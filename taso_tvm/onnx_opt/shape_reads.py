"""Shape reads moved to the earliest tensor of the same shape.

Exporters read shapes where they happen to be (torch: `Shape` of the embedding LayerNorm's output, to build an
attention mask). Such a read ties the mask computation to the encoder's first node, so no region can hold both the
encoder and the mask's consumer (the splice would make a cycle). Where ONNX shape inference gives the tensor a
fully known symbolic shape, a `Shape` node can read any tensor of that very shape instead; this module makes it read
the earliest one up its producers (through nodes that keep the shape: element-wise ops, normalizations, matrix
products to the same width), which computes the same value at every binding of the symbolic dims.
"""
from __future__ import annotations

import copy
import logging
from typing import Optional

import onnx

from .onnx_graph import producers, topo_order
from .prepare import infer

log = logging.getLogger(__name__)


def _dims(t: Optional[onnx.TypeProto]) -> Optional[tuple]:
    """The shape as a tuple of ints and dim names, None unless every dim is known (by value or by name; shape
    inference's own `unk__N` names count: it gives one name to dims it proved equal)."""
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    out = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            return None
    return tuple(out)


def rewire_shape_reads(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """(a copy of `model` whose Shape nodes read the earliest tensor of their input's shape, {output of each moved
    Shape node: the tensor it read}); the model itself when none moves."""
    typed = infer(model)
    g = typed.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    prod = producers(model.graph)
    moves: dict[int, str] = {}
    for i, n in enumerate(model.graph.node):
        if n.op_type != "Shape" or n.domain not in ("", "ai.onnx") or not n.input:
            continue
        want = _dims(types.get(n.input[0]))
        if want is None:
            continue
        src, seen = n.input[0], set()
        while src not in seen:
            seen.add(src)
            p = prod.get(src)
            if p is None:
                break
            same = [x for x in model.graph.node[p].input if x and _dims(types.get(x)) == want]
            if not same:
                break
            src = same[0]
        if src != n.input[0]:
            moves[i] = src
    if not moves:
        return model, {}
    out = copy.deepcopy(model)
    before = {}
    for i, src in moves.items():
        n = out.graph.node[i]
        before[n.output[0]] = n.input[0]
        n.input[0] = src
    log.info("%d Shape node(s) read an earlier tensor of the same shape", len(moves))
    return out, before


def restore_shape_reads(model: onnx.ModelProto, before: dict[str, str]) -> onnx.ModelProto:
    """`model` (in place) with each moved Shape node reading its tensor again where that tensor still exists and
    reading it makes no cycle: the user's node as it was, wherever the rewrite did not need the move."""
    if not before:
        return model
    g = model.graph
    prod = producers(g)
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(g.node):
        for x in n.input:
            readers.setdefault(x, []).append(i)
    for i, n in enumerate(g.node):
        old = before.get(n.output[0]) if n.op_type == "Shape" and n.output else None
        if old is None or old == n.input[0] or old not in prod and old not in {x.name for x in g.input}:
            continue
        if _reaches(g, readers, i, prod.get(old)):
            continue
        n.input[0] = old
    order = topo_order(list(g.node), [x.name for x in g.input] + [t.name for t in g.initializer])
    nodes = [g.node[k] for k in order]
    del g.node[:]
    g.node.extend(nodes)
    return model


def _reaches(g: onnx.GraphProto, readers: dict, start: int, target: Optional[int]) -> bool:
    """Whether node `target` depends on node `start` (reading `target`'s output from `start` would be a cycle)."""
    if target is None:
        return False
    stack, seen = [start], set()
    while stack:
        i = stack.pop()
        if i == target:
            return True
        if i in seen:
            continue
        seen.add(i)
        for o in g.node[i].output:
            stack.extend(readers.get(o, ()))
    return False


__all__ = ["rewire_shape_reads", "restore_shape_reads"]
