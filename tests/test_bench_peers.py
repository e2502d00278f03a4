"""benchmarks/bench_peers.py: the FLOPs it counts, and one row on the committed tiny BERT (every variant timed in
one alternating run, each output compared, a tool that cannot handle the model reported in its cell)."""
from __future__ import annotations

import pytest

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402


def test_flops_of_matmul_gemm_and_conv():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "k")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Gemm", ["y2", "w2"], ["z"], transB=1),
             helper.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1])]
    inits.append(numpy_helper.from_array(rng.standard_normal((5, 16)).astype(np.float32), "w2"))
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 7, 8]),
                                       helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3, 16]),
                                       helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z", "c")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.zeros((2, 7, 8), np.float32), "y2": np.zeros((3, 16), np.float32),
             "img": np.zeros((1, 3, 6, 6), np.float32)}
    want = 2 * (2 * 7 * 16) * 8 + 2 * (3 * 5) * 16 + 2 * (1 * 4 * 6 * 6) * (3 * 3 * 3)
    assert bench_peers.matmul_flops(m, feeds) == want


def test_one_row_on_the_committed_bert(tmp_path):
    (model,) = [m for m in bench_peers.manifest_models(ROOT / "tests" / "data" / "real_models") if m.name == "bert"]
    cells = {c.variant: c for c in bench_peers.bench(model, 16, tmp_path, time_cap=3, guard_cap=2, peak=100.0)}
    assert set(cells) == set(bench_peers.VARIANTS)
    assert cells["original"].ok and cells["original"].ratio == 1.0 and cells["original"].median_ms > 0
    for v in ("onnxsim", "ort-opt", "taso", "ort-opt+taso"):  # each ran, loads, equals the original, was timed
        assert cells[v].ok, (v, cells[v].note)
        assert cells[v].median_ms > 0 and cells[v].tool_seconds > 0
    assert "Attention" in cells["taso"].fused or "MultiHeadAttention" in cells["taso"].fused or \
        cells["taso"].note.startswith("original")  # fused, unless the guard timed it no faster here
    md = bench_peers.markdown([{"model": "bert", "seq": 16, "gflop": 0.1,
                                "cells": [bench_peers.asdict(c) for c in cells.values()]}], 100.0)
    assert "| bert | 16 |" in md and "vs best peer" in md


@pytest.mark.slow  # 20 s: every tool run and timed again; a whole bench row is the test above
def test_a_tool_that_fails_is_a_cell_not_a_crash(tmp_path):
    """ORT's transformer optimizer has nothing to do with a gated MLP: its cell says so, the others are timed."""
    (model,) = [m for m in bench_peers.manifest_models(ROOT / "tests" / "data" / "real_models")
                if m.name == "gated_mlp"]
    cells = {c.variant: c for c in bench_peers.bench(model, model.seqs[0], tmp_path, time_cap=2, guard_cap=1,
                                                     peak=100.0)}
    assert not cells["ort-opt"].ok and "not a transformer" in cells["ort-opt"].note
    assert not cells["ort-opt+taso"].ok
    assert cells["original"].ok and cells["taso"].ok and cells["taso"].median_ms > 0


def _skip_ln_model(path: Path) -> None:
    """Add + LayerNormalization (ORT's session fuses it into SkipLayerNormalization at ORT_ENABLE_EXTENDED), then a
    com.microsoft Gelu written in the file."""
    h = 8
    inits = [numpy_helper.from_array(np.ones(h, np.float32), "g"),
             numpy_helper.from_array(np.zeros(h, np.float32), "b")]
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Gelu", ["n"], ["out"], domain="com.microsoft")]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, h]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "t", ins, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, h])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_fused_counts_of_the_file_and_of_ort_session(tmp_path):
    path = tmp_path / "t.onnx"
    _skip_ln_model(path)
    assert bench_peers.fused_counts(path) == {"Gelu": 1} == bench_peers.fused_counts(onnx.load(str(path)))
    assert bench_peers.session_fused_counts(path, "basic") == {"Gelu": 1}
    assert bench_peers.session_fused_counts(path) == {"Gelu": 1, "SkipLayerNormalization": 1}


def test_no_attention_flag_and_markdown_of_old_and_new_rows():
    enc = bench_peers.Model("enc", Path("enc.onnx"), lambda s: {}, [128], "bert", 12, 384, encoder=True)
    dec = bench_peers.Model("dec", Path("dec.onnx"), lambda s: {}, [128], "gpt2", 12, 768, encoder=False)
    no_attn = {"ort-opt": bench_peers.Cell("ort-opt", fused={"SkipLayerNormalization": 6, "BiasGelu": 3})}
    attn = {"ort-opt": bench_peers.Cell("ort-opt", fused={"Attention": 3})}
    assert bench_peers.row_flags(enc, no_attn) == [bench_peers.NO_ATTENTION_FLAG]
    assert bench_peers.row_flags(enc, attn) == [] and bench_peers.row_flags(dec, no_attn) == []
    cells = [bench_peers.Cell(v, median_ms=10.0, ratio=0.9, ci=(0.85, 0.95), gflops=1.0) for v in bench_peers.VARIANTS]
    cells[3].vs_peer, cells[3].vs_peer_ci, cells[3].best_peer = 0.95, (0.9, 0.99), "ort-opt"
    cells[3].fused, cells[3].session_fused = {"Attention": 3}, {"Attention": 3, "Gelu": 3}
    new = {"model": "enc", "seq": 128, "gflop": 1.0, "flags": [bench_peers.NO_ATTENTION_FLAG], "ahead": None,
           "cells": [bench_peers.asdict(c) for c in cells]}
    old = {"model": "old", "seq": 128, "gflop": 1.0, "cells": [{k: v for k, v in bench_peers.asdict(c).items()
                                                                 if k not in ("vs_peer_ci", "best_peer",
                                                                              "session_fused")} for c in cells]}
    md = bench_peers.markdown([old, new], 100.0)
    assert "| old | 128 |" in md and bench_peers.NO_ATTENTION_FLAG in md
    assert "[1.010, 1.111] (ort-opt)" in md and "wrote: Attention 3<br>session: Attention 3, Gelu 3" in md


def test_each_variant_is_timed_in_several_sessions_in_turn(tmp_path):
    """Where ONNX Runtime places a session's buffers moves its runs by several %: each variant's runner runs its file
    in SESSIONS sessions in turn, a file that differs from the original is a failed cell, not a runner."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    paths = {}
    for name, weight in (("original", w), ("same", w.copy()), ("wrong", 2 * w)):
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
        paths[name] = tmp_path / f"{name}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(paths[name]))
    cells = {v: bench_peers.Cell(v) for v in paths}
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    runners, names = bench_peers.checked_runners(cells, paths, list(paths), feeds, lambda c, p: None)
    assert names == ["original", "same"] and not cells["wrong"].ok
    want = feeds["x"] @ w
    for run in runners:
        assert run.sessions == bench_peers.SESSIONS
        for _ in range(bench_peers.SESSIONS + 1):
            np.testing.assert_allclose(run()[0], want, rtol=1e-5)
