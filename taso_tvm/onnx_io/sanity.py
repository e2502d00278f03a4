"""What the ONNX format forbids but protobuf parses: names that are not text, initializers whose data does not fill
their shape. Found by fuzzing the command line; each is one line naming the model and the place."""
from __future__ import annotations

from typing import Iterator

import onnx
from onnx import numpy_helper


def _graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graphs(sub)


def model_problem(proto: onnx.ModelProto) -> str:
    """Why `proto` cannot be a valid model (a name that is not text, an initializer whose data does not match its
    shape and type), or ''."""
    for g in _graphs(proto.graph):
        for i, n in enumerate(g.node):
            names = [n.op_type, n.name, n.domain, *n.input, *n.output, *(a.name for a in n.attribute)]
            if not all(isinstance(x, str) for x in names):
                return f"node {i} of graph '{g.name}' has a name that is not UTF-8 text"
        for vi in list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer):
            if not isinstance(vi.name, str):
                return f"graph '{g.name}' has a tensor name that is not UTF-8 text"
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                continue
            if any(d < 0 for d in t.dims):
                return f"initializer '{t.name}' has a negative dim {list(t.dims)}"
            try:
                numpy_helper.to_array(t)
            except Exception as e:  # noqa: BLE001  (ValueError, TypeError, KeyError for an unknown dtype)
                text = str(e).splitlines()[0] if str(e) else type(e).__name__
                return f"initializer '{t.name}' does not hold its declared shape {list(t.dims)} and type ({text})"
    return ""
