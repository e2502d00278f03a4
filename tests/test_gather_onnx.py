"""ONNX Gather through TVM's frontend: its negative-index form is read back as one Gather (`graph/ops/gather_form`),
so Gathers are searched, and a BERT-style embedding in an ONNX file becomes EmbedLayerNormalization."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm.relax.frontend.onnx import from_onnx

from taso_tvm.onnx_io.export import export_relax
from taso_tvm.onnx_opt import optimize_onnx

RNG = np.random.default_rng(3)
B, S, V, E = 2, 8, 30, 16


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _gather_model(ids_type: int, axis: int, shape: tuple = (4, 5, 3)) -> onnx.ModelProto:
    data = numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), "data")
    node = helper.make_node("Gather", ["data", "ids"], ["y"], axis=axis)
    out_shape = list(shape[:axis]) + [2, 2] + list(shape[axis + 1:])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("ids", ids_type, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [data])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("ids_type,axis,fold", [(TensorProto.INT64, 0, False), (TensorProto.INT32, 1, False),
                                                (TensorProto.INT64, 2, True)])
def test_frontend_gather_is_written_back_as_one_gather(ids_type, axis, fold):
    import tvm

    model = _gather_model(ids_type, axis)
    mod = from_onnx(model, opset=17)
    if fold:
        mod = tvm.relax.transform.FoldConstant()(mod)
    out = export_relax(mod, opset=17)
    assert [n.op_type for n in out.graph.node] == ["Gather"]
    ids = np.array([[-1, 0], [2, -2]], dtype=np.int64 if ids_type == TensorProto.INT64 else np.int32)
    np.testing.assert_array_equal(_run(out, {"ids": ids}), _run(model, {"ids": ids}))


def test_lifted_take_keeps_negative_indices_in_tvm():
    import tvm
    from tvm import relax

    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.relay_pass.lower import lower_to_module

    model = _gather_model(TensorProto.INT64, 0, (4, 3))
    lifted = lift_function(from_onnx(model, opset=17)["main"])[0]
    assert [n.op for n in lifted.graph.topo_order() if n.op not in ("input", "weight")] == ["take"]
    mod = lower_to_module(lifted.graph, params=["ids"])
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    ids = np.array([[-1, 0], [2, -4]], dtype=np.int64)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(ids)).numpy(), _run(model, {"ids": ids}))


def _embeddings(position_input: bool) -> onnx.ModelProto:
    """BERT's embeddings as exporters write them: word, position and token-type Gathers, two Adds, LayerNorm."""
    w = lambda n, *s: numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), n)
    inits = [w("word", V, E), w("pos", S, E), w("seg", 2, E), w("gamma", E), w("beta", E)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [B, S]) for n in ("input_ids", "token_type_ids")]
    if position_input:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, S]))
    else:
        inits.append(numpy_helper.from_array(np.arange(S, dtype=np.int64)[None], "position_ids"))
    nodes = [helper.make_node("Gather", ["word", "input_ids"], ["w"]),
             helper.make_node("Gather", ["seg", "token_type_ids"], ["t"]),
             helper.make_node("Gather", ["pos", "position_ids"], ["p"]),
             helper.make_node("Add", ["w", "t"], ["wt"]), helper.make_node("Add", ["wt", "p"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)]
    g = helper.make_graph(nodes, "embeddings", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, E])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("position_input", [False, True])
def test_onnx_embeddings_become_embed_layernormalization(position_input):
    model = _embeddings(position_input)
    feeds = {"input_ids": RNG.integers(0, V, (B, S)), "token_type_ids": RNG.integers(0, 2, (B, S))}
    if position_input:
        feeds["position_ids"] = np.arange(S, dtype=np.int64)[None]
    out, report = optimize_onnx(model, time_check=False, inputs=feeds)
    ops = [n.op_type for n in out.graph.node]
    assert "EmbedLayerNormalization" in ops and "Gather" not in ops, (ops, report.decision)
    np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-4, atol=1e-4)
