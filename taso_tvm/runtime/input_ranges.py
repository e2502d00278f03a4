"""Which values an integer graph input may take, read from the graph: an input that indexes a table.

An integer input that reaches the indices of a `Gather` (directly, or through casts and shape-only operators that
keep its values: Cast, Unsqueeze, Reshape, Expand, ...) whose data is a constant (an initializer or a Constant
node) must lie in [0, rows) of that table on the gathered axis; ONNX Runtime refuses anything else ("indices
element out of data bounds"). ONNX Runtime's own benchmark tools draw token ids and segment ids the same way. The
embedding inputs of ONNX Runtime's `EmbedLayerNormalization` (an already-optimized model) count as gathers too.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional

import onnx
from onnx import numpy_helper

# operators whose output holds (some of) the values of their first input, unchanged
_VALUE_PRESERVING = frozenset({"Cast", "CastLike", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Expand",
                               "Flatten", "Transpose", "Tile", "Slice", "Concat", "Gather", "GatherElements"})
# (domain, op) -> {index input position: (table input position, axis)}
_EMBED_INDICES = {("com.microsoft", "EmbedLayerNormalization"): {0: (2, 0), 1: (4, 0), 8: (3, 0)}}
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _constant_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Shapes of the graph's constant tensors: initializers and Constant nodes' values."""
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS and n.output:
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = tuple(numpy_helper.to_array(a.t).shape)
    return shapes


def _axis(node: onnx.NodeProto, rank: int) -> int:
    for a in node.attribute:
        if a.name == "axis":
            return a.i + rank if a.i < 0 else a.i
    return 0


def _table_bound(node: onnx.NodeProto, pos: int, consts: dict[str, tuple[int, ...]]) -> Optional[int]:
    """The number of rows a value read at input `pos` of `node` indexes, if that input indexes a constant table."""
    if node.op_type == "Gather" and node.domain in _DEFAULT_DOMAINS and pos == 1:
        shape = consts.get(node.input[0])
        if shape:
            return int(shape[_axis(node, len(shape))])
        return None
    table = _EMBED_INDICES.get((node.domain, node.op_type), {}).get(pos)
    if table is not None and len(node.input) > table[0]:
        shape = consts.get(node.input[table[0]])
        if shape:
            return int(shape[table[1]])
    return None


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """{graph input name: rows} for each input whose values index a constant table: values in [0, rows) are valid
    (the smallest table where it indexes several)."""
    graph = model.graph
    consts = _constant_shapes(graph)
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for n in graph.node:
        for pos, x in enumerate(n.input):
            if x:
                readers[x].append((n, pos))
    bounds: dict[str, int] = {}
    for vi in graph.input:
        if vi.name in consts:
            continue
        seen, todo, best = {vi.name}, [vi.name], None
        while todo:
            for node, pos in readers.get(todo.pop(), ()):
                rows = _table_bound(node, pos, consts)
                if rows is not None:
                    best = rows if best is None else min(best, rows)
                    continue
                carries = node.op_type in _VALUE_PRESERVING and node.domain in _DEFAULT_DOMAINS and \
                    (pos == 0 or node.op_type == "Concat")
                for out in node.output if carries else ():
                    if out and out not in seen:
                        seen.add(out)
                        todo.append(out)
        if best is not None and best > 0:
            bounds[vi.name] = best
    return bounds


__all__ = ["index_bounds"]
