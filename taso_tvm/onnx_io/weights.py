"""Large weights kept out of the in-memory model, so that a model of any size (protobuf holds at most 2 GB) is held
once, whatever the working directory.

A model read from a file keeps each large initializer as a *reference*: a TensorProto with its name, type and dims,
`data_location` EXTERNAL and a location that is either the absolute path of the data file the tensor lies in (with
its offset and length) or `MEM_PREFIX` + a key into this module's store of NumPy arrays (weights a rewrite made, or
those of a large model that held them inline). Copies of such a model (working copies, regions, the spliced result)
copy a few bytes per weight. What needs the values gets them here: `array` (a read-only memory map of the file or
the stored array), `ort_initializers` (ONNX Runtime takes them without a copy), `inline` (TVM's importer),
`save` (streams them into one data file beside the output).

The locations a model file names are checked on reading: relative, inside the model's folder, naming a regular file
that holds the bytes (ONNX's own rule; a location like '../../etc/hostname' is bad input, one line).
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import errors as _errors

MEM_PREFIX = "taso-mem:"
LARGE_ELEMENTS = 4096  # a tensor above this many elements is a weight (never shape data): kept as a reference
OFFLOAD_INLINE_BYTES = 256 << 20  # an inline model whose large tensors hold more than this is offloaded on reading
EXTERNAL_AUTO_BYTES = int(1.8 * (1 << 30))  # --external-data auto: a model over this goes to a data file
PROTOBUF_LIMIT = 2 << 30
INLINE_BYTES = 1024  # smaller tensors stay inside the written model (onnx's own default threshold)
ALIGN = 64  # offsets in a written data file
EXTERNAL_MODES = ("auto", "always", "never")

_STORE: dict[str, np.ndarray] = {}  # MEM_PREFIX keys -> arrays
_MAPS: dict[tuple, np.ndarray] = {}  # (path, offset, dtype, shape) -> memory map
_KEYS = itertools.count()


class WeightsError(_errors.ModelError, ValueError):
    """A model's external data that cannot be read (a location outside its folder, a missing or short file)."""


# ----------------------------------------------------------------------------------------- tensors
def tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every initializer of the model, subgraphs' included, then the tensors in node attributes (Constant nodes'
    values; the graph's, its subgraphs' and its functions'): the order of onnx's own walk, which it keeps private."""
    yield from _initializers(model.graph)
    for g in [model.graph, *model.functions]:
        yield from _attribute_tensors(g)


def _subgraphs(attribute: onnx.AttributeProto) -> list:
    if attribute.type == onnx.AttributeProto.GRAPH:
        return [attribute.g]
    if attribute.type == onnx.AttributeProto.GRAPHS:
        return list(attribute.graphs)
    return []


def _initializers(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            for g in _subgraphs(a):
                yield from _initializers(g)


def _attribute_tensors(graph: Any) -> Iterator[onnx.TensorProto]:
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for g in _subgraphs(a):
                yield from _attribute_tensors(g)


def _info(t: onnx.TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def is_reference(t: onnx.TensorProto) -> bool:
    """Whether `t` is one of our references (data in a file by absolute path, or in the store)."""
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return False
    loc = _info(t).get("location", "")
    return loc.startswith(MEM_PREFIX) or os.path.isabs(loc)


def references(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in model.graph.initializer if is_reference(t)]


def has_references(model: onnx.ModelProto) -> bool:
    return any(is_reference(t) for t in model.graph.initializer)


def _np_dtype(data_type: int) -> Optional[np.dtype]:
    """The NumPy dtype whose bytes are ONNX's raw layout for this type, or None (strings, bfloat16, float8:
    those stay inline)."""
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(data_type))
    except (KeyError, TypeError, ValueError):
        return None
    return dt if dt.kind in "biuf" and dt.isbuiltin else None


def nbytes(t: onnx.TensorProto) -> int:
    dt = _np_dtype(t.data_type)
    return int(np.prod(t.dims, dtype=np.int64)) * (dt.itemsize if dt is not None else 1)


def _large(t: onnx.TensorProto) -> bool:
    return int(np.prod(t.dims, dtype=np.int64)) > LARGE_ELEMENTS and _np_dtype(t.data_type) is not None


def array(t: onnx.TensorProto) -> np.ndarray:
    """The tensor's value: a read-only memory map or stored array for a reference, else numpy_helper's copy."""
    if not is_reference(t):
        return numpy_helper.to_array(t)
    info = _info(t)
    loc = info["location"]
    if loc.startswith(MEM_PREFIX):
        return _STORE[loc]
    dt, shape = _np_dtype(t.data_type), tuple(int(d) for d in t.dims)
    key = (loc, int(info.get("offset", 0)), dt.str, shape)
    m = _MAPS.get(key)
    if m is None:
        if int(np.prod(shape, dtype=np.int64)) == 0:
            m = np.zeros(shape, dt)
        else:  # copy-on-write, so that `shared` can lend it to TVM; read-only to everyone else
            m = np.memmap(loc, dtype=dt, mode="c", offset=key[1], shape=shape).view()
            m.flags.writeable = False
        _MAPS[key] = m
    return m


def shared(t: onnx.TensorProto) -> np.ndarray:
    """A reference's value as an array that DLPack can lend without a copy (TVM's constants): the writable
    array behind `array`'s read-only view (a copy-on-write map of the file, or the stored array). Never write
    to it."""
    a = array(t)
    b = a.base
    if (not a.flags.writeable and isinstance(b, np.ndarray) and b.flags.writeable and b.shape == a.shape
            and b.dtype == a.dtype and b.ctypes.data == a.ctypes.data):
        return b
    return a


def _reference(t: onnx.TensorProto, location: str, offset: int = 0, length: int = 0) -> onnx.TensorProto:
    """A header of `t` (name, type, dims, doc) whose data is at `location`."""
    r = onnx.TensorProto()
    r.name, r.data_type, r.doc_string = t.name, t.data_type, t.doc_string
    r.dims.extend(t.dims)
    r.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length or nbytes(t)))):
        e = r.external_data.add()
        e.key, e.value = k, v
    return r


def store(t: onnx.TensorProto, value: np.ndarray) -> onnx.TensorProto:
    """A reference to `value` (kept in the store) with `t`'s header."""
    key = f"{MEM_PREFIX}{next(_KEYS)}"
    _STORE[key] = np.ascontiguousarray(value)
    return _reference(t, key)


