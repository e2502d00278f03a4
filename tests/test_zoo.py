"""Tests for the model zoo (taso_tvm.zoo): every model builds, checks and runs in onnxruntime."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from taso_tvm import zoo

ort = pytest.importorskip("onnxruntime")

# small variants keep the suite fast; bert at full depth is only built (see below)
SMALL_KWARGS = {"bert": {"layers": 2}}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimize:  # saves seconds on the 100M-parameter light models
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _assert_non_degenerate(out: np.ndarray) -> None:
    assert np.isfinite(out).all()
    assert float(out.std()) > 1e-6


@pytest.mark.parametrize("name", zoo.list_models())
def test_zoo_model_builds_checks_and_runs(name: str) -> None:
    model = zoo.get_model(name, **SMALL_KWARGS.get(name, {}))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    assert [o.name for o in model.graph.output] == ["output"]
    feeds = zoo.random_inputs(model)
    assert feeds and all(v.dtype == np.float32 for v in feeds.values())
    (out,) = _run(model, feeds)
    _assert_non_degenerate(out)


def test_zoo_is_deterministic_per_seed() -> None:
    a, b, c = (zoo.get_model("seed_example", seed=s) for s in (0, 0, 1))
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()
    x, y = zoo.random_inputs(a, seed=3), zoo.random_inputs(a, seed=3)
    np.testing.assert_array_equal(x["input"], y["input"])


def test_model_registry() -> None:
    expected = {"resnet50", "resnext50", "nasnet_a", "nasrnn", "squeezenet", "inception_v3", "bert", "seed_example"}
    assert set(zoo.list_models()) == expected
    assert set(zoo.MODELS) == expected
    for name, info in zoo.MODELS.items():
        assert info.name == name and info.description and callable(info.builder)


def test_bert_layers() -> None:
    small = zoo.get_model("bert", layers=2)
    full = zoo.get_model("bert")
    assert len(small.graph.node) < len(full.graph.node)
    assert len(full.graph.node) == 6 * len(small.graph.node)
    ops = {n.op_type for n in full.graph.node}
    assert {"LayerNormalization", "Erf", "Softmax", "MatMul"} <= ops


def test_nasrnn_inputs() -> None:
    model = zoo.get_model("nasrnn")
    assert [i.name for i in model.graph.input] == [f"x_{i}" for i in range(5)]
    assert {n.op_type for n in model.graph.node} == {"MatMul", "Add", "Mul", "Sigmoid", "Tanh", "Relu"}


def test_resnext_uses_grouped_conv() -> None:
    model = zoo.get_model("resnext50")
    groups = {a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"}
    assert groups == {32}


def test_unknown_model() -> None:
    with pytest.raises(ValueError, match="unknown zoo model 'nope'; available: .*resnet50"):
        zoo.get_model("nope")


LIGHT = zoo.light_models()


def test_light_models_found() -> None:
    assert len(LIGHT) == 9


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: os.path.basename(p)[len("light_"):-len(".onnx")])
def test_light_model_randomized_and_runs(path: str) -> None:
    model = zoo.load_light(path, seed=0)
    # (onnx.checker is skipped here: serializing vgg19's 570 MB twice is slow; onnxruntime validates it)
    assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
    inits = {t.name for t in model.graph.initializer}
    assert not inits & {i.name for i in model.graph.input}
    conv_weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv"}
    assert conv_weights and conv_weights <= inits
    for t in model.graph.initializer:
        if t.name in conv_weights:
            w = numpy_helper.to_array(t)
            assert not np.allclose(w, 0.02) and float(w.std()) > 1e-3
    feeds = zoo.random_inputs(model)
    assert len(feeds) == 1
    out = _run(model, feeds, optimize=False)[0]
    _assert_non_degenerate(out)


def test_load_light_by_name_and_seed() -> None:
    a = zoo.load_light("squeezenet", seed=0)
    b = zoo.load_light("light_squeezenet.onnx", seed=0)
    c = zoo.load_light("squeezenet", seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()
    with pytest.raises(ValueError, match="unknown light model"):
        zoo.load_light("nope")


def test_randomize_weights_keeps_scalars_and_changes_weights() -> None:
    model = zoo.get_model("bert", layers=1)
    rnd = zoo.randomize_weights(model, seed=5)
    before = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in rnd.graph.initializer}
    assert before.keys() == after.keys()
    for name, arr in before.items():
        if arr.size <= 1 or arr.dtype != np.float32:
            np.testing.assert_array_equal(arr, after[name])  # Div/Gelu constants, reshape targets
        else:
            assert not np.array_equal(arr, after[name]), name
    (out,) = _run(rnd, zoo.random_inputs(rnd))
    _assert_non_degenerate(out)
