"""The persistent cost cache: round trips, scopes, two writers at once, corrupt files."""
from __future__ import annotations

import importlib.util
import logging
import math
import multiprocessing
from pathlib import Path

CACHE_PY = Path(__file__).resolve().parents[1] / "taso_tvm" / "cost" / "cache.py"


def _cache_module():
    """cache.py on its own (it imports nothing from the package), so spawned writers start without TVM."""
    spec = importlib.util.spec_from_file_location("taso_cost_cache_standalone", CACHE_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _real():
    from taso_tvm.cost import CostCache

    return CostCache

SCOPE = ("tvm", '{"kind": "llvm"}', "cpu:test:2t", "tvm=0.27")


def test_round_trip_and_scopes(tmp_path):
    c = _real()(tmp_path / "c.sqlite")
    c.put_many(SCOPE, [("k1", "conv", 1.5, "ok", ""), ("k2", "bad", math.inf, "build_failed", "boom")])
    assert c.get_many(SCOPE, ["k1", "k2", "k3"]) == {"k1": 1.5, "k2": math.inf}
    other = ("tvm", '{"kind": "llvm"}', "cpu:other:2t", "tvm=0.27")
    assert c.get_many(other, ["k1"]) == {}
    c.put_many(SCOPE, [("k1", "conv", 2.0, "ok", "")])  # replace
    c.close()
    assert _real()(tmp_path / "c.sqlite").get_many(SCOPE, ["k1"]) == {"k1": 2.0}


def test_many_keys_are_chunked(tmp_path):
    c = _real()(tmp_path / "c.sqlite")
    c.put_many(SCOPE, [(f"k{i}", "x", float(i), "ok", "") for i in range(1300)])
    got = c.get_many(SCOPE, [f"k{i}" for i in range(1300)])
    assert len(got) == 1300 and got["k1299"] == 1299.0


def _writer(path: str, start: int, n: int) -> None:
    c = _cache_module().CostCache(path)
    for i in range(start, start + n):
        c.put_many(SCOPE, [(f"k{i}", "x", float(i), "ok", "")])
    c.close()


def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k * 200, 200)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    got = _real()(path).get_many(SCOPE, [f"k{i}" for i in range(400)])
    assert len(got) == 400


def test_corrupt_file_is_moved_aside(tmp_path, caplog):
    """A damaged SQLite file at the cache path (ours, damaged) is moved aside; one that is not SQLite at all is
    not ours and is an error (tests/test_reliability_cache.py)."""
    path = tmp_path / "costs.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="taso_tvm.cost.cache"):
        c = _real()(path)
        assert c.get_many(SCOPE, ["k"]) == {}
        c.put_many(SCOPE, [("k", "x", 1.0, "ok", "")])
        assert c.get_many(SCOPE, ["k"]) == {"k": 1.0}
    assert any("unreadable" in r.getMessage() and "moved it to" in r.getMessage() for r in caplog.records)
    assert list(tmp_path.glob("costs.sqlite.corrupt-*"))


def test_memory_cache():
    c = _real()(None)
    c.put_many(SCOPE, [("k", "x", 3.0, "ok", "")])
    assert c.get_many(SCOPE, ["k"]) == {"k": 3.0} and c.count() == 1


# ---------------------------------------------------------------- the cache inside a CostModel
class _CountingBackend:
    """A stand-in backend: conv kernels cost 2 ms, others 1 ms; counts what it measures."""

    name, cacheable = "fake", True

    def __init__(self):
        from taso_tvm.cost.backends import Counters

        self.counters = Counters()

    def scope(self):
        return ("fake", "llvm", "here", "v1")

    def measure(self, sigs):
        from taso_tvm.cost import Measurement

        self.counters.measurements += len(sigs)
        return {s: Measurement(2.0 if "conv2d" in s.ops else 1.0) for s in sigs}

    def close(self):
        pass


def _graph():
    import numpy as np

    from taso_tvm.graph import NodeStore, TensorGraph, TensorType

    S = NodeStore()
    x = S.input("x", TensorType((1, 4, 8, 8)))
    y = S.add("conv2d", [x, S.weight(np.zeros((4, 4, 3, 3), np.float32))], padding=1)[0]
    y = S.add("maxpool2d", [S.add("relu", [y])[0]], kernel=(2, 2), strides=(2, 2))[0]
    return TensorGraph(S, [S.add("transpose", [y], perm=(0, 2, 3, 1))[0]])


def test_cost_model_reuses_the_cache_across_models(tmp_path):
    from taso_tvm.cost import CostModel, load_cost_config

    cfg = load_cost_config(cache=str(tmp_path / "c.sqlite"))
    g = _graph()
    first = CostModel(cfg, backend=_CountingBackend())
    assert first.graph_cost(g) == 2.0 + 1.0 + 1.0 and first.backend.counters.measurements == 3
    first.close()
    second = CostModel(cfg, backend=_CountingBackend())
    assert second.graph_cost(g) == 4.0
    assert second.backend.counters.measurements == 0 and second.cache_hits == 3


def test_cost_model_survives_a_corrupt_cache_file(tmp_path, caplog):
    from taso_tvm.cost import CostModel, load_cost_config

    path = tmp_path / "c.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00garbage" * 512)  # a damaged database (see test_reliability)
    with caplog.at_level(logging.WARNING, logger="taso_tvm.cost.cache"):
        cm = CostModel(load_cost_config(cache=str(path)), backend=_CountingBackend())
        assert cm.graph_cost(_graph()) == 4.0
        cm.close()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "unreadable" in warnings[0] and "\n" not in warnings[0]
    assert _real()(path).count() == 3
