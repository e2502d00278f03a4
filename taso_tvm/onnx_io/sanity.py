"""What the ONNX format forbids but protobuf parses: names that are not text, initializers whose data does not fill
their shape. Found by fuzzing the command line; each is one line naming the model and the place."""
from __future__ import annotations

from typing import Iterator

import onnx
from onnx import numpy_helper

from ..errors import one_line


def _graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graphs(sub)


def _not_text(msg, where: str = "model") -> str:
    """The first string field (names, doc strings, metadata) anywhere in `msg` that protobuf handed back as bytes
    because it is not UTF-8, as a path like 'graph.node[3].name', or ''."""
    from google.protobuf.descriptor import FieldDescriptor as F

    for fd, value in msg.ListFields():
        path = f"{where}.{fd.name}"
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == F.LABEL_REPEATED
        if fd.type == F.TYPE_STRING:
            items = value if repeated else [value]
            for k, v in enumerate(items):
                if not isinstance(v, str):
                    return f"{path}[{k}]" if repeated else path
        elif fd.type == F.TYPE_MESSAGE:
            items = value if repeated else [value]
            for k, v in enumerate(items):
                bad = _not_text(v, f"{path}[{k}]" if repeated else path)
                if bad:
                    return bad
    return ""


def model_problem(proto: onnx.ModelProto) -> str:
    """Why `proto` cannot be a valid model (a name that is not text, an initializer whose data does not match its
    shape and type), or ''."""
    bad = _not_text(proto)
    if bad:
        return f"{bad} is not UTF-8 text"
    for g in _graphs(proto.graph):
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                continue
            if any(d < 0 for d in t.dims):
                return f"initializer '{t.name}' has a negative dim {list(t.dims)}"
            try:
                numpy_helper.to_array(t)
            except Exception as e:  # noqa: BLE001  (ValueError, TypeError, KeyError for an unknown dtype)
                return (f"initializer '{t.name}' does not hold its declared shape {list(t.dims)} and type "
                        f"({one_line(e)})")
    return ""


MAX_CHECKER_TEXT = 300  # characters of the checker's message kept in the one line


def checker_problem(proto: onnx.ModelProto) -> str:
    """Why ONNX's checker refuses the model (cycles, operators it does not know, an opset newer than this ONNX),
    as one line, or ''. Weights kept out of the model (`weights`, whose files `read_onnx` checked) are typed inputs
    to the checker: it never serializes them, so a model of any size is checked."""
    from .weights import as_inputs

    newest = onnx.defs.onnx_opset_version()
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            return f"it imports opset {o.version} of the default domain; this ONNX knows opsets up to {newest}"
    try:
        onnx.checker.check_model(as_inputs(proto))
    except Exception as e:  # noqa: BLE001  (ValidationError, and others for odd protos)
        text = " ".join(str(e).split()) or type(e).__name__
        return text if len(text) <= MAX_CHECKER_TEXT else text[:MAX_CHECKER_TEXT - 3] + "..."
    return ""
