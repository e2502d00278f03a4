"""What running a TVM-built library needs, copied to a folder that travels to a machine without TVM's compiler.

The folder holds the `tvm` Python package without its compiler library (libtvm_compiler.so, ~260 MB) and without
the parts only compiling uses, `tvm_ffi` and typing_extensions.py. On the other machine (same OS; the Python version
this one has, or the one named by `python`) put the folder first on PYTHONPATH and set `TVM_USE_RUNTIME_LIB=1`:
`import tvm` then loads libtvm_runtime.so only, and `tvm.runtime.load_module` + `tvm.runtime.vm.VirtualMachine` run
exported libraries. Runtime-only mode loads no device backend: for cuda, load tvm/lib/libtvm_runtime_cuda.so first
(the device scripts do).

For another Python version (`copy_runtime(..., python="3.12")`), a package holding CPython-version-specific
extension modules (`*.cpython-311-*.so`: tvm_ffi's core; TVM 0.27's own wheel is `py3-none` and has none) is taken
from its released wheel for that version instead (`pip download`, or a wheel already in `wheel_dir`); the rest of
the folder is the same for every Python.

This module imports nothing from the project (the package and the cost package both use it).
"""
from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

# parts of the two packages that a runtime-only `import tvm` never loads: the compiler library and what only the
# compiler uses (Relax, TIR schedules, TOPI, the web runtime), C++ sources and headers, and bundled third-party code
# (CUTLASS sources). tvm_ffi's libtvm_ffi_testing.so stays: its core extension links against it.
LEFT_OUT = ("__pycache__", "libtvm_compiler.so", "3rdparty", "src", "include", "cython", "web", "relax", "s_tir",
            "topi", "testing", "*.pyi", "*.h", "*.cc")
PACKAGES = ("tvm", "tvm_ffi")
# pure-Python modules (one file each, any Python 3) that `import tvm_ffi` needs and a bare Python with numpy lacks
MODULES = ("typing_extensions",)
CUDA_LIB = "libtvm_runtime_cuda.so"
DRIVER_LIBS = ("libcuda.so",)  # the GPU driver's own library: the device's, never carried
# the device's platform for wheels of another Python (glibc 2.28 or later: Ubuntu 20.04 on)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


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


def this_python() -> str:
    """This interpreter's version as MAJOR.MINOR."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def python_version(text: str) -> str:
    """'3.12' or '3.12.3' as MAJOR.MINOR; ValueError for anything else."""
    m = re.fullmatch(r"\s*(3)\.(\d+)(?:\.\d+)?\s*", str(text))
    if not m:
        raise ValueError(f"not a Python 3 version: '{text}' (expected e.g. 3.12)")
    return f"{m[1]}.{m[2]}"


def version_specific(pkg: Path) -> list[Path]:
    """The package's extension modules built for one CPython version (NAME.cpython-3XY-PLATFORM.so)."""
    return sorted(p for p in Path(pkg).rglob("*.cpython-*.so") if "__pycache__" not in p.parts)


def distribution(name: str) -> tuple[str, str]:
    """The installed distribution (name, version) that provides the import package `name`."""
    dists = importlib.metadata.packages_distributions().get(name) or []
    if not dists:
        raise RuntimeError(f"no installed distribution provides '{name}'")
    return dists[0], importlib.metadata.version(dists[0])


def fetch_wheel(dist: str, version: str, python: str, wheel_dir: Path) -> Path:
    """The binary wheel of `dist==version` for CPython `python` on x86-64 Linux: one already in `wheel_dir`, or
    downloaded there with pip."""
    wheel_dir = Path(wheel_dir)
    tag = "cp" + python.replace(".", "")
    pattern = f"{re.sub(r'[-_.]+', '_', dist)}-{version}-{tag}-{tag}-*.whl"
    found = sorted(wheel_dir.glob(pattern))
    if not found:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", *(a for p in WHEEL_PLATFORMS for a in ("--platform", p)),
               "-d", str(wheel_dir), f"{dist}=={version}"]
        log.info("downloading %s==%s for Python %s into %s", dist, version, python, wheel_dir)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            raise RuntimeError(f"pip download of {dist}=={version} for Python {python} failed: {e}") from e
        found = sorted(wheel_dir.glob(pattern))
        if r.returncode != 0 or not found:
            why = (r.stderr.strip().splitlines() or ["no wheel for that Python"])[-1]
            raise RuntimeError(f"no {dist}=={version} wheel for Python {python} (put one into {wheel_dir}): {why}")
    return found[-1]


def unpack_package(wheel: Path, name: str, dest: Path) -> list[Path]:
    """Extract the import package `name` from `wheel` into `dest` (dest/name), leaving out what LEFT_OUT names,
    with the wheel's file modes; returns the files."""
    out = []
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if (parts[0] != name or info.is_dir() or ".." in parts
                    or any(fnmatch.fnmatch(p, pat) for p in parts for pat in LEFT_OUT)):
                continue
            path = Path(dest).joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(path, "wb") as f:
                shutil.copyfileobj(src, f)
            mode = (info.external_attr >> 16) & 0o777
            path.chmod(mode or 0o644)
            out.append(path)
    if not out:
        raise RuntimeError(f"{wheel.name} holds no package '{name}'")
    return out


def copy_package(name: str, dest: Path, python: str, wheel_dir: Optional[Path]) -> None:
    """The runtime-only subset of package `name` into dest/name, for CPython `python` (MAJOR.MINOR)."""
    src, target = package_dir(name), Path(dest) / name
    if target.exists():
        shutil.rmtree(target)
    specific = version_specific(src)
    if python == this_python() or not specific:
        shutil.copytree(src, target, ignore=shutil.ignore_patterns(*LEFT_OUT))
        return
    dist, version = distribution(name)
    wheel = fetch_wheel(dist, version, python, wheel_dir or Path.home() / ".cache" / "taso_tvm" / "wheels")
    unpack_package(wheel, name, dest)
    got = version_specific(target)
    if len(got) != len(specific) or any(f".cpython-{python.replace('.', '')}-" not in p.name for p in got):
        raise RuntimeError(f"{wheel.name}: its extension modules ({', '.join(p.name for p in got) or 'none'}) are "
                           f"not those of {name} for Python {python}")
    log.info("%s: taken from %s (extensions: %s)", name, wheel.name, ", ".join(p.name for p in got))


def copy_runtime(dest: Path, cuda: bool = False, python: Optional[str] = None,
                 wheel_dir: Optional[Path] = None) -> list[Path]:
    """Copy the runtime-only subset of tvm and tvm_ffi into `dest` (dest/tvm, dest/tvm_ffi) with the pure-Python
    modules they import (MODULES), with `cuda` also the CUDA toolkit libraries TVM's CUDA runtime links; returns the
    files. `python` (e.g. "3.12"; default this one's) is the version that will run it: a package with extension
    modules for another version comes from its wheel for that one (found in or downloaded to `wheel_dir`, default
    ~/.cache/taso_tvm/wheels)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    python = python_version(python) if python else this_python()
    for name in PACKAGES:
        copy_package(name, dest, python, wheel_dir)
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise RuntimeError(f"module '{name}' (needed by tvm_ffi) is not installed as a Python file")
        shutil.copyfile(spec.origin, dest / f"{name}.py")
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
