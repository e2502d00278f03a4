"""Helpers shared by the tests: run models in ONNX Runtime and in the Relax VM."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx


def ort_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def tvm_run(mod, feeds: Sequence[np.ndarray] | Mapping[str, np.ndarray], func: str = "main") -> list[np.ndarray]:
    """Build `mod` for llvm and run it in the Relax VM; returns a flat list of outputs."""
    import tvm
    from tvm import relax

    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = list(feeds.values()) if isinstance(feeds, Mapping) else list(feeds)
    out = vm[func](*[tvm.runtime.tensor(np.require(a, requirements="C")) for a in args])
    return flatten(out)


def flatten(out) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    res = []
    for o in out:
        res.extend(flatten(o))
    return res


def assert_close(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = 1e-4,
                 atol: float = 1e-5) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * scale)
