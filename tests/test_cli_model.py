"""taso-tvm optimize / compile / run end to end on a zoo model, and their one-line errors."""
import json

import numpy as np
import onnx
import pytest

from taso_tvm import zoo
from taso_tvm.cli import main
from util import assert_close, ort_run


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "squeezenet.onnx"
    onnx.save(zoo.get_model("squeezenet"), str(path))
    return path


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("c") / "taso.yaml"
    path.write_text("search:\n  budget: 16\n  alpha: 1.05\ncost:\n  backend: analytic\n")
    return path


def test_optimize_writes_equivalent_onnx(model_path, config, tmp_path, capsys):
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    assert main(["optimize", str(model_path), "-o", str(out), "--config", str(config), "--report", str(rep),
                 "--time-cap", "1"]) == 0  # the guard's verdict is not what this test checks
    text = capsys.readouterr().out
    for row in ("operators", "predicted cost", "rules applied", "search", f"written to {out}"):
        assert row in text
    optimized, original = onnx.load(str(out)), onnx.load(str(model_path))
    onnx.checker.check_model(optimized, full_check=True)
    feeds = zoo.random_inputs(original)
    assert_close(ort_run(optimized, feeds), ort_run(original, feeds), rtol=1e-3, atol=1e-4)
    report = json.loads(rep.read_text())
    assert report["cost_after"] <= report["cost_before"] and report["operators_before"] == 91


def test_compile_and_run(config, tmp_path, capsys):
    model_path = tmp_path / "seed.onnx"  # TASO's seed graph (squeezenet took 20-30 s to build here)
    onnx.save(zoo.get_model("seed_example"), str(model_path))
    so = tmp_path / "model.so"
    assert main(["compile", str(model_path), "--target", "llvm", "-o", str(so), "--config", str(config),
                 "--time-cap", "4"]) == 0
    assert so.exists()
    feeds = zoo.random_inputs(onnx.load(str(model_path)))
    np.savez(tmp_path / "in.npz", **feeds)
    capsys.readouterr()
    assert main(["run", str(so), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"),
                 "--print-time", "--repeat", "2"]) == 0
    text = capsys.readouterr().out
    assert "output 0: shape (1, 128, 56, 56)" in text and "latency: median" in text
    got = np.load(tmp_path / "o.npz")[onnx.load(str(model_path)).graph.output[0].name]
    assert_close([got], ort_run(onnx.load(str(model_path)), feeds), rtol=1e-3, atol=1e-4)
    assert main(["run", str(so)]) == 0  # random inputs from the signature written beside the library


def test_input_shapes_fix_symbolic_dims(tmp_path, config):
    m = zoo.get_model("seed_example")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path / "dyn.onnx"
    onnx.save(m, str(path))
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--config", str(config),
                 "--input-shapes", "input:[1,128,56,56]", "--no-time-check"]) == 0


@pytest.mark.parametrize("argv,msg", [
    (["compile", "{m}", "--target", "fpga", "-o", "{t}/x.so"], "unknown target 'fpga'"),
    (["optimize", "{m}", "-o", "{t}/x.onnx", "--config", "{t}/missing.yaml"], "cannot read config"),
    (["optimize", "{t}/none.onnx", "-o", "{t}/x.onnx"], "no such file"),
    (["run", "{t}/none.so"], "no such file"),
])
def test_bad_input_is_one_line(argv, msg, model_path, tmp_path, capsys):
    argv = [a.format(m=model_path, t=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and err.startswith("taso-tvm: error:")


@pytest.mark.parametrize("argv,msg", [
    (["optimize", "{m}", "-o", "{t}/x.onnx", "--alpha", "0.2"], "--alpha: must be"),
    (["optimize", "{m}", "-o", "{t}/x.onnx", "--budget", "-3"], "--budget: must be"),
    (["optimize", "{m}", "-o", "{t}/x.onnx", "--time-limit", "-1"], "--time-limit: must be"),
])
def test_bad_flag_values_are_one_line_usage_errors(argv, msg, model_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([a.format(m=model_path, t=tmp_path) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and err.startswith("taso-tvm: error:")


def test_time_limit_says_so(model_path, config, tmp_path, capsys):
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "o.onnx"), "--config", str(config),
                 "--time-limit", "0.01", "--budget", "1000", "--no-time-check"]) == 0
    assert "time limit reached" in capsys.readouterr().out


def test_safety_net_refuses_a_wrong_output(model_path, tmp_path, capsys, monkeypatch):
    """If the optimized model differed from the original, nothing is written and the output is named."""
    import taso_tvm.cli.model as cm

    real = cm.ort_outputs
    calls = []

    def wrong_first(model, feeds):
        out = real(model, feeds)
        calls.append(1)
        return [o + 1.0 for o in out] if len(calls) == 1 else out  # corrupt the optimized model's result

    monkeypatch.setattr(cm, "ort_outputs", wrong_first)
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--no-search"]) == 1
    err = capsys.readouterr().err
    assert "output 'output' differs from the original by up to 1" in err and not out.exists()


def test_compile_for_cuda_builds_without_a_gpu(tmp_path, config, capsys):
    """The CUDA library is built here (sm_90, nvcc/NVRTC not needed to emit it); running it needs a GPU."""
    path = tmp_path / "seed.onnx"
    onnx.save(zoo.get_model("seed_example"), str(path))
    so = tmp_path / "seed_cuda.so"
    assert main(["compile", str(path), "--target", "cuda", "-o", str(so), "--config", str(config)]) == 0
    assert so.stat().st_size > 0 and (tmp_path / "seed_cuda.so.inputs.json").exists()
    from taso_tvm.runtime.cuda_build import device_code_formats

    assert device_code_formats(so) == {"cubin"}  # compiled here: the GPU machine needs no nvcc
