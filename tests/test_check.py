"""The safety net: one set of rules (names, count, shape, dtype, non-finite values, scaled tolerances, exact
integers, sane tolerances) on arrays, in ONNX Runtime, on built Relax modules, and wired into TasoOptimize and
taso_tvm.optimize, where a deliberately wrong rule must be caught."""
import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import taso_tvm as taso
from taso_tvm import load_onnx, zoo
from taso_tvm.runtime.check import (CheckError, CheckFailed, check_onnx, check_relax, check_tolerances, compare,
                            compare_arrays, compare_outputs, random_feeds, run_onnx)
from taso_tvm.relay_pass.taso_pass import TasoOptimize
from taso_tvm.rules import RuleSet, parse_rules

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3)).astype(np.float32)


def one_line(e):
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


# ----------------------------------------------------------------------------------------- the rules
def test_equal_and_close_outputs_pass():
    assert compare_arrays("y", X, X.copy()) == 0.0
    big = X * 1e4  # tolerance scales with the output: 1e-4 x 1e4 absolute here
    assert compare_arrays("y", big + np.float32(0.5), big) == pytest.approx(0.5, rel=1e-3)
    nan = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare_arrays("y", nan, nan.copy()) == 0.0  # non-finite values where the original has the same ones
    assert compare_arrays("e", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)) == 0.0


@pytest.mark.parametrize("got,reason", [
    (X.reshape(3, 2), "has shape (3, 2), the original (2, 3)"),
    (X.astype(np.float64), "has dtype float64, the original float32"),
    (np.where(X > 0, np.nan, X).astype(np.float32), "is nan at index"),
    (np.where(X > 0, np.inf, X).astype(np.float32), "is inf at index"),
    (X + np.float32(0.01), "differs from the original by up to 0.01"),
])
def test_differences_fail_naming_output_and_reason(got, reason):
    with pytest.raises(CheckFailed) as e:
        compare_arrays("logits", got, X)
    msg = one_line(e)
    assert msg.startswith("output 'logits'") and reason in msg


def test_nonfinite_values_must_match_the_original():
    want = np.array([1.0, np.nan, np.inf], np.float32)
    for got in ([1.0, 0.0, np.inf], [1.0, np.nan, -np.inf], [1.0, np.inf, np.inf]):
        with pytest.raises(CheckFailed, match="where the original is"):
            compare_arrays("y", np.array(got, np.float32), want)


def test_integers_and_bools_compare_exactly():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    b = a.copy()
    b[1, 2] += 1
    with pytest.raises(CheckFailed) as e:
        compare_arrays("idx", b, a, rtol=1.0, atol=1.0)  # tolerances do not apply to integers
    assert "at 1 of 12 elements, first at index (1, 2) (7 vs 6)" in one_line(e)
    with pytest.raises(CheckFailed):
        compare_arrays("mask", np.array([True, True]), np.array([True, False]))


@pytest.mark.parametrize("rtol,atol", [(float("nan"), 1e-4), (1e-3, float("inf")), (-1e-3, 1e-4), ("x", 0.0),
                                       (None, 0.0)])
def test_tolerances_must_be_finite_and_not_negative(rtol, atol):
    with pytest.raises(CheckError) as e:
        compare_outputs({"y": X + 1}, {"y": X}, rtol=rtol, atol=atol)
    assert "must be a finite number >= 0" in one_line(e)
    check_tolerances(0, 0)  # zero is exact, and allowed


def test_outputs_match_by_name_count_and_order():
    want = {"a": X, "b": X}
    with pytest.raises(CheckFailed, match="output 'b' is missing from the optimized model"):
        compare_outputs({"a": X}, want)
    with pytest.raises(CheckFailed, match="extra output 'c'"):
        compare_outputs({"a": X, "b": X, "c": X}, want)
    with pytest.raises(CheckFailed, match="another order"):
        compare_outputs({"b": X, "a": X}, want)
    with pytest.raises(CheckFailed, match="has 1 outputs, the original 2"):
        compare(["a", "b"], [X], [X, X])
    assert compare(["a", "b"], [X, X], [X, X]) == {"a": 0.0, "b": 0.0}


