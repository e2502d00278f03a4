"""ONNX Runtime kernel costs from its profiler: runs and node counts read from a profile, the session's dispatch per
node measured once and kept in the cost cache, and added per node a kernel runs as."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.cost.backends.ort_backend import DISPATCH_KEY, OrtBackend
from taso_tvm.cost.backends.ort_profile import profiled_runs
from taso_tvm.cost.config import CACHE_ENV
from taso_tvm.graph import NodeStore, TensorGraph, TensorType

pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)


def _abs_neg(n: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64])
    names = ["x"] + [f"t{i}" for i in range(n - 1)] + ["y"]
    nodes = [helper.make_node("Neg" if i % 2 else "Abs", [names[i]], [names[i + 1]]) for i in range(n)]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_a_profile_reads_as_runs_with_their_node_counts():
    b = OrtBackend(load_cost_config(backend="ort", cache=""))
    sess = b.profiled_session(_abs_neg(5))
    for _ in range(4):
        sess.run(None, {"x": np.ones(64, np.float32)})
    runs = profiled_runs(sess.end_profiling(), skip=1)
    b.close()
    assert len(runs) == 3
    assert all(r.nodes == 5 and 0 < r.kernel_us <= r.run_us for r in runs)


def test_a_profile_in_another_layout_reads_as_the_same_runs(tmp_path):
    """The events' heads are read line by line where ONNX Runtime writes an event a line (its node events' arguments
    are most of the file); a profile laid out otherwise is decoded whole, to the same runs."""
    import json

    b = OrtBackend(load_cost_config(backend="ort", cache=""))
    sess = b.profiled_session(_abs_neg(3))
    for _ in range(6):
        sess.run(None, {"x": np.ones(64, np.float32)})
    path = sess.end_profiling()
    runs = profiled_runs(path, skip=1)
    other = tmp_path / "indented.json"
    other.write_text(json.dumps(json.loads(open(path).read()), indent=1))
    b.close()  # (its profiles' folder with it)
    assert len(runs) == 5 and all(r.nodes == 3 and 0 < r.kernel_us <= r.run_us for r in runs)
    assert profiled_runs(str(other), skip=1) == runs


def test_dispatch_is_measured_once_and_kept_in_the_cache(tmp_path):
    with CostModel(load_cost_config(backend="ort", cache=str(tmp_path / "c.sqlite"))) as cm:
        d = cm.backend.dispatch_ms
        assert 0 <= d < 0.1  # (microseconds per node on any CPU)
        assert cm.cache.get_many(cm.scope, [DISPATCH_KEY])[DISPATCH_KEY] == pytest.approx(d * 1e3)
    with CostModel(load_cost_config(backend="ort", cache=str(tmp_path / "c.sqlite"))) as again:
        assert again.backend.dispatch_ms == pytest.approx(d)  # read back from the cache


def test_a_kernel_pays_the_dispatch_of_each_node_it_runs_as():
    S = NodeStore()
    x = S.input("x", TensorType((1, 16, 32)))
    y = S.add("add", [S.add("matmul", [x, S.weight(np.ones((32, 32), np.float32))])[0],
                      S.weight(np.ones(32, np.float32))])[0]
    with CostModel(load_cost_config(backend="ort", cache="", repeat=3)) as cm:
        (k,) = cm.kernels(TensorGraph(S, [y]))
        cm.backend.dispatch_ms = 0.1  # far above the kernel's own time: the node count decides the cost
        cost = cm.backend.measure([k.sig])[k.sig].cost_ms
    nodes = round(cost / 0.1)
    # whole nodes' worth of dispatch, plus the kernel's own microseconds (under half a node's dispatch: a loaded
    # machine stretches them past 20 us, and a miscount would be a whole 0.1 off)
    assert nodes >= 1 and 0 <= cost - 0.1 * nodes < 0.05
