"""benchmarks/cuda: the package that carries built models to a GPU machine without TVM's compiler, its dry run on
the CPU in TVM's runtime-only mode, and the kernel timings exchange (export here, time there, import here)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taso_tvm.cli_cost import main as cost_main
from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.cost.kernel_exchange import KernelExchangeError, import_timings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "benchmarks" / "cuda" / "package.py"
LIMIT = 64 * 2**20
SMALL = json.dumps({"seed_example": {"channels": 8, "size": 8}})


def package_main(argv: list) -> int:
    """benchmarks/cuda/package.py's main, run in this process (TVM is imported once)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cuda_package", PACKAGE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(argv)


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


def test_package_holds_what_running_needs_and_no_compiler(pkg):
    manifest = json.loads((pkg / "manifest.json").read_text())
    files = {f["path"]: f for f in manifest["files"]}
    for need in ("run_on_device.py", "timing.py", "runtime/tvm/lib/libtvm_runtime.so",
                 "runtime/tvm_ffi/lib/libtvm_ffi.so", "models/seed_example/original.so",
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


def test_dry_run_in_runtime_only_mode_matches_the_references(pkg, tmp_path):
    out = tmp_path / "results"
    r = runtime_only(pkg, "run_on_device.py", "--time-cap", "1", "--max-rounds", "3", "--out", str(out), cwd=pkg)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert f"from {pkg / 'runtime' / 'tvm' / '__init__.py'} (runtime only: True)" in r.stdout
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["tvm_file"] == str(pkg / "runtime" / "tvm" / "__init__.py")
    (row,) = res["results"]
    assert row["ok"] and max(row["max_scaled_error"].values()) <= row["rtol"]
    assert row["original_ms"] > 0 and row["optimized_ms"] > 0 and row["rounds"] >= 1
    assert "| seed_example |" in out.with_suffix(".md").read_text()


def test_dry_run_refuses_a_damaged_package(pkg, tmp_path):
    copy = tmp_path / "pkg"
    subprocess.run(["cp", "-r", str(pkg), str(copy)], check=True)
    (copy / "models" / "seed_example" / "reference.npz").write_bytes(b"not the reference")
    r = runtime_only(copy, "run_on_device.py", "--time-cap", "1", cwd=copy)
    assert r.returncode == 2 and "models/seed_example/reference.npz changed" in r.stderr


def test_kernel_timings_round_trip_into_the_cost_cache(pkg, tmp_path):
    kernels = pkg / "kernels"
    r = runtime_only(pkg, str(kernels / "time_kernels.py"), "--out", str(tmp_path / "timings.json"), cwd=pkg)
    assert r.returncode == 0, r.stderr[-3000:]
    timings = json.loads((tmp_path / "timings.json").read_text())
    measured = {t["key"]: t["cost_ms"] for t in timings["timings"]}
    assert measured and all(c > 0 for c in measured.values())
    cache = tmp_path / "costs.sqlite"
    manifest = json.loads((kernels / "kernels.json").read_text())
    assert set(measured) == {k["key"] for k in manifest["kernels"] if k["file"]}
    rep = import_timings(kernels, tmp_path / "timings.json", cache)
    assert rep.measured == len(measured) and rep.device == timings["device"]
    # a search with the TVM backend under the device's name finds every kernel it asks for: nothing built or run
    from taso_tvm import load_onnx, zoo
    from taso_tvm.relay_pass import TasoOptimize

    cfg = load_cost_config(backend="tvm", target="llvm", cache=str(cache), device=rep.device, threads=2,
                           progress=False)
    with CostModel(cfg) as cm:
        TasoOptimize(cost=cm)(load_onnx(zoo.get_model("seed_example", channels=8, size=8)))
        c = cm.backend.counters
        assert (c.builds, c.measurements, c.run_failures) == (0, 0, 0)
        asked = {s.key: ms for s, ms in cm._mem.items()}
        assert asked and cm.cache_hits == len(asked)
    assert set(asked) <= set(measured)
    assert asked == pytest.approx({k: measured[k] for k in asked})


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


@pytest.mark.slow
def test_squeezenet_packages_for_cuda_under_the_limit(tmp_path):
    out = tmp_path / "pkg"
    r = subprocess.run([sys.executable, str(PACKAGE), "--out", str(out), "--models", "squeezenet",
                        "--target", "cuda"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    print(r.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == {"kind": "cuda", "arch": "sm_90"} and manifest["total_bytes"] < LIMIT
    lib = (out / "models" / "squeezenet" / "optimized.so").read_bytes()
    assert b"sm_90" in lib or b".target sm_90" in lib  # the device code is in the library
