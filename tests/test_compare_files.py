"""benchmarks/compare_files.py --epochs: each epoch times fresh sessions of every file, the ratio to the first file's
latency is read over all epochs' rounds, the interval from a bootstrap over the epochs."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import compare_files  # noqa: E402


def _model(path: Path, width: int) -> str:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((width, width)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_epochs_of_fresh_sessions_give_each_files_ratio_to_the_first(tmp_path, capsys):
    small, same, big = (_model(tmp_path / f"{n}.onnx", w) for n, w in (("small", 64), ("same", 64), ("big", 512)))
    assert compare_files.main([small, same, big, "--epochs", "3", "--rounds", "20", "--dim", "batch=32"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path.name}/small.onnx: median") and "3 epochs x 20 rounds" in out[0]
    ratios = {}
    for line in out[1:]:
        m = re.match(r"\S+/(\w+)\.onnx: median [\d.]+ ms, ([\d.]+)x the first's \[([\d.]+), ([\d.]+)\]", line)
        ratios[m.group(1)] = tuple(float(v) for v in m.groups()[1:])
    assert ratios["same"][1] <= ratios["same"][0] <= ratios["same"][2]
    assert 0.5 < ratios["same"][0] < 2 and ratios["big"][1] > 2  # 64x as many products