# ----------------------------------------------------------------------------------------- ONNX
def _model(op="Relu", out="y", extra_output=False, in_shape=("batch", 4), dtype=TensorProto.FLOAT):
    nodes = [helper.make_node(op, ["x"], [out])]
    outputs = [helper.make_tensor_value_info(out, dtype, None)]
    if extra_output:
        nodes.append(helper.make_node("Identity", ["x"], ["x_copy"]))
        outputs.append(helper.make_tensor_value_info("x_copy", dtype, None))
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", dtype, list(in_shape))], outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_random_feeds_bind_symbolic_dims_and_shapes():
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    g = helper.make_graph([], "g", [ids, mask, x, helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
                          [ids], [w])
    m = helper.make_model(g)
    f = random_feeds(m, {"batch": 2, "seq": 5})
    assert list(f) == ["ids", "mask", "x"]  # initializers are not inputs to feed
    assert f["ids"].shape == (2, 5) and f["ids"].dtype == np.int64 and 0 <= f["ids"].min() and f["ids"].max() < 8
    assert f["mask"].dtype == bool and f["x"].shape == (2, 3, 1) and f["x"].dtype == np.float32
    assert random_feeds(m, {"x": [4, 3, 7]})["x"].shape == (4, 3, 7)
    assert random_feeds(m, {"batch": 2}, shapes={"x": [4, 3, 7]})["x"].shape == (4, 3, 7)
    assert random_feeds(m)["ids"].shape == (1, 1)
    np.testing.assert_array_equal(random_feeds(m, seed=3)["x"], random_feeds(m, seed=3)["x"])
    with pytest.raises(CheckError, match="'btach' is neither an input nor a symbolic dim"):
        random_feeds(m, {"btach": 2})


def test_check_onnx_passes_the_same_function_and_reports_the_difference():
    orig = _model("Relu")
    feeds = [random_feeds(orig, {"batch": b}, seed=b) for b in (1, 3)]
    assert run_onnx(orig, feeds[1])["y"].shape == (3, 4)
    assert check_onnx(orig, _model("Relu"), feeds) == {"y": 0.0}
    with pytest.raises(CheckFailed) as e:
        check_onnx(orig, _model("Sigmoid"), feeds)
    assert one_line(e).startswith("output 'y' differs from the original")
    with pytest.raises(CheckFailed, match="output 'y' is missing"):
        check_onnx(orig, _model("Relu", out="z"), feeds)
    with pytest.raises(CheckFailed, match="extra output 'x_copy'"):
        check_onnx(orig, _model("Relu", extra_output=True), feeds)
    with pytest.raises(CheckError, match="no inputs"):  # never a vacuous pass
        check_onnx(orig, _model("Sigmoid"), [])


def test_check_onnx_catches_a_nan_output():
    orig = _model("Abs")
    with pytest.raises(CheckFailed, match="is nan at index .* where the original is"):
        check_onnx(orig, _model("Log"), random_feeds(orig))  # log of negative inputs


def test_a_model_onnx_runtime_refuses_is_one_line():
    orig = _model("Relu")
    bad = _model("NoSuchOp")
    with pytest.raises(CheckFailed) as e:
        check_onnx(orig, bad, random_feeds(orig))
    assert one_line(e).startswith("ONNX Runtime cannot load the optimized model")
    with pytest.raises(CheckError) as e:
        check_onnx(bad, orig, random_feeds(orig))
    assert one_line(e).startswith("ONNX Runtime cannot load the original model")
    assert issubclass(CheckError, CheckFailed)  # `except CheckFailed` catches every "not verified"
    with pytest.raises(CheckError, match="cannot load the model"):
        run_onnx(bad, random_feeds(orig))


# ----------------------------------------------------------------------------------------- Relax
def _relax(op, symbolic=True):
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64") if symbolic else 2
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op(x))
            out = bb.emit_output(relax.Tuple([y, bb.emit(relax.op.add(y, y))]))
        bb.emit_func_output(out)
    return bb.get()


