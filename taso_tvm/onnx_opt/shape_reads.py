"""Shape reads moved to the earliest tensor of the same shape.

Exporters read shapes where they happen to be (torch: `Shape` of the embedding LayerNorm's output, to build an
attention mask). Such a read ties the mask computation to the encoder's first node, so no region can hold both the
encoder and the mask's consumer (the splice would make a cycle). Where ONNX shape inference gives the tensor a
fully known symbolic shape, a `Shape` node can read any tensor of that very shape instead; this module makes it read
the earliest one up its producers (through nodes that keep the shape: element-wise ops, normalizations, matrix
products to the same width), which computes the same value at every binding of the symbolic dims.

A read of one dim (`Gather(Shape(x), i)`, or `Shape(x, start=i, end=i + 1)`) of a dim the graph's inputs name moves
further: to that input's dim (the key length a layer's mask slice reads from its repeated keys is the
`past_sequence_length + sequence_length` of `attention_mask`: read there, the slice no longer sits between the
layer's key and its attention, which one region can then hold).
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Optional

import numpy as np
import onnx
from onnx import numpy_helper

from .onnx_graph import producers, topo_order
from .prepare import infer

log = logging.getLogger(__name__)

DIMS_PREFIX = "taso_dims/"  # the names of the Shape nodes and indices a moved read of one dim reads


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
    ints = _small_ints(model)
    dim_moves = _dim_reads(model, types, prod, ints)
    read_by_moved = {prod.get(model.graph.node[i].input[0]) for i in dim_moves} | set(dim_moves)
    moves: dict[int, str] = {}
    for i, n in enumerate(model.graph.node):
        if n.op_type != "Shape" or n.domain not in ("", "ai.onnx") or not n.input or i in read_by_moved:
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
    if not moves and not dim_moves:
        return model, {}
    out = copy.deepcopy(model)
    before = {}
    for i, src in moves.items():
        n = out.graph.node[i]
        before[n.output[0]] = n.input[0]
        n.input[0] = src
    if moves:
        log.info("%d Shape node(s) read an earlier tensor of the same shape", len(moves))
    if dim_moves:
        before.update(_move_dim_reads(out, dim_moves, ints))
        log.info("%d read(s) of one dim read it from a graph input", len(dim_moves))
    return out, before


def _small_ints(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """{name: value} of the model's one-element integer constants (initializers and Constant nodes' values): the
    indices a read of one dim takes."""
    out = {}
    for t in model.graph.initializer:
        if len(t.dims) <= 1 and (not t.dims or t.dims[0] == 1):
            a = numpy_helper.to_array(t)
            if a.dtype.kind in "iu":
                out[t.name] = a
    for n in model.graph.node:
        if n.op_type == "Constant" and len(n.output) == 1 and n.attribute:
            a = n.attribute[0]
            v = numpy_helper.to_array(a.t) if a.type == onnx.AttributeProto.TENSOR else \
                np.array(a.i, np.int64) if a.name == "value_int" else None
            if v is not None and v.size == 1 and v.dtype.kind in "iu":
                out[n.output[0]] = v
    return out


def _dim_reads(model: onnx.ModelProto, types: dict, prod: dict[str, int], ints: dict[str, np.ndarray]
               ) -> dict[int, tuple[str, int]]:
    """{index of a node that reads one dim of a tensor computed at run time: (the graph input naming that dim, its
    axis there)}: `Gather(Shape(x), i)` (the Gather's index) or `Shape(x, start=i, end=i + 1)`."""
    g = model.graph
    named: dict[str, tuple[str, int]] = {}  # dim name -> the first graph input (in order) that names it
    for x in g.input:
        for axis, d in enumerate((_dims(x.type) or ())):
            if isinstance(d, str) and not d.startswith("unk__"):
                named.setdefault(d, (x.name, axis))
    if not named:
        return {}
    inputs = {x.name for x in g.input}
    out: dict[int, tuple[str, int]] = {}
    for i, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "Gather" and len(n.input) == 2 and not any(a.name == "axis" and a.i for a in n.attribute):
            p = prod.get(n.input[0])
            shape = g.node[p] if p is not None else None
            if shape is None or shape.op_type != "Shape" or shape.attribute:
                continue
            index = ints.get(n.input[1])
            x, axis = shape.input[0], None if index is None else int(index.reshape(-1)[0])
        elif n.op_type == "Shape" and n.attribute:
            x, at = n.input[0], {a.name: a.i for a in n.attribute}
            rank = len(_dims(types.get(x)) or ())
            start, end = (v + rank if v < 0 else v for v in (at.get("start", 0), at.get("end", rank)))
            if not rank or end - start != 1 or not 0 <= start < rank:
                continue
            axis = start
        else:
            continue
        dims = _dims(types.get(x))
        if x in inputs or axis is None or dims is None or not -len(dims) <= axis < len(dims):
            continue
        hit = named.get(dims[axis]) if isinstance(dims[axis], str) else None
        if hit is not None:
            out[i] = hit
    return out


def _move_dim_reads(model: onnx.ModelProto, moves: dict[int, tuple[str, int]], ints: dict[str, np.ndarray]
                    ) -> dict[str, tuple]:
    """Make each node of `moves` read its dim from the graph input (in place): a Gather reads a new Shape of the
    input at the input's axis, a Shape with start/end takes the input and its axis. Returns {each moved node's
    output: (the node as it was, the Shape node it read if that is now unread and dropped, else None)}."""
    g = model.graph
    was_nodes = {g.node[i].output[0]: copy.deepcopy(g.node[i]) for i in moves}
    shape_of = {n.output[0]: n for n in g.node if n.op_type == "Shape"}
    used = {x for n in g.node for x in list(n.input) + list(n.output)} | {t.name for t in g.initializer}
    shapes: dict[str, str] = {}
    first: list[onnx.NodeProto] = []

    def fresh(base: str) -> str:
        k = 0
        while f"{base}_{k}" in used:
            k += 1
        used.add(f"{base}_{k}")
        return f"{base}_{k}"

    for i, (src, axis) in moves.items():
        n = g.node[i]
        if n.op_type == "Shape":
            n.input[0] = src
            for a in n.attribute:
                if a.name in ("start", "end"):
                    a.i = axis + (a.name == "end")
            continue
        if src not in shapes:
            shapes[src] = fresh(f"{DIMS_PREFIX}{src}")
            first.append(onnx.helper.make_node("Shape", [src], [shapes[src]], name=shapes[src]))
        index = fresh(f"{DIMS_PREFIX}{src}_axis{axis}")
        was = ints[n.input[1]]  # its rank kept: a scalar index gives a scalar, a [1] index a [1] tensor
        g.initializer.append(numpy_helper.from_array(np.full(was.shape, axis, np.int64), index))
        n.input[0], n.input[1] = shapes[src], index
    read = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    freed = {was.input[0] for was in was_nodes.values() if was.op_type == "Gather"}  # the Shapes the moves left
    dropped = {n.output[0]: copy.deepcopy(n) for n in g.node if n.output and n.output[0] in freed - read}
    nodes = first + [n for n in g.node if not n.output or n.output[0] not in dropped]  # unread, it would tie the layer
    del g.node[:]
    g.node.extend(nodes)
    return {out: (was, dropped.get(was.input[0]) if was.op_type == "Gather" and was.input[0] in shape_of else None)
            for out, was in was_nodes.items()}


def restore_shape_reads(model: onnx.ModelProto, before: dict[str, Any]) -> onnx.ModelProto:
    """`model` (in place) with each moved Shape node reading its tensor again, and each moved read of one dim as the
    user wrote it, where that tensor still exists and reading it makes no cycle: the user's node as it was, wherever
    the rewrite did not need the move."""
    if not before:
        return model
    g = model.graph
    prod = producers(g)
    inputs = {x.name for x in g.input}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(g.node):
        for x in n.input:
            readers.setdefault(x, []).append(i)
    back: list[onnx.NodeProto] = []
    have = set(prod) | inputs | {t.name for t in g.initializer}
    for i, n in enumerate(g.node):
        old = before.get(n.output[0]) if n.output else None
        if isinstance(old, tuple):  # a read of one dim: (the node as it was, the Shape it read, if dropped)
            was, shape = old
            x = (shape or was).input[0]
            readable = have | ({shape.output[0]} if shape else set())
            if all(v in readable for v in list(was.input) + [x] if v) and not _reaches(g, readers, i, prod.get(x)):
                n.CopyFrom(was)
                if shape is not None and shape.output[0] not in prod:
                    prod[shape.output[0]] = -1
                    have.add(shape.output[0])
                    back.append(shape)
            continue
        if old is None or n.op_type != "Shape" or old == n.input[0] or old not in prod and old not in inputs:
            continue
        if _reaches(g, readers, i, prod.get(old)):
            continue
        n.input[0] = old
    if back or any(isinstance(v, tuple) for v in before.values()):
        g.node.extend(back)
        _drop_unread_dims(g)
    order = topo_order(list(g.node), [x.name for x in g.input] + [t.name for t in g.initializer])
    nodes = [g.node[k] for k in order]
    del g.node[:]
    g.node.extend(nodes)
    return model


def _drop_unread_dims(g: onnx.GraphProto) -> None:
    """The Shape nodes and indices `_move_dim_reads` added that no node reads any more (their reads restored)."""
    read = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    keep = [n for n in g.node if not (n.name.startswith(DIMS_PREFIX) and n.output[0] not in read)]
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)
    inits = [t for t in g.initializer if not (t.name.startswith(DIMS_PREFIX) and t.name not in read)]
    if len(inits) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(inits)


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
