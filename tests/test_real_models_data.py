"""The real-model set is what its manifest says: valid ONNX, runnable at both test values of every symbolic dim,
symbolic dims named as listed, and every listed kind present in the graph."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Callable

import numpy as np
import onnx
import pytest

import real_models as rm

ort = pytest.importorskip("onnxruntime")

MAX_COMMITTED_BYTES = 5_000_000
# the small set must cover these (issue #10)
REQUIRED_KINDS = {"cnn", "classifier", "transformer", "detector", "resize_shape_chain", "lstm", "gru", "if",
                  "pad_reflect", "pad_edge", "dynamic_batch", "dynamic_sequence", "dynamic_spatial"}


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in rm.all_nodes(model.graph))


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {out: n for n in rm.all_nodes(model.graph) for out in n.output if out}


def _has_shape_ancestor(name: str, producers: dict[str, onnx.NodeProto]) -> bool:
    seen, todo = set(), [name]
    while todo:
        node = producers.get(todo.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "Shape":
            return True
        todo.extend(i for i in node.input if i)
    return False


def _resize_from_shape(model: onnx.ModelProto) -> bool:
    """A Resize whose scales or sizes are computed from a tensor's Shape (FPN-style upsampling)."""
    producers = _producers(model)
    return any(_has_shape_ancestor(i, producers) for n in rm.all_nodes(model.graph) if n.op_type == "Resize"
               for i in n.input[1:] if i)


def _pad_mode(model: onnx.ModelProto, mode: str) -> bool:
    return any(n.op_type == "Pad" and any(a.name == "mode" and a.s == mode.encode() for a in n.attribute)
               for n in rm.all_nodes(model.graph))


def _channel_shuffle(model: onnx.ModelProto) -> bool:
    """Reshape -> Transpose(0, 2, 1, 3, 4) -> Reshape, ShuffleNet's channel shuffle."""
    producers = _producers(model)
    for n in rm.all_nodes(model.graph):
        if n.op_type == "Reshape":
            t = producers.get(n.input[0])
            if t is not None and t.op_type == "Transpose" and list(t.attribute[0].ints) == [0, 2, 1, 3, 4]:
                r = producers.get(t.input[0])
                if r is not None and r.op_type == "Reshape":
                    return True
    return False


def _residual(model: onnx.ModelProto) -> bool:
    """An Add of a convolution's result (maybe normalised or activated) and another activation."""
    producers = _producers(model)
    branch = {"Conv", "BatchNormalization", "InstanceNormalization", "Relu"}
    for n in rm.all_nodes(model.graph):
        if n.op_type == "Add" and len(n.input) == 2:
            a, b = (producers.get(i) for i in n.input)
            if a is not None and b is not None and (a.op_type in branch or b.op_type in branch) \
                    and a.op_type != "Constant" and b.op_type != "Constant":
                return True
    return False


def _embedding(model: onnx.ModelProto) -> bool:
    weights = {t.name for t in model.graph.initializer}
    return any(n.op_type == "Gather" and n.input[0] in weights for n in rm.all_nodes(model.graph))


def _symbolic(model: rm.RealModel, dim: str) -> bool:
    return any(dim in inp["shape"] for inp in model.entry["inputs"])


# kind -> (model, onnx) -> present; every kind a manifest may list has a check here
KIND_CHECKS: dict[str, Callable[[rm.RealModel, onnx.ModelProto], bool]] = {
    "cnn": lambda m, g: _ops(g)["Conv"] > 0,
    "classifier": lambda m, g: _ops(g)["Gemm"] + _ops(g)["MatMul"] > 0 and all(
        len(o.type.tensor_type.shape.dim) == 2 for o in g.graph.output),
    "residual": lambda m, g: _residual(g),
    "channel_shuffle": lambda m, g: _channel_shuffle(g),
    "transformer": lambda m, g: _ops(g)["Softmax"] > 0 and _ops(g)["MatMul"] > 0,
    "encoder": lambda m, g: any(i["dtype"] == "int64" and "sequence" in i["shape"] for i in m.entry["inputs"]),
    "detector": lambda m, g: _ops(g)["Resize"] > 0 and _ops(g)["Conv"] > 0,
    "resize_shape_chain": lambda m, g: _resize_from_shape(g),
    "nms": lambda m, g: _ops(g)["NonMaxSuppression"] > 0,
    "topk": lambda m, g: _ops(g)["TopK"] > 0,
    "if": lambda m, g: _ops(g)["If"] > 0,
    "lstm": lambda m, g: _ops(g)["LSTM"] > 0,
    "gru": lambda m, g: _ops(g)["GRU"] > 0,
    "embedding": lambda m, g: _embedding(g),
    "pad_reflect": lambda m, g: _pad_mode(g, "reflect"),
    "pad_edge": lambda m, g: _pad_mode(g, "edge"),
    "audio": lambda m, g: any(i["dtype"] == "float32" and "samples" in i["shape"] for i in m.entry["inputs"]),
    "dynamic_batch": lambda m, g: _symbolic(m, "batch"),
    "dynamic_sequence": lambda m, g: _symbolic(m, "sequence"),
    "dynamic_spatial": lambda m, g: _symbolic(m, "height") and _symbolic(m, "width"),
}

COMMITTED = rm.committed_models()


def _ids(models: list[rm.RealModel]) -> list[str]:
    return [m.name for m in models]


