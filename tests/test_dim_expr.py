"""Symbolic dims written as expressions of others (a KV cache's mask is `past + 1` long): bound from their names'
values, solved from a value given for them, and a model using them runs at every binding the driver picks."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from taso_tvm.onnx_opt.prepare import PrepareError, make_binding, second_bindings
from taso_tvm.runtime.check import random_feeds, run_onnx
from taso_tvm.errors import ModelError
from taso_tvm.runtime.dim_expr import base_dims, dim_value, parse


def test_parse_and_evaluate():
    e = parse("past_sequence_length + 1")
    assert e.names == ("past_sequence_length",) and e.value({"past_sequence_length": 7}) == 8
    assert e.solve(9, {}) == {"past_sequence_length": 8}
    assert parse("Max(s0, 2*s1)").names == ("s0", "s1") and dim_value("Max(s0, 2*s1)", {"s0": 5, "s1": 2}) == 5
    for plain in ("batch", "unk__3", "batch_size", "1", "a.b", "f(x)", "x ** 2"):
        assert parse(plain) is None, plain
    assert base_dims("batch") == ("batch",) and base_dims("s0 + s1") == ("s0", "s1")
    assert parse("s0 - 2").solve(1, {}) == {"s0": 3} and parse("2*s0").solve(3, {}) is None
    assert parse("12 // s").solve(4, {}) == {"s": 3}  # s = 0 skipped, not a crash
    with pytest.raises(ModelError, match="'a // b' divides by zero at a=4, b=0"):
        parse("a // b").value({"a": 4, "b": 0})


def _cache_model() -> onnx.ModelProto:
    """y = Concat(past, new) * mask: the mask's length is `past + 1`, written as the exporter writes it."""
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past"])
    new = helper.make_tensor_value_info("new", TensorProto.FLOAT, ["batch", 1])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "past + 1"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "past + 1"])
    g = helper.make_graph([helper.make_node("Concat", ["past", "new"], ["c"], axis=1),
                           helper.make_node("Mul", ["c", "mask"], ["y"])], "cache", [past, new, mask], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_bindings_keep_the_relation():
    m = _cache_model()
    first = make_binding(m)
    assert set(first.dims) == {"batch", "past"}
    assert first.shapes["mask"][1] == first.shapes["past"][1] + 1
    for b in second_bindings(first, m):
        assert b.shapes["mask"][1] == b.shapes["past"][1] + 1
    given = make_binding(m, {"mask": [2, 10]})  # the expression solved for the dim it names
    assert given.dims["past"] == 9 and given.shapes["past"] == [2, 9]
    with pytest.raises(PrepareError, match="past \\+ 1"):
        make_binding(m, {"past": [2, 4], "mask": [2, 9]})


def test_random_feeds_run_a_cache_model():
    m = _cache_model()
    for dims in ({}, {"past": 5}):
        feeds = random_feeds(m, dims=dims)
        assert feeds["mask"].shape[1] == feeds["past"].shape[1] + 1
        out = run_onnx(m, feeds)["y"]
        np.testing.assert_allclose(out, np.concatenate([feeds["past"], feeds["new"]], 1) * feeds["mask"])
