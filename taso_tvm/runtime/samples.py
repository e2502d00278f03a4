"""Sample inputs: read from an .npz as data (no pickles, size checked before reading) and matched to a model's
inputs by name, never by position: a missing or extra name, a wrong dtype or a wrong shape is bad input naming it.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import numpy as np

from .. import errors as _errors

MAX_SAMPLE_BYTES = 16 << 30  # arrays in one sample file, uncompressed (a zip member can claim any size)

Dim = Union[int, str]  # a fixed size, or a symbolic dim's name (any size)


class SampleError(_errors.InputError, ValueError):
    """A sample file that cannot be read, or whose arrays do not fit the model's inputs."""


@dataclass(frozen=True)
class InputSpec:
    """One input of a model or library: its name, dims (int, or a symbolic dim's name) and NumPy dtype name."""

    name: str
    dims: tuple
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.dims), "dtype": self.dtype}

    @staticmethod
    def from_json(d: Any) -> "InputSpec":
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("shape"), list) \
                or not isinstance(d.get("dtype"), str) \
                or not all(isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool) and x >= 0)
                           for x in d["shape"]):
            raise SampleError(f"not an input description: {str(d)[:80]}")
        try:
            np.dtype(d["dtype"])
        except TypeError:
            raise SampleError(f"input '{d['name']}': unknown dtype '{d['dtype'][:40]}'") from None
        return InputSpec(d["name"], tuple(d["shape"]), d["dtype"])


def onnx_input_specs(model: Any) -> list[InputSpec]:
    """The run-time inputs of an ONNX model (graph inputs that are not initializers), in graph order."""
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        except (KeyError, ValueError, TypeError):
            dtype = "?"
        specs.append(InputSpec(vi.name, dims, dtype))
    return specs


def read_sample(path: str) -> dict[str, np.ndarray]:
    """The named arrays of an .npz file, checked first: a regular file, a zip of .npy members, at most
    MAX_SAMPLE_BYTES uncompressed; object arrays (pickles) are refused."""
    from ..safe_read import UnsafeFileError, check_regular_file

    label = f"inputs '{path}'"
    try:
        check_regular_file(path, "inputs")
    except UnsafeFileError as e:
        raise SampleError(str(e)) from None
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise SampleError(f"cannot read {label}: not an .npz of arrays named like the model's inputs ({e})"
                          ) from None
    if sum(m.file_size for m in members) > MAX_SAMPLE_BYTES:
        raise SampleError(f"cannot read {label}: its arrays hold over {MAX_SAMPLE_BYTES >> 30} GiB")
    out = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            for name in data.files:
                out[name] = np.asarray(data[name])
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SampleError(f"cannot read {label}: {first}") from None
    return out


def match_sample(sample: Mapping[str, np.ndarray], specs: Sequence[InputSpec], label: str) -> dict:
    """`sample`'s arrays in the order of `specs`, each checked against its input by name: every input present,
    no other name, the same dtype, the same rank and the same size on every fixed dim."""
    names = [s.name for s in specs]
    missing = [n for n in names if n not in sample]
    extra = [n for n in sample if n not in names]
    if missing:
        raise SampleError(f"{label}: no array named '{missing[0]}' (the inputs are {', '.join(names)}; the "
                          f"sample has {', '.join(sample) or 'none'})")
    if extra:
        raise SampleError(f"{label}: array '{extra[0]}' is not an input (the inputs are {', '.join(names)})")
    out: dict = {}
    bound: dict = {}  # symbolic dim -> (size, the input that fixed it)
    for spec in specs:
        value = np.asarray(sample[spec.name])
        if spec.dtype != "?" and value.dtype != np.dtype(spec.dtype):
            raise SampleError(f"{label}: input '{spec.name}' is {spec.dtype}, the sample's array is {value.dtype}")
        fixed_ok = all(not isinstance(d, int) or d == v for d, v in zip(spec.dims, value.shape))
        if value.ndim != len(spec.dims) or not fixed_ok:
            want = "[" + ", ".join(str(d) for d in spec.dims) + "]"
            raise SampleError(f"{label}: input '{spec.name}' has shape {want}, the sample's array "
                              f"{list(value.shape)}")
        for d, v in zip(spec.dims, value.shape):
            if isinstance(d, str) and d != "?":
                size, first = bound.setdefault(d, (v, spec.name))
                if size != v:
                    raise SampleError(f"{label}: dim '{d}' is {size} in input '{first}' but {v} in input "
                                      f"'{spec.name}'")
        out[spec.name] = value
    return out
