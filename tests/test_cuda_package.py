"""benchmarks/cuda: the package that carries built models to a GPU machine without TVM's compiler, its dry run on
the CPU in TVM's runtime-only mode, and the kernel timings exchange (export here, time there, import here)."""
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from taso_tvm.cli.cost import main as cost_main
from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.cost.kernel_exchange import KernelExchangeError, import_timings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "benchmarks" / "cuda" / "package.py"
LIMIT = 64 * 2**20
SMALL = json.dumps({"seed_example": {"channels": 8, "size": 8}})


def package_module():
    """benchmarks/cuda/package.py as a module, run in this process (TVM is imported once)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cuda_package", PACKAGE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def package_main(argv: list) -> int:
    return package_module().main(argv)


def runtime_only(pkg: Path, *cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a package script the way the GPU machine does: the carried TVM first on the path, runtime library only."""
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(pkg / "runtime"), TVM_NUM_THREADS="2")
    return subprocess.run([sys.executable, *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("cuda_pkg")
    out = base / "pkg"
    assert package_main(["--out", str(out), "--models", "seed_example", "--model-kwargs", SMALL, "--target", "llvm",
                         "--kernels", "--cost-cache", str(base / "costs.sqlite")]) == 0
    return out


@pytest.fixture(scope="module")
def device_run(pkg, tmp_path_factory) -> tuple:
    """device_check.sh run as the GPU machine would (here on the CPU: the package is built for llvm)."""
    out = tmp_path_factory.mktemp("device_out")
    env = dict(os.environ, OUT=str(out), TVM_NUM_THREADS="2",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # python3 with numpy
    env.pop("PYTHONPATH", None)
    r = subprocess.run(["sh", str(pkg / "device_check.sh"), "--time-cap", "1", "--max-rounds", "3"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    return r, out


def test_package_holds_what_running_needs_and_no_compiler(pkg):
    manifest = json.loads((pkg / "manifest.json").read_text())
    files = {f["path"]: f for f in manifest["files"]}
    for need in ("run_on_device.py", "device_check.sh", "timing.py", "runtime/tvm/lib/libtvm_runtime.so",
                 "runtime/tvm_ffi/lib/libtvm_ffi.so", "runtime/typing_extensions.py",
                 "models/seed_example/original.so",
                 "models/seed_example/optimized.so", "models/seed_example/inputs.npz",
                 "models/seed_example/reference.npz", "kernels/kernels.json", "kernels/time_kernels.py"):
        assert need in files and (pkg / need).is_file(), need
    on_disk = [p for p in pkg.rglob("*") if p.is_file()]
    assert not [p for p in on_disk if "libtvm_compiler" in p.name]
    total = sum(p.stat().st_size for p in on_disk)
    assert total < LIMIT
    assert manifest["total_bytes"] == total - (pkg / "manifest.json").stat().st_size
    (m,) = manifest["models"]
    assert m["name"] == "seed_example" and m["kwargs"] == {"channels": 8, "size": 8}
    assert {"cost_before_ms", "cost_after_ms", "rules_applied"} <= set(m["search"])
    assert manifest["kernels"]["built"] > 0


def test_dry_run_in_runtime_only_mode_matches_the_references(pkg, device_run):
    r, out = device_run
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert f"from {pkg / 'runtime' / 'tvm' / '__init__.py'} (runtime only: True)" in r.stdout
    assert "python 3." in (out / "machine.txt").read_text()
    res = json.loads((out / "results.json").read_text())
    assert res["tvm_file"] == str(pkg / "runtime" / "tvm" / "__init__.py")
    (row,) = res["results"]
    assert row["ok"] and max(row["max_scaled_error"].values()) <= row["rtol"]
    assert row["original_ms"] > 0 and row["optimized_ms"] > 0 and row["rounds"] >= 1
    assert "| seed_example |" in (out / "results.md").read_text()


def test_dry_run_refuses_a_damaged_package(pkg, tmp_path):
    copy = tmp_path / "pkg"
    shutil.copytree(pkg, copy)
    (copy / "models" / "seed_example" / "reference.npz").write_bytes(b"not the reference")
    r = runtime_only(copy, "run_on_device.py", "--time-cap", "1", cwd=copy)
    assert r.returncode == 2 and "models/seed_example/reference.npz changed" in r.stderr


def test_dry_run_refuses_another_python_in_one_line(pkg, tmp_path):
    copy = tmp_path / "pkg"
    shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("runtime"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith("runtime/")]
    (copy / "manifest.json").write_text(json.dumps(dict(manifest, python="3.99.0")))
    r = runtime_only(copy, "run_on_device.py", cwd=copy)
    assert r.returncode == 2 and "made for Python 3.99" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def fake_wheel(folder: Path, python: str, ext_python: str = "") -> Path:
    """A wheel of this tvm_ffi as released for CPython `python`: its core extension renamed for `ext_python`
    (default `python`); no network needed."""
    import zipfile

    from taso_tvm.runtime.bundle import distribution, package_dir

    dist, version = distribution("tvm_ffi")
    tag = "cp" + python.replace(".", "")
    ext = "cpython-" + (ext_python or python).replace(".", "")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist.replace('-', '_')}-{version}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    src = package_dir("tvm_ffi")
    with zipfile.ZipFile(wheel, "w") as z:
        for f in sorted(src.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                name = f"tvm_ffi/{f.relative_to(src)}".replace("cpython-311", ext)
                info = zipfile.ZipInfo(name)
                info.external_attr = (f.stat().st_mode & 0o777) << 16
                z.writestr(info, f.read_bytes())
    return wheel


def test_runtime_for_another_python_takes_tvm_ffi_from_its_wheel(tmp_path):
    from taso_tvm.runtime.bundle import copy_runtime, package_dir, version_specific

    assert not version_specific(package_dir("tvm"))  # TVM's own wheel is py3-none: nothing to replace there
    fake_wheel(tmp_path / "wheels", "3.12")
    files = copy_runtime(tmp_path / "rt", python="3.12.3", wheel_dir=tmp_path / "wheels")
    names = {str(f.relative_to(tmp_path / "rt")) for f in files}
    assert "tvm_ffi/core.cpython-312-x86_64-linux-gnu.so" in names and "typing_extensions.py" in names
    assert not [n for n in names if "cpython-311" in n or "/include/" in n or n.endswith((".h", ".pyi"))]
    assert "tvm/lib/libtvm_runtime.so" in names and "tvm/lib/libtvm_compiler.so" not in names
    assert os.access(tmp_path / "rt" / "tvm_ffi" / "core.cpython-312-x86_64-linux-gnu.so", os.X_OK)
    # a wheel whose extension is for another version is refused, and a version that is not one too
    fake_wheel(tmp_path / "bad", "3.13", ext_python="3.11")
    with pytest.raises(RuntimeError, match="not those of tvm_ffi for Python 3.13"):
        copy_runtime(tmp_path / "rt2", python="3.13", wheel_dir=tmp_path / "bad")
    with pytest.raises(ValueError, match="not a Python 3 version"):
        copy_runtime(tmp_path / "rt3", python="twelve")


def test_package_for_another_python_records_it_and_refuses_this_one(tmp_path):
    """--device-python: the manifest names the device's Python and run_on_device.py refuses any other (here this
    interpreter's), in one line, before importing the carried TVM."""
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.13"
    wheels = tmp_path / "wheels"
    fake_wheel(wheels, other)
    out = tmp_path / "pkg"
    assert package_main(["--out", str(out), "--models", "seed_example", "--model-kwargs", SMALL, "--target", "llvm",
                         "--device-python", other, "--wheel-dir", str(wheels)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["python"] == other and manifest["built_with_python"].startswith("3.")
    paths = {f["path"] for f in manifest["files"]}
    assert f"runtime/tvm_ffi/core.cpython-{other.replace('.', '')}-x86_64-linux-gnu.so" in paths
    r = runtime_only(out, "run_on_device.py", cwd=out)
    assert r.returncode == 2 and f"made for Python {other}" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_device_python_must_be_a_version():
    with pytest.raises(SystemExit):
        package_module().parse_args(["--out", "x", "--device-python", "three"])


def test_kernel_timings_round_trip_into_the_cost_cache(pkg, device_run, tmp_path, caplog):
    kernels = pkg / "kernels"
    r, out = device_run
    assert r.returncode == 0, r.stderr[-3000:]
    timings = json.loads((out / "timings.json").read_text())
    assert timings["tvm_file"] == str(pkg / "runtime" / "tvm" / "__init__.py")
    measured = {t["key"]: t["cost_ms"] for t in timings["timings"]}
    assert measured and all(c > 0 for c in measured.values())
    cache = tmp_path / "costs.sqlite"
    manifest = json.loads((kernels / "kernels.json").read_text())
    assert set(measured) == {k["key"] for k in manifest["kernels"] if k["file"]}
    rep = import_timings(kernels, out / "timings.json", cache)
    assert rep.measured == len(measured) and rep.device == timings["device"]
    # a search with the TVM backend under the device's name finds every kernel it asks for: nothing built or run
    from taso_tvm import load_onnx, zoo
    from taso_tvm.relay_pass import TasoOptimize

    cfg = load_cost_config(backend="tvm", target="llvm", cache=str(cache), device=rep.device, threads=2,
                           progress=False)
    with CostModel(cfg) as cm, caplog.at_level(logging.INFO, logger="taso_tvm.cost.model"):
        TasoOptimize(cost=cm)(load_onnx(zoo.get_model("seed_example", channels=8, size=8)))
        c = cm.backend.counters
        assert (c.builds, c.measurements, c.run_failures) == (0, 0, 0)
        asked = {s.key: ms for s, ms in cm._mem.items()}
        assert asked and cm.cache_hits == len(asked)
    # the search measured near-equal graphs whole (`CostModel.settle`): those units were exported and timed too
    assert any(r.getMessage().startswith("settled") for r in caplog.records)
    assert set(asked) <= set(measured)
    assert asked == pytest.approx({k: measured[k] for k in asked})
    # a next export round (the command line) exports only kernels the cache lacks for the device
    import onnx

    onnx.save(zoo.get_model("seed_example", channels=8, size=8), tmp_path / "seed.onnx")
    assert cost_main(["export-kernels", str(tmp_path / "seed.onnx"), "--out", str(tmp_path / "round2"), "--target",
                      "llvm", "--cache", str(cache), "--device", rep.device, "--no-runtime"]) == 0
    if (tmp_path / "round2").exists():
        again = json.loads((tmp_path / "round2" / "kernels.json").read_text())["kernels"]
        assert again and not {k["key"] for k in again} & set(measured)


def test_import_timings_refuses_another_export(pkg, tmp_path):
    bad = tmp_path / "timings.json"
    bad.write_text(json.dumps({"format": "taso-tvm-kernel-timings/1", "manifest_sha": "0" * 16,
                               "tvm_version": "0", "device": "cuda:X:sm_90", "timings": []}))
    with pytest.raises(KernelExchangeError, match="times another export"):
        import_timings(pkg / "kernels", bad, tmp_path / "c.sqlite")


def test_cost_cli_import_timings_errors_in_one_line(pkg, tmp_path, capsys):
    (tmp_path / "t.json").write_text("{")
    assert cost_main(["import-timings", str(pkg / "kernels"), str(tmp_path / "t.json"),
                      "--cache", str(tmp_path / "c.sqlite")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot read kernel timings") and "\n" not in err


def test_package_over_the_limit_fails_naming_the_largest_files(tmp_path, capsys):
    out = tmp_path / "pkg"
    assert package_main(["--out", str(out), "--models", "seed_example", "--model-kwargs", SMALL, "--target", "llvm",
                         "--limit-mib", "1"]) == 2
    err = capsys.readouterr().err
    assert "over the limit of 1 MiB" in err and "largest files: runtime/tvm/lib/libtvm_runtime.so" in err
    assert not out.exists() and not (tmp_path / "pkg.partial").exists()


def test_parts_each_under_the_limit_join_back_into_the_package(pkg, tmp_path):
    copy = tmp_path / "pkg"
    shutil.copytree(pkg, copy)
    limit = 2 * 2**20
    parts = package_module().write_parts(copy, limit)
    folders = sorted(parts.iterdir())
    assert len(folders) > 5 and [f.name for f in folders][:2] == ["part00", "part01"]
    assert all(sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) <= limit for d in folders)
    assert any(".chunk" in f.name for f in parts.rglob("*"))  # libtvm_runtime.so (3.4 MB) is cut in two
    joined = tmp_path / "joined"
    r = subprocess.run([sys.executable, str(parts / "part00" / "assemble.py"), "--out", str(joined)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

    def tree(root):
        return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
                for p in root.rglob("*") if p.is_file()}

    assert tree(joined) == tree(copy)
    (parts / "part03").rename(tmp_path / "away")
    r = subprocess.run([sys.executable, str(parts / "part00" / "assemble.py"), "--out", str(tmp_path / "j2")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "parts missing" in r.stderr and "part03" in r.stderr


CUDA_RELU = """
import sys
import tvm
from tvm import relax
from taso_tvm.runtime.cuda_build import device_code_formats, enable_cuda_codegen

if sys.argv[1] == "enable":
    print(enable_cuda_codegen())
bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType([64, 64], "float32"))
with bb.function("main", [x]):
    bb.emit_func_output(bb.emit(relax.op.nn.relu(x)))
t = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
with t:
    ex = tvm.compile(bb.get(), t, relax_pipeline=relax.get_default_pipeline(t))
ex.export_library(sys.argv[2])
print(sorted(device_code_formats(sys.argv[2])), tvm.cuda(0).exist)
"""


DEVICE_LOAD = """
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the driver stand-in: no GPU here
import tvm
from run_on_device import load_cuda_runtime

why = load_cuda_runtime(tvm)
lib = tvm.runtime.load_module(sys.argv[2])
kinds = []
def walk(m):
    kinds.append(m.kind)
    for i in m.imports:
        walk(i)
walk(lib)
print(tvm.__file__, tvm.base._RUNTIME_ONLY, why or "loaded", tvm.cuda(0).exist, kinds[-1])
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_libraries_hold_compiled_kernels_built_without_a_gpu(tmp_path):
    """Without a driver TVM keeps CUDA kernels as source (the GPU machine would need nvcc to load them); with its
    CUDA runtime enabled (on the driver stand-in here) they are compiled to cubins at build time."""
    r = subprocess.run([sys.executable, "-c", CUDA_RELU, "enable", str(tmp_path / "relu.so")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    how, formats = r.stdout.splitlines()[:2]
    assert how in ("stand-in", "driver", "loaded")
    assert formats.startswith("['cubin']")
    if how != "stand-in":
        return
    # the carried runtime, in runtime-only mode, loads TVM's CUDA runtime itself and reads the library's cubins
    from taso_tvm.runtime.cuda_build import DRIVER, standin_dir
    from taso_tvm.runtime.bundle import copy_runtime

    copy_runtime(tmp_path / "runtime", cuda=True)
    assert (tmp_path / "runtime" / "tvm" / "lib" / "libcudart.so.13").is_file() or not shutil.which("nvcc")
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=f"{tmp_path / 'runtime'}:{ROOT / 'benchmarks' / 'cuda'}")
    r = subprocess.run([sys.executable, "-c", DEVICE_LOAD, str(standin_dir() / DRIVER), str(tmp_path / "relu.so")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [str(tmp_path / "runtime" / "tvm" / "__init__.py"), "True", "loaded", "False",
                                "cuda"]


@pytest.mark.slow
def test_squeezenet_packages_for_cuda_under_the_limit(tmp_path):
    out = tmp_path / "pkg"
    r = subprocess.run([sys.executable, str(PACKAGE), "--out", str(out), "--models", "squeezenet",
                        "--target", "cuda"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    print(r.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == {"kind": "cuda", "arch": "sm_90"} and manifest["total_bytes"] < LIMIT
    from taso_tvm.runtime.cuda_build import device_code_formats

    for which in ("original", "optimized"):
        assert device_code_formats(out / "models" / "squeezenet" / f"{which}.so") == {"cubin"}
