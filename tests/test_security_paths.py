"""Issue #29: no output may name an input (or another output); samples are fed by name; a compiled library is
loaded only when its signature file vouches for it (size and sha256), so a truncated or replaced .so is refused,
not loaded."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from taso_tvm.cli import main
from reliability_util import pair_model


def sub_model() -> onnx.ModelProto:
    """y = a - b: feeding the arrays by position in the wrong order gives the wrong sign."""
    g = helper.make_graph([helper.make_node("Sub", ["a", "b"], ["y"])], "sub",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def one_error(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture()
def model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(pair_model(), str(path))
    return path


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("how", ["report", "output", "hardlink", "symlink", "dotdot", "report_is_output",
                                 "data_file"])
def test_an_output_that_names_an_input_is_refused(how, model, tmp_path, capsys):
    argv = ["optimize", str(model), "-o", str(tmp_path / "out.onnx"), "--no-time-check"]
    if how == "report":
        argv += ["--report", str(model)]
    elif how == "output":
        argv[3] = str(model)
    elif how == "hardlink":
        os.link(model, tmp_path / "link.onnx")
        argv += ["--report", str(tmp_path / "link.onnx")]
    elif how == "symlink":
        os.symlink(model, tmp_path / "sym.json")
        argv += ["--report", str(tmp_path / "sym.json")]
    elif how == "dotdot":
        (tmp_path / "sub").mkdir()
        argv += ["--report", str(tmp_path / "sub" / ".." / "m.onnx")]
    elif how == "report_is_output":
        argv += ["--report", str(tmp_path / "out.onnx")]
    elif how == "data_file":  # the output's weights file would land on the model itself
        argv[3] = str(tmp_path / "m")
        os.rename(model, tmp_path / "m.data")
        argv[1] = str(tmp_path / "m.data")
        argv += ["--external-data", "always"]
    before = snapshot(tmp_path)
    assert main(argv) == 2
    one_error(capsys, "is the same file as", "refusing")
    assert snapshot(tmp_path) == before  # nothing written, nothing changed


def test_config_and_rules_files_are_inputs_too(model, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("search:\n  budget: 4\n")
    assert main(["optimize", str(model), "-o", str(cfg), "--config", str(cfg)]) == 2
    one_error(capsys, "--config")
    assert cfg.read_text() == "search:\n  budget: 4\n"


@pytest.fixture(scope="module")
def sub_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lib")
    onnx.save(sub_model(), str(folder / "sub.onnx"))
    assert main(["compile", str(folder / "sub.onnx"), "--target", "llvm", "--no-optimize",
                 "-o", str(folder / "sub.so")]) == 0
    return folder / "sub.so"


def test_run_feeds_samples_by_name(sub_library, tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    np.savez(tmp_path / "s.npz", b=b, a=a)  # saved in the other order
    assert main(["run", str(sub_library), "--inputs", str(tmp_path / "s.npz"), "--outputs",
                 str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as out:
        np.testing.assert_allclose(out["y"], a - b, rtol=1e-6)  # outputs by the model's names too


@pytest.mark.parametrize("arrays,words", [
    ({"a": np.zeros((2, 3), np.float32)}, ["no array named 'b'"]),
    ({"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32), "c": np.zeros(1)},
     ["'c' is not an input"]),
    ({"a": np.zeros((2, 3), np.float64), "b": np.zeros((2, 3), np.float32)}, ["'a' is float32", "float64"]),
    ({"a": np.zeros((3, 2), np.float32), "b": np.zeros((2, 3), np.float32)}, ["'a' has shape [2, 3]"]),
])
def test_run_refuses_a_sample_that_does_not_fit(arrays, words, sub_library, tmp_path, capsys):
    np.savez(tmp_path / "s.npz", **arrays)
    assert main(["run", str(sub_library), "--inputs", str(tmp_path / "s.npz")]) == 2
    one_error(capsys, *words)


def test_optimize_checks_a_sample_by_name(model, tmp_path, capsys):
    np.savez(tmp_path / "s.npz", x=np.zeros((1, 3, 8, 8), np.float32), extra=np.zeros(2))
    assert main(["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--inputs", str(tmp_path / "s.npz")]) == 2
    one_error(capsys, "'extra' is not an input")
    assert not (tmp_path / "o.onnx").exists()
    (tmp_path / "p.npz").write_bytes(b"\x80\x04not a zip")  # a pickle is not a sample
    assert main(["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--inputs", str(tmp_path / "p.npz")]) == 2
    one_error(capsys, "cannot read inputs")


@pytest.mark.parametrize("damage", ["truncate", "append", "no_signature", "foreign", "not_elf"])
def test_run_loads_only_a_library_its_signature_vouches_for(damage, sub_library, tmp_path, capsys):
    import shutil

    so = tmp_path / "x.so"
    shutil.copy(sub_library, so)
    shutil.copy(str(sub_library) + ".inputs.json", str(so) + ".inputs.json")
    data = so.read_bytes()
    if damage == "truncate":  # dlopen of a truncated ELF dies of SIGBUS
        so.write_bytes(data[:len(data) // 2])
    elif damage == "append":
        so.write_bytes(data + b"\0")
    elif damage == "no_signature":
        os.unlink(str(so) + ".inputs.json")
    elif damage == "foreign":  # another library, same size: only the digest tells
        so.write_bytes(data[:64] + b"\x01" * (len(data) - 64))
    elif damage == "not_elf":
        so.write_bytes(b"#!/bin/sh\n" + data[10:])
    assert main(["run", str(so)]) == 2
    one_error(capsys, "x.so")


def test_signature_names_the_library_digest(sub_library):
    import hashlib
    import json

    sig = json.loads((sub_library.parent / "sub.so.inputs.json").read_text())
    assert sig["sha256"] == hashlib.sha256(sub_library.read_bytes()).hexdigest()
    assert [i["name"] for i in sig["inputs"]] == ["a", "b"] and sig["outputs"] == ["y"]


def test_run_outputs_may_not_overwrite_the_module(sub_library, tmp_path, capsys):
    import shutil

    so = tmp_path / "x.npz"  # a library named like an npz: --outputs x would write over it
    shutil.copy(sub_library, so)
    shutil.copy(str(sub_library) + ".inputs.json", str(so) + ".inputs.json")
    before = so.read_bytes()
    assert main(["run", str(so), "--outputs", str(tmp_path / "x")]) == 2
    one_error(capsys, "--outputs", "the module")
    assert so.read_bytes() == before


@pytest.mark.parametrize("argv", [
    ["bench", "{m}", "--json", "{m}"],
    ["bench", "{m}", "--json", "{t}/r.json", "--plot", "{t}/r.json"],
    ["cost", "{m}", "--cache", "{m}"],
    ["cost", "export-kernels", "{m}", "--out", "{m}"],
    ["rules", "generate", "--max-ops", "1", "-o", "{t}/g.yaml", "--checkpoint", "{t}/g.yaml"],
])
def test_every_command_refuses_an_output_over_an_input(argv, model, tmp_path, capsys):
    before = snapshot(tmp_path)
    assert main([a.format(m=model, t=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is the same file as" in err, err
    assert snapshot(tmp_path) == before
