"""A built TVM library on disk with its signature file beside it (`LIB.inputs.json`): written together, loaded
only when they agree.

A compiled `.so` is code: loading it runs its constructors, as with any shared library. So `load_library` opens
only a library that `write_library` wrote: its signature file names the library's size and sha256, and both must
match the file (and its ELF header must be whole) before `dlopen`. A truncated, replaced or foreign file is refused
with one line, never loaded. The signature also lists the inputs (names, dims, dtypes), so samples are fed by name.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from .. import errors as _errors
from .samples import InputSpec, SampleError

log = logging.getLogger(__name__)

SIGNATURE_FORMAT = "taso-tvm-library/1"
SIGNATURE_SUFFIX = ".inputs.json"
MAX_SIGNATURE_BYTES = 1 << 20
ELF_MAGIC = b"\x7fELF"
ELF_HEADER_BYTES = 64


class LibraryError(_errors.InputError, ValueError):
    """A library file that is missing, not one `compile` wrote, or changed since."""


@dataclass
class Signature:
    """What `compile` wrote beside a library: its inputs, the target it was built for, its size and digest."""

    inputs: list[InputSpec]
    target: str = ""
    size: int = 0
    sha256: str = ""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": SIGNATURE_FORMAT, "target": self.target, "size": self.size,
                           "sha256": self.sha256, "inputs": [s.to_json() for s in self.inputs], **self.extra},
                          indent=1)


def signature_path(library_path: str) -> str:
    """The signature file written beside a library."""
    return os.fspath(library_path) + SIGNATURE_SUFFIX


def _digest(path: str) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def write_library(ex: Any, path: str, signature: Signature) -> Signature:
    """Export `ex` (a `tvm.compile` result) to `path` and its signature beside it. Both are written to temporary
    files first; the library is renamed into place, then the signature: an interruption leaves the old pair, or a
    new library whose old signature no longer matches (refused on load), never a library that loads unchecked."""
    from ..fileio import atomic_write_text, new_file_mode

    folder, base = os.path.split(os.path.abspath(path))
    root, ext = os.path.splitext(base)
    tmp = os.path.join(folder, f".{root}.{os.getpid()}.part{ext or '.so'}")
    try:
        ex.export_library(tmp)
        os.chmod(tmp, new_file_mode(path) | (stat.S_IXUSR if ext == ".so" else 0))
        signature.size, signature.sha256 = _digest(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    atomic_write_text(signature_path(path), signature.to_json())
    return signature


def read_signature(library_path: str) -> Signature:
    """The signature beside `library_path`, parsed and checked as data (size capped before reading)."""
    from ..safe_read import UnsafeFileError, read_json

    path = signature_path(library_path)
    if not os.path.lexists(path):
        raise LibraryError(f"no signature file beside '{library_path}' ({path}): only a library that "
                           "`taso-tvm compile` wrote is loaded (a .so runs code when loaded)")
    try:
        data = read_json(path, "signature file", MAX_SIGNATURE_BYTES)
    except UnsafeFileError as e:
        raise LibraryError(str(e)) from None
    if not isinstance(data, dict) or data.get("format") != SIGNATURE_FORMAT:
        raise LibraryError(f"signature file '{path}' is not a {SIGNATURE_FORMAT} signature (written by another "
                           "version of taso-tvm? compile the model again)")
    size, digest = data.get("size"), data.get("sha256")
    if not isinstance(size, int) or not isinstance(digest, str) or not isinstance(data.get("inputs"), list):
        raise LibraryError(f"signature file '{path}' lacks the library's size, sha256 or inputs")
    try:
        inputs = [InputSpec.from_json(d) for d in data["inputs"]]
    except SampleError as e:
        raise LibraryError(f"signature file '{path}': {e}") from None
    extra = {k: v for k, v in data.items() if k not in ("format", "target", "size", "sha256", "inputs")}
    return Signature(inputs, str(data.get("target", "")), size, digest, extra)


def check_library(path: str) -> Signature:
    """The library's signature, after checking that `path` is a regular file with a whole ELF header whose size
    and sha256 are the ones its signature names."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise LibraryError(f"cannot read '{path}': no such file") from None
    except OSError as e:
        raise LibraryError(f"cannot read '{path}': {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LibraryError(f"'{path}' is not a regular file")
    with open(path, "rb") as f:
        head = f.read(ELF_HEADER_BYTES)
    if len(head) < ELF_HEADER_BYTES or head[:4] != ELF_MAGIC or head[4] not in (1, 2):
        raise LibraryError(f"'{path}' is not a TVM library (no ELF header)")
    sig = read_signature(path)
    if st.st_size != sig.size:
        raise LibraryError(f"'{path}' is {st.st_size} bytes, its signature says {sig.size}: the file was "
                           "truncated or replaced; not loaded")
    if _digest(path)[1] != sig.sha256:
        raise LibraryError(f"'{path}' does not match the sha256 in its signature: the file changed since "
                           "`compile` wrote it; not loaded")
    return sig


def load_library(path: str) -> tuple[Any, Signature]:
    """(tvm runtime Module, Signature) of a library `write_library` wrote, checked by `check_library` first."""
    import tvm

    from ..quiet import quiet

    sig = check_library(path)
    try:
        with quiet():  # TVM logs a "Scope Loaded" warning per function of a Relax executable it loads
            return tvm.runtime.load_module(path), sig
    except Exception as e:  # noqa: BLE001  (TVM raises several types for a library it cannot load)
        raise LibraryError(f"'{path}' is not a TVM module: {str(e).strip().splitlines()[-1][:200]}") from None

