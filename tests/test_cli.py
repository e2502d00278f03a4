"""The taso-tvm command line: zoo and graph inspection, with one-line errors."""
import onnx
import pytest

from taso_tvm.cli import main


def test_zoo_list_and_export(tmp_path, capsys):
    assert main(["zoo", "list"]) == 0
    assert "resnet50" in capsys.readouterr().out
    out = tmp_path / "bert.onnx"
    assert main(["zoo", "export", "bert", "--layers", "1", "-o", str(out)]) == 0
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert main(["zoo", "export", "nope", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("taso-tvm: error: unknown zoo model 'nope'") and err.count("\n") == 1


def test_graph_summary(tmp_path, capsys):
    path = tmp_path / "sq.onnx"
    assert main(["zoo", "export", "squeezenet", "-o", str(path)]) == 0
    assert main(["graph", str(path)]) == 0
    out = capsys.readouterr().out
    assert "main block 0: 91 operators (0 opaque)" in out and "conv2d       26" in out


def test_graph_bad_inputs(tmp_path, capsys):
    assert main(["graph", str(tmp_path / "missing.onnx")]) == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01\x02junk")
    assert main(["graph", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"taso-tvm: error: cannot read '{tmp_path / 'missing.onnx'}': no such file"
    assert err[1].startswith(f"taso-tvm: error: '{bad}' is not an ONNX model")


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("zoo", "graph", "optimize", "compile", "run", "cost", "rules"):
        assert f"\n    {cmd} " in out, cmd
    assert main(["rules", "list"]) == 0  # a delegated tool gets its own arguments
    assert "fold_conv_batchnorm" in capsys.readouterr().out
