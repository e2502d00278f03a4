"""Models with external data, from any working directory into any folder; bad input (data outside the model's
folder, a model ONNX's checker refuses, CUDA without a device) is one line and exit 2; written files' modes."""
import os
import stat

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from taso_tvm import zoo
from taso_tvm.cli import main
from taso_tvm.onnx_io import weights
from util import assert_close


@pytest.fixture(scope="module")
def ext_model(tmp_path_factory):
    """squeezenet saved with external data as ext/model.onnx + ext/model.data."""
    folder = tmp_path_factory.mktemp("ext")
    onnx.save_model(zoo.get_model("squeezenet"), str(folder / "model.onnx"), save_as_external_data=True,
                    location="model.data")
    return folder / "model.onnx"


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("c") / "taso.yaml"
    path.write_text("search:\n  budget: 16\n  alpha: 1.05\ncost:\n  backend: analytic\n")
    return path


def _outputs_from(folder, path, feeds):
    """The model at `path` run in ONNX Runtime with `folder` as the working directory."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    finally:
        os.chdir(here)


def _locations(path):
    m = onnx.load(str(path), load_external_data=False)
    return {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}


@pytest.mark.slow  # room in the default suite (issue 35): test_optimize_into_the_models_own_folder stays
def test_optimize_from_another_folder_into_another_folder(ext_model, config, tmp_path, monkeypatch, capsys):
    cwd, out_dir = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir(), out_dir.mkdir()
    monkeypatch.chdir(cwd)
    out = out_dir / "model.opt.onnx"
    rel_in = os.path.relpath(ext_model, cwd)
    assert main(["optimize", rel_in, "-o", os.path.relpath(out, cwd), "--config", str(config),
                 "--no-time-check"]) == 0
    assert "optimized:" in capsys.readouterr().out  # a rewrite was written: its weights came from the store
    assert _locations(out) == {"model.opt.onnx.data"}  # one data file per output, never the input's
    feeds = zoo.random_inputs(onnx.load(str(ext_model)))
    want = _outputs_from(ext_model.parent, ext_model, feeds)
    got = _outputs_from(tmp_path, out, feeds)  # from a third folder
    assert_close(got, want, rtol=1e-3, atol=1e-4)
    onnx.checker.check_model(str(out))


def test_optimize_into_the_models_own_folder(ext_model, config, tmp_path, capsys):
    folder = tmp_path / "same"
    folder.mkdir()
    for name in ("model.onnx", "model.data"):
        (folder / name).write_bytes((ext_model.parent / name).read_bytes())
    out = folder / "model.opt.onnx"
    assert main(["optimize", str(folder / "model.onnx"), "-o", str(out), "--config", str(config),
                 "--time-cap", "1"]) == 0
    assert _locations(out) == {"model.opt.onnx.data"} and (folder / "model.data").exists()
    feeds = zoo.random_inputs(onnx.load(str(ext_model)))
    assert_close(_outputs_from(tmp_path, out, feeds), _outputs_from(tmp_path, folder / "model.onnx", feeds),
                 rtol=1e-3, atol=1e-4)


def test_external_data_never_writes_one_file(ext_model, tmp_path):
    out = tmp_path / "one.onnx"
    assert main(["optimize", str(ext_model), "-o", str(out), "--no-search", "--external-data", "never"]) == 0
    assert os.listdir(tmp_path) == ["one.onnx"] and _locations(out) == set()


def test_external_data_always_on_a_small_model(tmp_path):
    path = tmp_path / "seed.onnx"
    onnx.save(zoo.get_model("seed_example"), str(path))
    out = tmp_path / "o" / "seed.opt.onnx"
    out.parent.mkdir()
    assert main(["optimize", str(path), "-o", str(out), "--no-search", "--external-data", "always"]) == 0
    assert (out.parent / "seed.opt.onnx.data").exists()


def _mlp(tmp_path, location):
    """A model whose one weight (64 x 64) names `location` as its data file."""
    w = np.ones((64, 64), np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
                          [onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.parametrize("location,why", [("../../etc/hostname", "outside the model's folder"),
                                          ("/etc/hostname", "absolute data location"),
                                          ("missing.data", "not next to the model")])
def test_data_outside_the_folder_is_bad_input(location, why, tmp_path, capsys):
    path = _mlp(tmp_path, location)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hostname").write_bytes(b"\0" * 64 * 64 * 4)
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and "'w'" in err and not out.exists()


def _invalid(kind):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    nodes, opset = [helper.make_node("Relu", ["x"], ["y"])], 17
    if kind == "cycle":
        nodes = [helper.make_node("Relu", ["z"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    elif kind == "unknown op":
        nodes = [helper.make_node("Fooo", ["x"], ["y"])]
    else:
        opset = 99
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("kind,why", [("cycle", "topologically sorted"), ("unknown op", "Fooo"),
                                      ("opset 99", "opset 99")])
def test_checker_invalid_model_is_bad_input(kind, why, tmp_path, capsys):
    path, out = tmp_path / "bad.onnx", tmp_path / "o.onnx"
    path.write_bytes(_invalid(kind).SerializeToString())
    assert main(["optimize", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "onnx.checker" in err and why in err and not out.exists()
    assert main(["optimize", str(path), "-o", str(out), "--keep-invalid"]) == 0
    assert out.read_bytes() == path.read_bytes()


def test_written_files_take_the_umask_or_the_replaced_files_mode(ext_model, tmp_path):
    out = tmp_path / "m.onnx"
    old = os.umask(0o022)
    try:
        assert main(["optimize", str(ext_model), "-o", str(out), "--no-search", "--no-check"]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        assert stat.S_IMODE((tmp_path / "m.onnx.data").stat().st_mode) == 0o644
        out.chmod(0o640)
        assert main(["optimize", str(ext_model), "-o", str(out), "--no-search", "--no-check"]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_compile_for_cuda_without_a_device_is_bad_input(tmp_path, capsys):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA device")
    path = tmp_path / "seed.onnx"
    onnx.save(zoo.get_model("seed_example"), str(path))
    so = tmp_path / "m.so"
    assert main(["compile", str(path), "--target", "cuda", "-o", str(so), "--cost-backend", "tvm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cost-backend analytic" in err and "import-timings" in err
    assert not so.exists()


def test_references_round_trip(tmp_path):
    """A weight kept as a reference is read in place (a memory map) and written into the output's data file."""
    src = tmp_path / "src"
    src.mkdir()
    m = zoo.get_model("squeezenet")
    onnx.save_model(zoo.get_model("squeezenet"), str(src / "m.onnx"), save_as_external_data=True, location="w.bin")
    from taso_tvm.onnx_io import read_onnx

    proto, _ = read_onnx(str(src / "m.onnx"))
    refs = weights.references(proto)
    assert refs and all(isinstance(weights.array(t), np.memmap) for t in refs)
    weights.save(proto, str(tmp_path / "copy.onnx"))
    again = onnx.load(str(tmp_path / "copy.onnx"))
    for a, b in zip(m.graph.initializer, again.graph.initializer):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))


@pytest.mark.slow  # 6-9 s: a whole optimize; the weight store's round trip is in the default suite (test_references_round_trip)
def test_large_inline_model_is_offloaded(config, tmp_path, monkeypatch, capsys):
    """A model that holds its weights inline (over OFFLOAD_INLINE_BYTES: here every model) keeps them in the store
    while it is optimized; written inline again, as it came."""
    monkeypatch.setattr(weights, "OFFLOAD_INLINE_BYTES", 0)
    path, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(zoo.get_model("squeezenet"), str(path))
    from taso_tvm.onnx_io import read_onnx

    assert weights.references(read_onnx(str(path))[0])
    assert main(["optimize", str(path), "-o", str(out), "--config", str(config), "--no-time-check"]) == 0
    assert "optimized:" in capsys.readouterr().out and sorted(os.listdir(tmp_path)) == ["in.onnx", "out.onnx"]
    feeds = zoo.random_inputs(onnx.load(str(path)))
    assert_close(_outputs_from(tmp_path, out, feeds), _outputs_from(tmp_path, path, feeds), rtol=1e-3, atol=1e-4)
