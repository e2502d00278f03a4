"""ONNX → Relax: TVM's ONNX frontend plus the clean-up the search needs, with one-line errors."""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
import tvm
from tvm import relax

from ..quiet import quiet
from ..safe_read import UnsafeFileError, read_bytes
from .weights import has_references, is_reference, resolve, shared
from .. import errors as _errors

log = logging.getLogger(__name__)

ModelLike = Union[str, "os.PathLike[str]", bytes, onnx.ModelProto]


class ModelLoadError(_errors.ModelError, ValueError):
    """A model could not be read or imported. The message is one line naming the file and the cause."""


def read_onnx(model: ModelLike) -> tuple[onnx.ModelProto, str]:
    """Read an ONNX model from a path, bytes or a ModelProto; returns the model and a label for messages.

    A file's external data is read relative to the file's folder, whatever the working directory; its large
    tensors stay references to their data file (`weights`), so the model is held once."""
    if isinstance(model, onnx.ModelProto):
        return model, f"model '{model.graph.name or 'in memory'}'"
    if isinstance(model, (bytes, bytearray)):
        label = "model bytes"
        data = bytes(model)
        base_dir = os.getcwd()  # where ONNX itself looks for the data of a model given as bytes
    else:
        path = os.fspath(model)
        label = f"'{path}'"
        try:  # a model is data: a regular file (not /dev/zero, a FIFO or a folder), checked before it is opened
            data = read_bytes(path, "model", max_bytes=None)
        except UnsafeFileError as e:
            raise ModelLoadError(f"cannot read {label}: {e.detail}") from None
        base_dir = os.path.dirname(os.path.abspath(path))
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and others
        raise ModelLoadError(f"{label} is not an ONNX model: {_errors.one_line(e)}") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{label} is not an ONNX model: it holds no graph")
    del data
    proto = resolve(proto, base_dir, label)
    from .sanity import model_problem

    why = model_problem(proto)
    if why:
        raise ModelLoadError(f"{label} is not a valid ONNX model: {why}")
    return proto, label


def parse_shapes(text: str) -> dict[str, list[int]]:
    """tvmc's --input-shapes syntax: "name:[1,3,224,224],mask:[1,128]"."""
    shapes: dict[str, list[int]] = {}
    for m in re.finditer(r"\s*([^:,\[\]]+?)\s*:\s*\[([^\]]*)\]\s*(?:,|$)", text):
        dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
        entry = m.group(0).strip(", ")
        try:
            dims_i = [int(d) for d in dims]
        except ValueError:
            raise ModelLoadError(f"bad --input-shapes entry '{entry}': dims must be integers") from None
        if any(d < 1 for d in dims_i) or m.group(1) in shapes:
            why = "dims must be >= 1" if any(d < 1 for d in dims_i) else f"'{m.group(1)}' is given twice"
            raise ModelLoadError(f"bad --input-shapes entry '{entry}': {why}")
        shapes[m.group(1)] = dims_i
    if not shapes and text.strip():
        raise ModelLoadError(f"bad --input-shapes '{text}': expected name:[d1,d2,...],name2:[...]")
    return shapes


def _input_shapes(proto: onnx.ModelProto, shapes: Optional[Mapping[str, Sequence[int]]], label: str) -> dict:
    inits = {i.name for i in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    for name in shapes or {}:
        if name not in names:
            raise ModelLoadError(f"{label}: --input-shapes names '{name}', which is not a graph input "
                                 f"(inputs: {', '.join(names)})")
    out = {}
    for i in proto.graph.input:
        if i.name in inits:
            continue
        if shapes and i.name in shapes:
            out[i.name] = list(shapes[i.name])
    return out


def _import_error(e: Exception, proto: onnx.ModelProto, label: str) -> ModelLoadError:
    """One line for a failure of TVM's ONNX frontend, naming the operator and node where it can."""
    if isinstance(e, tvm.error.OpNotImplemented):
        known = {op.op_type for op in proto.graph.node}
        ops = re.findall(r"[A-Za-z_][\w.]*", str(e).split(":", 1)[-1])
        bad = [o for o in ops if o in known] or ops
        nodes = [n for n in proto.graph.node if n.op_type in bad]
        where = ", ".join(f"'{n.name or n.output[0]}'" for n in nodes[:3])
        return ModelLoadError(f"{label}: operator {', '.join(bad)} (node {where}) is not supported by TVM's ONNX "
                              f"importer")
    msg = str(e).strip().splitlines()
    return ModelLoadError(f"{label}: TVM could not import the model: {msg[-1] if msg else type(e).__name__}")


@contextlib.contextmanager
def _weights_in_place(proto: onnx.ModelProto) -> Iterator[None]:
    """The importer reads the weights kept out of `proto` (`weights`) from their memory maps or the store: its
    Relax constants share their memory (`weights.shared`), never copied into a model inlined for it (the importer's own ONNX checker,
    which would serialize and parse such a model twice more, is skipped for a model with weights kept out; it
    only warns)."""
    if not has_references(proto):
        yield
        return
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    cls = fe.ONNXGraphImporter
    parse_array, check_model = cls._parse_array, onnx.checker.check_model

    def _parse(self: object, t: onnx.TensorProto) -> tvm.runtime.Tensor:
        if not is_reference(t):
            return parse_array(self, t)
        a = shared(t)
        try:  # the constant lends the memory map's (or the store's) pages: no copy at all
            return tvm.runtime.from_dlpack(a)
        except Exception:  # not lendable (alignment, type): one copy
            return tvm.runtime.tensor(np.ascontiguousarray(a))

    cls._parse_array = _parse
    onnx.checker.check_model = lambda *a, **k: None
    try:
        yield
    finally:
        cls._parse_array, onnx.checker.check_model = parse_array, check_model


def load_onnx(model: ModelLike, shapes: Optional[Mapping[str, Sequence[int]]] = None,
              opset: Optional[int] = None, fold_constants: bool = True) -> tvm.IRModule:
    """Import an ONNX model into a Relax IRModule with weights bound as constants and constants folded.

    `shapes` fixes input shapes (and so symbolic dimensions), like tvmc's --input-shapes. `fold_constants=False`
    skips FoldConstant (which builds a kernel per folded expression); the search folds weight-only subgraphs
    with NumPy anyway.
    """
    proto, label = read_onnx(model)
    shape_dict = _input_shapes(proto, shapes, label)
    error: Optional[ModelLoadError] = None
    with quiet():  # the frontend prints its errors; TVM logs a warning when the abandoned builder is collected
        try:
            from tvm.relax.frontend.onnx import from_onnx

            with _weights_in_place(proto):
                mod = from_onnx(proto, shape_dict=shape_dict or None, opset=opset)
        except Exception as e:  # the frontend raises many types; keep one line
            error = _import_error(e, proto, label)
        if error is not None:
            gc.collect()
    if error is not None:
        raise error
    if fold_constants:
        mod = relax.transform.FoldConstant()(mod)
    else:  # unused tuple reads (batch_norm's running statistics) would otherwise stay; FoldConstant drops them
        mod = relax.transform.DeadCodeElimination()(mod)
    log.info("imported %s: %d Relax functions", label, len(mod.functions))
    return mod
