"""A read-only view of an ONNX graph for the ONNX-level recognizers (mask_forms, embed_positions): producers,
readers, constant values, and dead-node removal."""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper


class GraphView:
    """Producer and reader maps of `graph`, and the values of its constants (initializers, Constant nodes)."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.prod: dict[str, onnx.NodeProto] = {o: n for n in graph.node for o in n.output if o}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for x in n.input:
                if x:
                    self.readers.setdefault(x, []).append(n)
        self.inits = {t.name: t for t in graph.initializer}
        self.inputs = {vi.name: vi for vi in graph.input if vi.name not in self.inits}
        self.outputs = {o.name for o in graph.output}

    def node(self, name: str, op_type: str) -> Optional[onnx.NodeProto]:
        """The default-domain node of type `op_type` producing `name`, or None."""
        n = self.prod.get(name)
        return n if n is not None and n.op_type == op_type and n.domain in ("", "ai.onnx") else None

    def const(self, name: str) -> Optional[np.ndarray]:
        """The value of a constant tensor (None where it is computed)."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        n = self.node(name, "Constant")
        if n is None:
            return None
        for a in n.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
            if a.name in ("value_int", "value_float"):
                return np.asarray(helper.get_attribute_value(a))
            if a.name in ("value_ints", "value_floats"):
                return np.asarray(helper.get_attribute_value(a))
        return None

    def const_type(self, name: str) -> Optional[tuple[int, tuple]]:
        """(elem type, dims) of a constant tensor, its value not read (a weight may be kept out of the model)."""
        if name in self.inits:
            t = self.inits[name]
            return t.data_type, tuple(t.dims)
        v = self.const(name)
        return None if v is None else (helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)

    def input_rank(self, name: str) -> Optional[int]:
        """The rank of graph input `name`, or None (not an input, or no shape)."""
        vi = self.inputs.get(name)
        if vi is None or not vi.type.tensor_type.HasField("shape"):
            return None
        return len(vi.type.tensor_type.shape.dim)

    def input_elem(self, name: str) -> Optional[int]:
        vi = self.inputs.get(name)
        return None if vi is None else vi.type.tensor_type.elem_type

    def only_read_by(self, name: str, node: onnx.NodeProto) -> bool:
        return name not in self.outputs and all(r is node for r in self.readers.get(name, []))


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def is_value(v: Optional[np.ndarray], *values) -> bool:
    """Whether constant `v` holds exactly `values` (any shape of that size)."""
    return v is not None and v.size == len(values) and all(v.reshape(-1)[i] == x for i, x in enumerate(values))


def remove_dead(graph: onnx.GraphProto, candidates: Iterable[onnx.NodeProto]) -> int:
    """Remove the nodes among `candidates` none of whose outputs is read or a graph output, until none is left;
    returns how many were removed."""
    cand = {tuple(n.output) for n in candidates}
    removed = 0
    while True:
        read = {x for n in graph.node for x in n.input} | {o.name for o in graph.output}
        dead = [i for i, n in enumerate(graph.node) if tuple(n.output) in cand and not any(o in read for o in n.output if o)]
        if not dead:
            return removed
        for i in reversed(dead):
            cand.discard(tuple(graph.node[i].output))
            del graph.node[i]
        removed += len(dead)


def fresh_name(graph: onnx.GraphProto, base: str) -> str:
    taken = {x for n in graph.node for x in list(n.input) + list(n.output)} | {t.name for t in graph.initializer}
    k = 0
    while f"{base}{k}" in taken:
        k += 1
    return f"{base}{k}"
