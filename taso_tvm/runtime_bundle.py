"""What running a TVM-built library needs, copied to a folder that travels to a machine without TVM's compiler.

The folder holds the `tvm` Python package without its compiler library (libtvm_compiler.so, ~260 MB) and without
the parts only compiling uses, and `tvm_ffi`. On the other machine (same OS and Python version) put the folder
first on PYTHONPATH and set `TVM_USE_RUNTIME_LIB=1`: `import tvm` then loads libtvm_runtime.so only, and
`tvm.runtime.load_module` + `tvm.runtime.vm.VirtualMachine` run exported libraries. Runtime-only mode loads no
device backend: for cuda, load tvm/lib/libtvm_runtime_cuda.so first (the device scripts do).

This module imports nothing from the project (the package and the cost package both use it).
"""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

# parts of the two packages that a runtime-only `import tvm` never loads: the compiler library and what only the
# compiler uses (Relax, TIR schedules, TOPI, the web runtime), C++ sources and headers, and bundled third-party code
# (CUTLASS sources). tvm_ffi's libtvm_ffi_testing.so stays: its core extension links against it.
LEFT_OUT = ("__pycache__", "libtvm_compiler.so", "3rdparty", "src", "include", "cython", "web", "relax", "s_tir",
            "topi", "testing", "*.pyi", "*.h", "*.cc")
PACKAGES = ("tvm", "tvm_ffi")
CUDA_LIB = "libtvm_runtime_cuda.so"
DRIVER_LIBS = ("libcuda.so",)  # the GPU driver's own library: the device's, never carried


def package_dir(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package '{name}' is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def cuda_runtime_libs() -> list[Path]:
    """The CUDA toolkit libraries TVM's CUDA runtime links (libcudart.so.N), as this machine resolves them: they
    travel next to it (its RUNPATH is $ORIGIN), so the device needs only its driver (libcuda.so.1)."""
    lib = package_dir("tvm") / "lib" / CUDA_LIB
    if not lib.is_file():
        return []
    try:
        text = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in text.splitlines():
        name, _, rest = line.strip().partition(" => ")
        path = rest.split(" (")[0].strip()
        if name.startswith("libcu") and not name.startswith(DRIVER_LIBS) and path.startswith("/"):
            out.append(Path(path))
    return out


def copy_runtime(dest: Path, cuda: bool = False) -> list[Path]:
    """Copy the runtime-only subset of tvm and tvm_ffi into `dest` (dest/tvm, dest/tvm_ffi), with `cuda` also the
    CUDA toolkit libraries TVM's CUDA runtime links; returns the files."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(package_dir(name), target, ignore=shutil.ignore_patterns(*LEFT_OUT))
    if cuda:
        for lib in cuda_runtime_libs():
            shutil.copyfile(lib, dest / "tvm" / "lib" / lib.name)
    return sorted(p for p in dest.rglob("*") if p.is_file())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