def _session(path) -> "ort.InferenceSession":
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def check_manifest_entry(model: rm.RealModel) -> None:
    e = model.entry
    g = model.load()
    assert e["opset"] == next(o.version for o in g.opset_import if o.domain in ("", "ai.onnx"))
    assert e["ir_version"] == g.ir_version
    assert e["outputs"] == [o.name for o in g.graph.output]
    weights = {t.name for t in g.graph.initializer}
    file_inputs = {i.name: i for i in g.graph.input if i.name not in weights}
    assert [i["name"] for i in e["inputs"]] == list(file_inputs)
    for inp in e["inputs"]:
        dims = file_inputs[inp["name"]].type.tensor_type.shape.dim
        assert len(inp["shape"]) == len(dims) == len(inp["file_shape"])
        for listed, in_file, d in zip(inp["shape"], inp["file_shape"], dims):
            if isinstance(listed, int):
                assert d.dim_value == listed
            else:
                assert listed in e["dims"] and len(e["dims"][listed]) == 2
                assert not (d.HasField("dim_value") and d.dim_value > 0), f"{inp['name']}: {listed} fixed in file"
            if isinstance(in_file, str):
                assert d.dim_param == in_file
        assert onnx.helper.tensor_dtype_to_np_dtype(file_inputs[inp["name"]].type.tensor_type.elem_type) == \
            np.dtype(inp["dtype"])
    assert set(e["kinds"]) <= set(KIND_CHECKS), f"unchecked kinds {set(e['kinds']) - set(KIND_CHECKS)}"
    missing = [k for k in e["kinds"] if not KIND_CHECKS[k](model, g)]
    assert not missing, f"{model.name}: kinds {missing} not found in the graph"


def check_runs(model: rm.RealModel) -> None:
    sess = _session(model.path)
    for k, dims in enumerate(model.dim_values()):
        outs = sess.run(None, rm.feeds(model.entry, dims, seed=k))
        assert outs, model.name
        for o in outs:
            if o.dtype.kind == "f":
                assert np.isfinite(o).all(), f"{model.name}: non-finite output at {dims}"


def test_committed_set_is_small_and_complete() -> None:
    names = _ids(COMMITTED)
    assert len(set(names)) == len(names) and names
    on_disk = {p.name for p in rm.COMMITTED_DIR.glob("*.onnx")}
    assert on_disk == {m.path.name for m in COMMITTED}
    assert sum(m.path.stat().st_size for m in COMMITTED) < MAX_COMMITTED_BYTES
    covered = {k for m in COMMITTED for k in m.entry["kinds"]}
    assert REQUIRED_KINDS <= covered, f"small set lacks {REQUIRED_KINDS - covered}"
    exporters = {m.entry["exporter"]["name"] for m in COMMITTED}
    assert any("dynamo=True" in x for x in exporters) and any("dynamo=False" in x for x in exporters)


@pytest.mark.parametrize("model", COMMITTED, ids=_ids(COMMITTED))
def test_committed_model_checks(model: rm.RealModel) -> None:
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == model.entry["sha256"]
    onnx.checker.check_model(str(model.path), full_check=True)


@pytest.mark.parametrize("model", COMMITTED, ids=_ids(COMMITTED))
def test_committed_manifest_entry(model: rm.RealModel) -> None:
    check_manifest_entry(model)


@pytest.mark.parametrize("model", COMMITTED, ids=_ids(COMMITTED))
def test_committed_model_runs_at_both_dim_values(model: rm.RealModel) -> None:
    check_runs(model)


def test_feeds_respect_manifest() -> None:
    entry = next(m.entry for m in COMMITTED if m.name == "bert")
    dims = {"batch": 4, "sequence": 9}
    f = rm.feeds(entry, dims, seed=1)
    ids, mask = f["input_ids"], f["attention_mask"]
    assert ids.shape == mask.shape == (4, 9) and ids.dtype == mask.dtype == np.int64
    lo, hi = next(i["range"] for i in entry["inputs"] if i["name"] == "input_ids")
    assert ids.min() >= lo and ids.max() < hi
    assert mask[0].all() and mask[:, 0].all()  # first row full, every row keeps a token
    assert (np.diff(mask, axis=1) <= 0).all()  # ones then zeros
    np.testing.assert_array_equal(rm.feeds(entry, dims, seed=1)["input_ids"], ids)
    with pytest.raises(KeyError, match="sequence"):
        rm.feeds(entry, {"batch": 1})
    scalar = {"name": "x", "inputs": [{"name": "sr", "dtype": "int64", "shape": [], "values": [16000]}], "dims": {}}
    assert rm.feeds(scalar, {})["sr"].shape == () and int(rm.feeds(scalar, {})["sr"]) == 16000


def test_cache_absent_skips_with_reason(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(rm.CACHE_ENV, str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="make_real_models.py"):
        rm.cache_models()
    (tmp_path / rm.MANIFEST).write_text(json.dumps({"models": []}))
    with pytest.raises(pytest.skip.Exception, match="absent"):
        rm.cache_models(["bert"])


CACHED = rm.cache_manifest_models()


@pytest.mark.slow
@pytest.mark.parametrize("model", CACHED, ids=_ids(CACHED))
def test_cached_model_is_as_listed(model: rm.RealModel) -> None:
    onnx.checker.check_model(str(model.path), full_check=True)
    check_manifest_entry(model)
    check_runs(model)