def test_check_relax_binds_symbolic_dims_and_compares_tuple_outputs():
    res = check_relax(_relax(relax.op.nn.relu), _relax(relax.op.nn.relu), dims={"n": 3})
    assert res == {"main[0]": 0.0, "main[1]": 0.0}
    with pytest.raises(CheckFailed) as e:
        check_relax(_relax(relax.op.nn.relu), _relax(relax.op.sigmoid))
    assert one_line(e).startswith("output 'main[0]' differs from the original")
    private = _relax(relax.op.nn.relu)
    private["main"] = private["main"].without_attr("global_symbol")
    with pytest.raises(CheckError, match="nothing could be checked"):  # never a vacuous pass
        check_relax(private, private)


# ----------------------------------------------------------------------------------------- the pass and optimize
WRONG = """
- name: wrong_drop_relu_after_conv
  doc: deliberately wrong (the relu is dropped); only this test loads it, unverified
  source:
    y: conv2d(x, w, activation=none, **c)
    z: relu(y)
  target:
    z: conv2d(x, w, activation=none, **c)
"""


def op_count(graph):
    """A cost under which the wrong rule (one operator fewer) always wins."""
    return float(graph.num_ops)


@pytest.fixture(scope="module")
def wrong_rules():
    return RuleSet(parse_rules(WRONG, "wrong.yaml"))


@pytest.fixture(scope="module")
def seed_model():
    return zoo.get_model("seed_example", channels=8, size=8)


def test_pass_check_passes_a_real_rewrite(seed_model):
    p = TasoOptimize(cost="analytic", check=True)
    p(load_onnx(seed_model))
    assert p.report.total.rules_applied  # the search did rewrite it
    assert p.report.check == {"main": pytest.approx(0.0, abs=1e-4)}


def test_pass_check_catches_a_wrong_rewrite(seed_model, wrong_rules):
    mod = load_onnx(seed_model)
    out = TasoOptimize(rules=wrong_rules, cost=op_count)(mod)  # unchecked, the wrong graph goes through
    assert out.script().count("relu") < mod.script().count("relu")
    with pytest.raises(CheckFailed) as e:
        TasoOptimize(rules=wrong_rules, cost=op_count, check=True)(mod)
    assert one_line(e).startswith("output 'main' differs from the original")
    with pytest.raises(CheckFailed):  # the exception keeps its type through Sequential
        tvm.transform.Sequential([TasoOptimize(rules=wrong_rules, cost=op_count, check=True)])(mod)
    with pytest.raises(CheckError):
        TasoOptimize(check=True, check_rtol=float("nan"))


def _conv_relu_graph():
    g = taso.new_graph()
    x = g.new_input(dims=(1, 4, 6, 6))
    w = g.new_weight(dims=(4, 4, 3, 3))
    g.relu(g.conv2d(input=x, weight=w, padding="SAME"))
    return g


def test_optimize_check_on_a_builder_graph():
    best = taso.optimize(_conv_relu_graph(), cost="analytic", check=True)
    assert [n.op for n in best.to_tensor_graph().ops()] == ["conv2d"]  # relu fused, and checked


def test_optimize_check_catches_a_wrong_rewrite_on_each_face(wrong_rules, seed_model):
    with pytest.raises(CheckFailed):
        taso.optimize(_conv_relu_graph(), rules=wrong_rules, cost=op_count, check=True)
    with pytest.raises(CheckFailed) as e:
        taso.optimize(seed_model, rules=wrong_rules, cost=op_count, check=True)
    out_name = seed_model.graph.output[0].name
    assert one_line(e).startswith(f"output '{out_name}' differs")  # ONNX: checked in ONNX Runtime, by name
    with pytest.raises(CheckFailed):
        taso.optimize(load_onnx(seed_model), rules=wrong_rules, cost=op_count, check=True)
    good = taso.optimize(seed_model, cost="analytic", check=True, time_check=False)
    assert isinstance(good, onnx.ModelProto)
