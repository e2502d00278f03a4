"""Build CUDA libraries on a machine without a GPU that run on a GPU machine with its driver alone.

TVM 0.27 compiles CUDA kernels (nvcc, `TVM_CUDA_COMPILE_MODE=nvcc`) while building only when its CUDA runtime
library (libtvm_runtime_cuda.so) is loaded. That library links the driver (libcuda.so.1), so on a machine without
one TVM skips it silently and a build keeps the kernels as CUDA source, to be compiled when the library is loaded:
the GPU machine would then need nvcc or NVRTC. `enable_cuda_codegen()` loads the real driver when there is one,
else a stand-in (a few driver entry points that all answer "no device", compiled here with the system C compiler),
and then TVM's CUDA runtime library; builds made after it hold cubins. `tvm.cuda(0).exist` stays False.

Compile inside the target's scope (`with target: tvm.compile(...)`): nvcc takes the architecture from the current
target when there is no GPU to ask.

This module imports nothing from the project.
"""
from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

DRIVER = "libcuda.so.1"
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


class CudaBuildError(RuntimeError):
    """TVM's CUDA code generation cannot be enabled here; one line."""


def _standin_path() -> Path:
    return Path(tempfile.gettempdir()) / f"taso_tvm_cuda_standin_{os.getuid()}" / DRIVER


def _build_standin(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
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
        path = _standin_path()
        if not path.is_file():
            _build_standin(path)
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
