"""Build CUDA libraries on a machine without a GPU that run on a GPU machine with its driver alone.

TVM 0.27 compiles CUDA kernels (nvcc, `TVM_CUDA_COMPILE_MODE=nvcc`) while building only when its CUDA runtime
library (libtvm_runtime_cuda.so) is loaded. That library links the driver (libcuda.so.1), so on a machine without
one TVM skips it silently and a build keeps the kernels as CUDA source, to be compiled when the library is loaded:
the GPU machine would then need nvcc or NVRTC. `enable_cuda_codegen()` loads the real driver when there is one,
else a stand-in (a few driver entry points that all answer "no device", compiled here with the system C compiler),
and then TVM's CUDA runtime library; builds made after it hold cubins. `tvm.cuda(0).exist` stays False.

Compile inside the target's scope (`with target: tvm.compile(...)`): nvcc takes the architecture from the current
target when there is no GPU to ask.

The stand-in is built in a private folder (`standin_dir()`, mode 0700) and loaded only when the folder and the
library are this user's alone: a library is code, and one that another user could have placed is never loaded.

This module imports nothing from the project but `errors`.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import stat
import subprocess
from pathlib import Path
from typing import Optional

from .. import errors as _errors

log = logging.getLogger(__name__)

DRIVER = "libcuda.so.1"
STANDIN_FOLDER = "cuda-standin"
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE
# the driver entry points libtvm_runtime_cuda.so links; none is called while building
_STANDIN_C = f"""
static const char *msg = "no CUDA driver on this machine (build-time stand-in)";
int cuGetErrorName(int e, const char **s) {{ (void)e; if (s) *s = msg; return 0; }}
int cuGetErrorString(int e, const char **s) {{ (void)e; if (s) *s = msg; return 0; }}
int cuDeviceGetName(void) {{ return {NO_DEVICE}; }}
int cuFuncSetAttribute(void) {{ return {NO_DEVICE}; }}
int cuLaunchKernelEx(void) {{ return {NO_DEVICE}; }}
int cuModuleGetFunction(void) {{ return {NO_DEVICE}; }}
int cuModuleLoadData(void) {{ return {NO_DEVICE}; }}
int cuModuleUnload(void) {{ return {NO_DEVICE}; }}
int cuTensorMapEncodeTiled(void) {{ return {NO_DEVICE}; }}
"""
_state: dict = {}


class CudaBuildError(_errors.TasoError, RuntimeError):
    """TVM's CUDA code generation cannot be enabled here; one line."""


def standin_dir() -> Path:
    """The private folder of the driver stand-in: $XDG_CACHE_HOME/taso_tvm/cuda-standin (else under ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "taso_tvm" / STANDIN_FOLDER


def _not_private(folder: Path, library: Path) -> str:
    """Why `folder` and `library` are not ours alone ('' when they are): the folder a real folder of this user with
    mode 0700 in a parent others cannot write to (unless sticky), the library (if there) a regular file of this
    user that no one else can write."""
    uid = os.getuid()
    try:
        st = os.lstat(folder)
        parent = os.stat(folder.parent)
    except OSError as e:
        return f"'{folder}' cannot be checked: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"'{folder}' is not a folder (a link or a file)"
    if st.st_uid != uid:
        return f"'{folder}' belongs to uid {st.st_uid}, not to this user ({uid})"
    if stat.S_IMODE(st.st_mode) != 0o700:
        return f"'{folder}' has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return f"'{folder.parent}' can be written by other users"
    try:
        lib = os.lstat(library)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return f"'{library}' cannot be checked: {e.strerror}"
    if not stat.S_ISREG(lib.st_mode):
        return f"'{library}' is not a regular file (a link or a device)"
    if lib.st_uid != uid:
        return f"'{library}' belongs to uid {lib.st_uid}, not to this user ({uid})"
    if lib.st_mode & 0o022:
        return f"'{library}' can be written by other users (mode {stat.S_IMODE(lib.st_mode):04o})"
    return ""


def standin_library(folder: Optional[Path] = None) -> Path:
    """The driver stand-in's path in `folder` (default `standin_dir()`), built there if missing. The folder is made
    with mode 0700; before the library is used, the folder and the library must be this user's alone, else
    CudaBuildError says why (a library someone else could have put there is never loaded)."""
    folder = Path(folder) if folder is not None else standin_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    path = folder / DRIVER
    why = _not_private(folder, path)
    if why:
        raise CudaBuildError(f"refusing the CUDA driver stand-in: {why}; remove it or fix its owner and mode")
    if not path.is_file():
        _build_standin(path)
    return path


def _build_standin(path: Path) -> None:
    src = path.with_name("standin.c")
    src.write_text(_STANDIN_C)
    tmp = path.with_name(f"{DRIVER}.{os.getpid()}.tmp")
    cc = os.environ.get("CC", "gcc")
    try:
        subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{DRIVER}", "-o", str(tmp), str(src)],
                       check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise CudaBuildError(f"cannot build the CUDA driver stand-in with {cc}: "
                             f"{(detail.strip().splitlines() or ['failed'])[-1]}") from None
    tmp.replace(path)  # atomic: concurrent builders see a whole library or none


def enable_cuda_codegen() -> str:
    """Make TVM's CUDA runtime library loaded in this process (once); returns what was loaded: "loaded" (TVM had
    it), "driver" (this machine's driver) or "stand-in"."""
    if "how" in _state:
        return _state["how"]
    import tvm
    from tvm_ffi.libinfo import load_lib_ctypes

    libs = tvm.base._LOADED_LIBS
    if "tvm_runtime_cuda" in libs:
        _state["how"] = "loaded"
        return "loaded"
    how: Optional[str] = None
    try:
        ctypes.CDLL(DRIVER, mode=ctypes.RTLD_GLOBAL)
        how = "driver"
    except OSError:
        path = standin_library()
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)  # satisfies libtvm_runtime_cuda.so's NEEDED by soname
        how = "stand-in"
    runtime_dir = Path(libs["tvm_runtime"]._name).resolve().parent
    try:
        libs["tvm_runtime_cuda"] = load_lib_ctypes(package="tvm", target_name="tvm_runtime_cuda",
                                                   extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL")
    except (OSError, RuntimeError) as e:
        raise CudaBuildError(f"TVM's CUDA runtime library does not load: {str(e).splitlines()[0]}") from None
    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")  # NVRTC needs the cuda-bindings package
    log.info("CUDA code generation enabled (%s)", how)
    _state["how"] = how
    return how


KNOWN_FORMATS = ("cubin", "fatbin", "ptx", "cuda")  # "cuda": CUDA source, compiled only when the library loads
_KEY = len(b"cuda").to_bytes(8, "little") + b"cuda"


def device_code_formats(library: Path) -> set[str]:
    """The formats of the CUDA modules an exported library holds ("cubin", "fatbin", "ptx" or "cuda" for source),
    read from its serialized module tree (type key "cuda", blob length, format string)."""
    data = Path(library).read_bytes()
    found, i = set(), data.find(_KEY)
    while i >= 0:
        at = i + len(_KEY) + 8  # past the blob's length
        n = int.from_bytes(data[at:at + 8], "little")
        if 0 < n <= 8:
            fmt = data[at + 8:at + 8 + n].decode("ascii", "replace")
            if fmt in KNOWN_FORMATS:
                found.add(fmt)
        i = data.find(_KEY, i + 1)
    return found
