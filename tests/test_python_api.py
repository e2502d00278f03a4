"""tvmc's Python API (`taso_tvm.load/compile/run/tune`, issue #30): a zoo model and an ONNX file compiled and run
for llvm with inputs by name, equal to ONNX Runtime; a package exported and loaded back; the TVM thread count a
compile uses is the one asked for (the physical cores by default), in a fresh process."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import taso_tvm
from taso_tvm import zoo
from taso_tvm.runtime.library import LibraryError, signature_path
from util import assert_close, ort_run

ROOT = Path(__file__).resolve().parent.parent
FAST = {"cost": "analytic", "budget": 20}  # the analytic cost model: no kernels measured


def two_input_model() -> onnx.ModelProto:
    """y = relu(x @ w + b), z = y * s: two run-time inputs (x, s) declared in that order, two outputs."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 8], rng.standard_normal((16, 8)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], rng.standard_normal(8).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Mul", ["y", "s"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16]),
                                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_zoo_model_compiles_and_runs_equal_to_onnx_runtime():
    proto = zoo.get_model("seed_example")
    model = taso_tvm.load(proto)
    assert [s.name for s in model.inputs] == [i.name for i in proto.graph.input]
    package = taso_tvm.compile(model, "llvm", settings=FAST, time_check=False)
    report = package.report
    assert report.rewritten and report.search.total.stopped_by == taso_tvm.StopReason.EXHAUSTED
    assert report.threads >= 1 and report.decision == ""  # not timed: the optimized build is kept
    feeds = zoo.random_inputs(proto)
    result = taso_tvm.run(package, feeds, repeat=2)
    names = [o.name for o in proto.graph.output]
    assert list(result.outputs) == names
    assert_close([result.outputs[n] for n in names], ort_run(proto, feeds), rtol=1e-3, atol=1e-4)
    assert result.timing is not None and result.timing.repeat == 2 and result.timing.median > 0


def test_onnx_file_exported_and_run_from_its_path(tmp_path):
    proto = two_input_model()
    path = tmp_path / "two.onnx"
    onnx.save(proto, str(path))
    package = taso_tvm.compile(str(path), "llvm", settings=FAST, time_check=False)
    so = tmp_path / "two.so"
    assert package.export(so) == str(so) and Path(signature_path(str(so))).is_file()
    rng = np.random.default_rng(1)
    feeds = {"s": rng.standard_normal((4, 8)).astype(np.float32),  # by name, not in the graph's order
             "x": rng.standard_normal((4, 16)).astype(np.float32)}
    result = taso_tvm.run(str(so), feeds)
    assert list(result.outputs) == ["y", "z"]
    want = ort_run(proto, {"x": feeds["x"], "s": feeds["s"]})
    assert_close([result.outputs["y"], result.outputs["z"]], want, rtol=1e-4, atol=1e-5)
    loaded = taso_tvm.Package.load(so)
    assert loaded.input_names == ["x", "s"] and loaded.output_names == ["y", "z"]
    np.savez(tmp_path / "in.npz", **feeds)
    again = taso_tvm.run(loaded, str(tmp_path / "in.npz"))
    assert_close(list(again.outputs.values()), list(result.outputs.values()), rtol=0, atol=0)
    assert Path(again.save(tmp_path / "out")).name == "out.npz"
    with pytest.raises(taso_tvm.errors.InputError, match="no array named 'x'"):
        taso_tvm.run(loaded, {"s": feeds["s"]})
    tampered = tmp_path / "tampered.so"  # a copy: `so` is loaded in this process, its pages map the file
    tampered.write_bytes(so.read_bytes() + b"\0")  # changed since export: refused before loading
    Path(signature_path(str(tampered))).write_bytes(Path(signature_path(str(so))).read_bytes())
    with pytest.raises(LibraryError, match="signature says"):
        taso_tvm.run(str(tampered), feeds)


def test_ir_module_and_taso_graph_load():
    g = taso_tvm.new_graph()
    x = g.new_input(dims=(1, 8, 4, 4))
    w = g.new_weight(dims=(8, 8, 1, 1))
    g.relu(g.conv2d(input=x, weight=w, strides=(1, 1), padding="SAME"))
    for source in (g, g.to_relax()):
        model = taso_tvm.load(source)
        assert [(s.dims, s.dtype) for s in model.inputs] == [((1, 8, 4, 4), "float32")]
        package = taso_tvm.compile(model, "llvm", optimize=False)
        out = taso_tvm.run(package, model.random_inputs()).outputs
        assert list(out) == ["output_0"] and out["output_0"].min() >= 0


def test_settings_are_resolved_once_and_validated():
    s = taso_tvm.Settings.resolve(None, env={}, overrides={"budget": 3, "cost": "analytic"})
    assert (s.budget, s.cost, s.method) == (3, "analytic", "backtrack")
    with pytest.raises(taso_tvm.errors.SettingsError, match="budget"):
        taso_tvm.Settings.resolve(None, env={}, overrides={"budget": -1})
    with pytest.raises(taso_tvm.errors.SettingsError, match="unknown"):
        taso_tvm.Settings.resolve(None, env={}, overrides={"budgett": 1})
    with pytest.raises(taso_tvm.errors.SettingsError, match="unknown target 'fpga'"):
        taso_tvm.compile(zoo.get_model("seed_example"), "fpga")


THREADS_SCRIPT = """
import sys
import taso_tvm
from taso_tvm import zoo
from taso_tvm.schedule import num_threads, physical_cores
asked = int(sys.argv[1]) or None
package = taso_tvm.compile(zoo.get_model("seed_example"), "llvm", settings={"cost": "analytic"}, threads=asked,
                           time_check=False)
result = taso_tvm.run(package, None, repeat=1)
print("threads", package.report.threads, result.threads, num_threads(), physical_cores())
"""


@pytest.mark.parametrize("asked", [2, pytest.param(0, marks=pytest.mark.slow)])
def test_compile_uses_the_threads_asked_in_a_fresh_process(asked):
    """TVM sizes its pool once (to 1 thread on this 2-core machine unless told): compile sets the count before
    anything starts the runtime, so the report, the run and the live pool all say what was asked (0: the
    physical cores)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TVM_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, str(asked)], cwd=ROOT / "tests", env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("threads ")][-1]
    reported, run_used, live, physical = map(int, line.split()[1:])
    want = asked or physical
    assert reported == run_used == live == want, line
    assert "not the" not in out.stderr  # no "TVM runtime uses 1 thread(s), not the 2 asked for"