def offload(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its large inline initializers moved to the store: a new model (protobuf frees a message's
    memory only with the whole message, so replacing tensors in place would hold them twice); `model` itself when
    there is none."""
    g = model.graph
    if not any(_large(t) and t.data_location != onnx.TensorProto.EXTERNAL for t in g.initializer):
        return model
    out = _copy_without_initializers(model)
    for t in g.initializer:
        if _large(t) and t.data_location != onnx.TensorProto.EXTERNAL:
            out.graph.initializer.append(store(t, numpy_helper.to_array(t)))
        else:
            out.graph.initializer.append(t)
    return out


def forget(model: onnx.ModelProto) -> None:
    """Drop the stored arrays `model` refers to (a model made here and no longer wanted)."""
    for t in references(model):
        _STORE.pop(_info(t)["location"], None)


def mark() -> set:
    """The stored arrays now (for `release_since`)."""
    return set(_STORE)


def release_since(before: set, keep: Iterable[onnx.ModelProto]) -> None:
    """Drop the arrays stored since `mark` gave `before` that none of the `keep` models refers to (the weights of
    regions that were searched and not kept)."""
    wanted = {_info(t)["location"] for m in keep for t in references(m)}
    for key in [k for k in _STORE if k not in before and k not in wanted]:
        del _STORE[key]


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = np.ascontiguousarray(a).reshape(-1).view(np.uint8), np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    return bool(np.array_equal(a[:256], b[:256]) and np.array_equal(a, b))


def keep_out(originals: onnx.ModelProto) -> Callable[[str, Any, int], Optional[onnx.TensorProto]]:
    """For the exporter (`export_relax`'s `initializer`): a large constant `name` holding `value` (of ONNX type
    `elem`) as a reference, the way `offload` would keep it, without a copy in a TensorProto: a weight of
    `originals` that holds the same bytes (one the rewrite left as it was) is referred to where it is; any other
    value is copied into the store. None for a small constant or a type kept inline."""
    by_type: dict[tuple, list[onnx.TensorProto]] = {}
    for t in references(originals):
        by_type.setdefault((t.data_type, tuple(int(d) for d in t.dims)), []).append(t)

    def make(name: str, value: Any, elem: int) -> Optional[onnx.TensorProto]:
        dt = _np_dtype(elem)
        a = np.asarray(value)
        if dt is None or a.size <= LARGE_ELEMENTS:
            return None
        a = a.astype(dt, copy=False)
        header = onnx.TensorProto(name=name, data_type=elem, dims=a.shape)
        for t in by_type.get((elem, a.shape), ()):
            orig = array(t)
            if _same_bytes(orig, a):
                if _info(t)["location"].startswith(MEM_PREFIX):
                    return store(header, orig)  # the same array under a key of its own (`forget` drops the key)
                r = onnx.TensorProto()
                r.CopyFrom(t)
                r.name = name
                return r
        return store(header, np.array(a, order="C", copy=True))

    return make


def inline(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every reference's values inside it (for TVM's importer; under 2 GB)."""
    if not has_references(model):
        return model
    out = _copy_without_initializers(model)
    for t in model.graph.initializer:
        out.graph.initializer.append(numpy_helper.from_array(np.asarray(array(t)), t.name) if is_reference(t)
                                     else t)
    return out


def as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with each reference a typed graph input instead (shape inference and onnxsim: weights are never
    shape data, and they need not be read)."""
    if not has_references(model):
        return model
    out = _copy_without_initializers(model)
    g = out.graph
    refs = []
    for t in model.graph.initializer:
        if is_reference(t):
            refs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g.initializer.append(t)
    names = {r.name for r in refs}
    inputs = [vi for vi in g.input if vi.name not in names] + refs
    del g.input[:]
    g.input.extend(inputs)
    return out


def ort_initializers(model: onnx.ModelProto) -> tuple[list[str], list[np.ndarray]]:
    """The references' names and values, for ONNX Runtime's SessionOptions.add_external_initializers."""
    refs = references(model)
    return [t.name for t in refs], [np.ascontiguousarray(array(t)) for t in refs]


def _copy_without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of everything but the main graph's initializers (which are what is large)."""
    out = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            _copy_field(out, fd, value)
    for fd, value in model.graph.ListFields():
        if fd.name != "initializer":
            _copy_field(out.graph, fd, value)
    return out


def _copy_field(target: Any, fd: Any, value: Any) -> None:
    if _repeated(fd):
        getattr(target, fd.name).extend(value)
    elif fd.message_type is not None:
        getattr(target, fd.name).CopyFrom(value)
    else:
        setattr(target, fd.name, value)


def _repeated(fd: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    return fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == F.LABEL_REPEATED


# ----------------------------------------------------------------------------------------- reading
def _data_file(base_dir: str, location: str, name: str, label: str) -> str:
    """The absolute path of a tensor's data file, checked the way ONNX checks it."""
    if not location:
        raise WeightsError(f"{label}: initializer '{name}' is stored outside the model but names no data file")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise WeightsError(f"{label}: initializer '{name}' names the absolute data location '{location}'; ONNX "
                           "allows only files inside the model's folder")
    norm = os.path.normpath(location)
    if norm == ".." or norm.startswith(".." + os.sep):
        raise WeightsError(f"{label}: initializer '{name}' names the data location '{location}', outside the "
                           "model's folder; ONNX allows only files inside it")
    path = os.path.join(base_dir, norm)
    if not os.path.exists(path):
        raise WeightsError(f"{label}: initializer '{name}' is stored in '{location}', which is not next to the "
                           "model")
    if not os.path.isfile(path):
        raise WeightsError(f"{label}: initializer '{name}' is stored in '{location}', which is not a regular file")
    if os.path.islink(path) and not os.path.realpath(path).startswith(os.path.realpath(base_dir) + os.sep):
        raise WeightsError(f"{label}: initializer '{name}' is stored in '{location}', a link that leads outside "
                           "the model's folder")
    return os.path.realpath(path)


def _resolve_one(t: onnx.TensorProto, base_dir: str, label: str, keep_reference: bool) -> None:
    info = _info(t)
    path = _data_file(base_dir, info.get("location", ""), t.name, label)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise WeightsError(f"{label}: initializer '{t.name}' has a bad offset or length in its external data"
                           ) from None
    size = os.path.getsize(path)
    if length is None:
        length = size - offset
    want = nbytes(t) if _np_dtype(t.data_type) is not None else length
    if offset < 0 or length < 0 or offset + length > size or want != length:
        raise WeightsError(f"{label}: initializer '{t.name}' wants bytes {offset}..{offset + length} of "
                           f"'{info.get('location')}' ({size} bytes)"
                           + (f", for {want} bytes of data" if want != length else ""))
    if keep_reference:
        t.CopyFrom(_reference(t, path, offset, length))
        return
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT
    t.raw_data = data


def resolve(model: onnx.ModelProto, base_dir: str, label: str) -> onnx.ModelProto:
    """`model` with its external data checked and resolved against `base_dir` (in place): small tensors read in,
    large ones kept as references to their file. If its inline large tensors hold more than OFFLOAD_INLINE_BYTES,
    a new model with those in the store (`offload`)."""
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            _resolve_one(t, base_dir, label, keep_reference=_large(t))
    for t in tensors(model):  # subgraphs' initializers and Constant values: read in
        if t.data_location == onnx.TensorProto.EXTERNAL and not is_reference(t):
            _resolve_one(t, base_dir, label, keep_reference=False)
    inline_large = sum(nbytes(t) for t in model.graph.initializer if not is_reference(t) and _large(t))
    return offload(model) if inline_large > OFFLOAD_INLINE_BYTES else model


# ----------------------------------------------------------------------------------------- writing
def has_data_files(model: onnx.ModelProto) -> bool:
    """Whether the model was read with external data (some weight is a reference to a data file)."""
    return any(not _info(t)["location"].startswith(MEM_PREFIX) for t in references(model))


def data_files(model: onnx.ModelProto) -> list[str]:
    """The data files the model's weights are read from (absolute paths, as `resolve` found them)."""
    return sorted({_info(t)["location"] for t in references(model)
                   if not _info(t)["location"].startswith(MEM_PREFIX)})


def size(model: onnx.ModelProto) -> int:
    """Bytes of the model with its weights inside."""
    return model.ByteSize() + sum(nbytes(t) for t in references(model))


def external_wanted(model: onnx.ModelProto, mode: str, source_has_data: bool = False) -> bool:
    """Whether `model` is written with a data file: always; never; auto: when the model it came from had
    external data (`source_has_data`) or it is over EXTERNAL_AUTO_BYTES."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    return source_has_data or has_data_files(model) or size(model) > EXTERNAL_AUTO_BYTES


def data_path(path: str) -> str:
    """The data file written with the model at `path`: its name plus '.data', in its folder."""
    return os.fspath(path) + ".data"


def save(model: onnx.ModelProto, path: str, mode: str = "auto", source_has_data: bool = False,
         write: Optional[Callable[[str, Callable[[Any], None]], None]] = None,
         progress: Any = None) -> Optional[str]:
    """Write `model` to `path` (atomically), its large tensors in one data file beside it (`data_path`) when
    `external_wanted`; returns the data file's path or None. Every tensor is read and written one at a time."""
    if mode not in EXTERNAL_MODES:
        raise WeightsError(f"unknown external data mode '{mode}' (one of {', '.join(EXTERNAL_MODES)})")
    if not external_wanted(model, mode, source_has_data):
        total = size(model)
        if total >= PROTOBUF_LIMIT:
            raise _errors.SettingsError(f"the model is {total / (1 << 30):.2f} GB, over protobuf's 2 GB limit "
                                        "for one file: write it with --external-data auto")
    from ..fileio import atomic_write

    write = write or atomic_write
    if not external_wanted(model, mode, source_has_data):
        whole = inline(model)
        write(path, lambda f: f.write(whole.SerializeToString()))
        return None
    dpath = data_path(path)
    location = os.path.basename(dpath)
    headers: list[onnx.TensorProto] = []
    tensors_out = list(model.graph.initializer)

    def write_data(f: Any) -> None:
        offset = 0
        for t in tensors_out:
            if not is_reference(t) and (nbytes(t) < INLINE_BYTES or _np_dtype(t.data_type) is None
                                        or t.data_location == onnx.TensorProto.EXTERNAL):
                headers.append(t)
                continue
            value = np.ascontiguousarray(array(t))
            pad = (-offset) % ALIGN
            f.write(b"\0" * pad)
            offset += pad
            f.write(memoryview(value.reshape(-1)).cast("B"))
            headers.append(_reference(t, location, offset, value.nbytes))
            offset += value.nbytes
            del value
            if progress is not None:
                progress.update()

    existed = os.path.exists(dpath)
    write(dpath, write_data)
    out = _copy_without_initializers(model)
    out.graph.initializer.extend(headers)
    try:
        write(path, lambda f: f.write(out.SerializeToString()))
    except BaseException:
        if not existed:
            try:
                os.unlink(dpath)
            except OSError:
                pass
        raise
    return dpath


__all__ = ["WeightsError", "array", "as_inputs", "data_files", "data_path", "external_wanted", "forget", "has_data_files", "has_references", "inline",
           "is_reference", "keep_out", "shared", "offload", "ort_initializers", "mark", "references", "release_since", "resolve", "save", "store"]
