"""Shared helpers of the reliability tests: small models, running `main()` in process, and what a run leaves."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAST = ["--cost-backend", "analytic", "--no-time-check"]


def pair_model() -> onnx.ModelProto:
    """Two conv -> relu branches concatenated: the analytic search merges them (a rewrite is written)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W2")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Concat", ["r1", "r2"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def run_main(argv: list, capsys) -> tuple[int, list, str]:
    """(exit status, stderr lines, stdout) of `taso-tvm argv` run in this process."""
    from taso_tvm.cli import main

    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, [line for line in out.err.splitlines() if line.strip()], out.out


def snapshot(folder: Path) -> dict:
    """name -> (size, mtime_ns) of everything in `folder` (recursively), to prove nothing was written or moved."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_size if not os.path.isdir(p) else -1, st.st_mtime_ns)
    return out


def leftovers(folder: Path) -> list:
    """Temporary files of atomic writes left in `folder`."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part") or ".part." in p.name)


def assert_one_line(lines: list, *words: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith("taso-tvm: "), lines
    assert "Traceback" not in lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
