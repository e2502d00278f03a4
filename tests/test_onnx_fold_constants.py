"""Never behind onnxsim: values the preparation folds to the same constant at both bindings are written folded;
values that depend on a symbolic dim are not."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.runtime.check import check_onnx
from taso_tvm.onnx_opt.driver import feeds_at
from taso_tvm.onnx_opt.fold_constants import binding_independent_constants, fold_into
from taso_tvm.onnx_opt.prepare import make_binding, prepare, second_bindings

DATA = Path(__file__).parent / "data" / "real_models"


def _chains() -> onnx.ModelProto:
    """y = x * (Shape(w)[1] as float) + x[...] reshaped by Shape(x)[0]: the first scale depends on no symbolic dim,
    the reshape's target on the batch."""
    w = numpy_helper.from_array(np.ones((2, 5), np.float32), "w")
    idx = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(0, np.int64),
                                                                                             "zero"),
           numpy_helper.from_array(np.array([0], np.int64), "ax"), numpy_helper.from_array(np.array([-1], np.int64),
                                                                                           "m1")]
    nodes = [helper.make_node("Shape", ["w"], ["sw"], name="shape_w"),
             helper.make_node("Gather", ["sw", "one"], ["k"], name="gather_w", axis=0),
             helper.make_node("Cast", ["k"], ["kf"], name="cast_w", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "kf"], ["xs"], name="scale"),
             helper.make_node("Shape", ["xs"], ["sx"], name="shape_x"),
             helper.make_node("Gather", ["sx", "zero"], ["n"], name="gather_x", axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["nu"], name="unsq"),
             helper.make_node("Concat", ["nu", "m1"], ["tgt"], name="target", axis=0),
             helper.make_node("Reshape", ["xs", "tgt"], ["y"], name="flat")]
    g = helper.make_graph(nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])], [w] + idx)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_value_of_static_dims_is_folded_and_one_of_a_symbolic_dim_is_not():
    m = _chains()
    first = make_binding(m)
    prep = prepare(m, second=second_bindings(first, m)[0])
    consts = binding_independent_constants(prep)
    assert "kf" in consts and float(consts["kf"]) == 5.0
    assert not {"sx", "n", "nu", "tgt"} & set(consts)  # computed from the batch
    out, gone = fold_into(m, consts)
    names = {n.name for n in out.graph.node}
    assert gone == 3 and not names & {"shape_w", "gather_w", "cast_w"}
    assert {"shape_x", "gather_x", "unsq", "target", "flat"} <= names
    onnx.checker.check_model(out, full_check=True)
    check_onnx(m, out, [feeds_at(m, make_binding(m, dims=d)) for d in ({"N": 1}, {"N": 4}, {"N": 7})])


def test_the_written_model_is_folded_where_onnxsim_would_fold(tmp_path):
    """sentence_encoder (torch TorchScript): its binding-independent chains (position and token-type ids, static
    shapes) are written folded by optimize_onnx, symbolic dims kept, equal at other bindings."""
    from taso_tvm.onnx_opt import optimize_onnx

    m = onnx.load(str(DATA / "sentence_encoder.onnx"))
    out, report = optimize_onnx(m, time_check=False)
    assert report.folded_nodes > 0, report.decision
    assert len(out.graph.node) < len(m.graph.node) - report.folded_nodes
    assert [i.SerializeToString() for i in out.graph.input] == [i.SerializeToString() for i in m.graph.input]
    first = make_binding(m)
    check_onnx(m, out, [feeds_at(m, b, seed=2) for b in second_bindings(first, m)[1:]])


def _two_dims(op: str) -> onnx.ModelProto:
    """y = x * f(H, W) for x [1, 3, H, W], f = H / W (integer division: the ratio) or H > W (the order), each of
    which is the same at two bindings that scale both dims alike."""
    idx = [numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(3, np.int64),
                                                                                            "three")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "two"], ["h"], name="h", axis=0),
             helper.make_node("Gather", ["s", "three"], ["w"], name="w", axis=0),
             helper.make_node(op, ["h", "w"], ["r"], name="f"),
             helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "rf"], ["y"], name="scale")]
    g = helper.make_graph(nodes, "two_dims", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "H", "W"])], idx)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Div", "Greater"])
def test_a_value_of_two_dims_alike_at_both_bindings_is_not_folded(op):
    """The bindings scale every dim alike (H = W = 64, then 128): the ratio H / W and the order H > W are the same at
    both, yet depend on the dims (a detector's resize to a fixed short side: FCOS's folded sizes were those of a square
    image). Two more bindings, the dims out of ratio and in both orders, keep them computed; the driver's second
    binding is itself out of ratio where two dims are above 1."""
    m = _two_dims(op)
    first = make_binding(m)
    doubled = second_bindings(first, m)[1]  # (the first candidate is skewed already: the driver's own choice)
    assert doubled.dims == {"H": 128, "W": 128}
    prep = prepare(m, second=doubled)
    assert float(prep.folded[0].consts["rf"]) == float(prep.folded[1].consts["rf"])  # alike at both bindings
    assert "rf" not in binding_independent_constants(prep)
    assert second_bindings(first, m)[0].dims == {"H": 128, "W": 160}
