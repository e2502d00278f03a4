"""`taso-tvm cost MODEL.onnx`: per-kernel table or JSON, and one-line errors."""
from __future__ import annotations

import json

import onnx
import pytest

from taso_tvm.cli.cost import main
from taso_tvm.cost.config import CACHE_ENV


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from taso_tvm import zoo

    path = tmp_path_factory.mktemp("m") / "seed.onnx"
    onnx.save(zoo.get_model("seed_example", channels=8, size=8), str(path))
    return str(path)


def test_table(model_path, capsys):
    assert main(["cost", model_path, "--backend", "analytic", "--cache", ""]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["kernel", "count", "ms", "each"]
    assert any(line.startswith("conv2d+add+relu f32[1,8,8,8]") for line in out)
    assert out[-1].startswith("Cost metrics: exe_time(ms) = ") and "over 3 kernels" in out[-1]


def test_json_totals_add_up(model_path, capsys, tmp_path):
    cache = str(tmp_path / "c.sqlite")
    assert main([model_path, "--backend", "ort", "--cache", cache, "--json", "--threads", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["backend"] == "ort" and data["kernels"] == sum(k["count"] for k in data["per_kernel"]) >= 3
    assert data["total_ms"] == pytest.approx(sum(k["total_ms"] for k in data["per_kernel"]))
    assert all(k["status"] == "ok" for k in data["per_kernel"])
    assert main([model_path, "--backend", "ort", "--cache", cache, "--json", "--threads", "1"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["total_ms"] == data["total_ms"] and all(k["status"] == "cached" for k in again["per_kernel"])


@pytest.mark.parametrize("args,msg", [
    (["--target", "foo"], "error: unknown target 'foo': use llvm, cuda or a JSON target dict"),
    (["--config", "/nonexistent/cost.yaml"], "error: cannot read cost config '/nonexistent/cost.yaml': no such file"),
])
def test_bad_arguments(model_path, capsys, args, msg):
    assert main([model_path, "--cache", ""] + args) == 2
    assert capsys.readouterr().err.startswith(msg)


def test_missing_model(capsys, tmp_path):
    assert main([str(tmp_path / "none.onnx"), "--backend", "analytic", "--cache", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
