"""Shape reads moved off the layers (`onnx_opt.shape_reads`): a read of one dim that the graph's inputs name reads it
from the input, at the input's axis, and computes the same at every binding; a read of several dims stays."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.onnx_opt.shape_reads import restore_shape_reads, rewire_shape_reads
from taso_tvm.runtime.check import run_onnx


def _model(read: str) -> onnx.ModelProto:
    """k [batch, 3, past + seq, 4] (a layer's keys: the past concatenated with the new ones; its shape as torch's
    exporter declares it) read by `read`; the mask [batch, past + seq] names the same length on its axis 1."""
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 3, "past", 4])
    new = helper.make_tensor_value_info("new", TensorProto.FLOAT, ["batch", 3, "seq", 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "past + seq"])
    nodes = [helper.make_node("Concat", ["past", "new"], ["k"], axis=2),
             helper.make_node("Relu", ["k"], ["r"])]
    inits = []
    if read == "gather":
        inits.append(numpy_helper.from_array(np.array(-2, np.int64), "i"))
        nodes += [helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Gather", ["s", "i"], ["n"])]
    elif read == "gather_1d":
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "i"))
        nodes += [helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Gather", ["s", "i"], ["n"])]
    else:  # Shape with start (and end): one dim, or from start to the end
        kw = {"start": 2, "end": 3} if read == "slice" else {"start": 2}
        nodes.append(helper.make_node("Shape", ["r"], ["n"], **kw))
    out = helper.make_tensor_value_info("n", TensorProto.INT64, None)
    y = helper.make_tensor_value_info("r", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [past, new, mask], [out, y], inits,  # the length as the exporter names it
                              value_info=[helper.make_tensor_value_info("k", TensorProto.FLOAT,
                                                                        ["batch", 3, "past + seq", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("read, moved", [("gather", True), ("gather_1d", True), ("slice", True), ("to_end", False)])
def test_a_read_of_one_dim_an_input_names_reads_the_input(read, moved):
    model = _model(read)
    out, before = rewire_shape_reads(model)
    shapes = [n.input[0] for n in out.graph.node if n.op_type == "Shape"]
    # (a read of several dims reads the earliest tensor of the same shape instead, as before: k, before the Relu)
    assert shapes == (["mask"] if moved else ["k"]), shapes
    rng = np.random.default_rng(0)
    for batch, past, seq in ((1, 4, 1), (2, 0, 5)):
        feeds = {"past": rng.standard_normal((batch, 3, past, 4)).astype(np.float32),
                 "new": rng.standard_normal((batch, 3, seq, 4)).astype(np.float32),
                 "mask": np.ones((batch, past + seq), np.int64)}
        want, got = run_onnx(model, feeds), run_onnx(out, feeds)
        assert np.array_equal(want["n"], got["n"]) and want["n"].shape == got["n"].shape, (want["n"], got["n"])
    # where no rewrite needed the move (the tensor read is still there), the user's nodes come back as they were
    back = restore_shape_reads(out, before)
    assert {n.SerializeToString() for n in back.graph.node} == {n.SerializeToString() for n in model.graph.node}
    assert {t.name for t in back.graph.initializer} == {t.name for t in model.graph.initializer}
