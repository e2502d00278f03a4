"""load_onnx: import, clean-up, and one-line errors for bad input."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from taso_tvm import ModelLoadError, load_onnx
from taso_tvm.onnx_io import parse_shapes


def _relu_model(op: str = "Relu", dims=("N", 4)) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node(op, ["a"], ["y"], name="second")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError) as e:
        load_onnx(tmp_path / "nope.onnx")
    assert str(e.value) == f"cannot read '{tmp_path / 'nope.onnx'}': no such file"


def test_corrupt_bytes(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x08\x07garbage\xff\xfe not a protobuf")
    with pytest.raises(ModelLoadError) as e:
        load_onnx(p)
    msg = str(e.value)
    assert msg.startswith(f"'{p}' is not an ONNX model") and "\n" not in msg


def test_unsupported_operator_names_op_and_node():
    with pytest.raises(ModelLoadError) as e:
        load_onnx(_relu_model("FancyOp"))
    msg = str(e.value)
    assert "operator FancyOp" in msg and "'second'" in msg and "\n" not in msg


def test_input_shapes_fix_symbolic_dims():
    mod = load_onnx(_relu_model(), shapes={"x": [3, 4]})
    assert [int(d) for d in mod["main"].params[0].ty.shape] == [3, 4]
    with pytest.raises(ModelLoadError, match="'z', which is not a graph input"):
        load_onnx(_relu_model(), shapes={"z": [1]})


def test_symbolic_dims_survive_without_shapes():
    mod = load_onnx(_relu_model())
    assert str(mod["main"].params[0].ty.shape[0]) == "N"


def test_weights_bound_and_folded():
    w = onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    mod = load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    f = mod["main"]
    assert len(f.params) == 1  # the weight is a constant, not a parameter
    ops = [b.value.op.name for b in f.body.blocks[0].bindings]
    assert ops == ["relax.matmul"]  # the transpose of a constant was folded


def test_parse_shapes():
    assert parse_shapes("name:[1,3,224,224],mask:[1,128]") == {"name": [1, 3, 224, 224], "mask": [1, 128]}
    with pytest.raises(ModelLoadError):
        parse_shapes("x:[a,b]")
    with pytest.raises(ModelLoadError):
        parse_shapes("garbage")
