"""Fused forms reached on bias-free projections and exporters' opset < 17 forms: the packed attention from
projections without a bias (verified; a wrong zero bias is not), the value of the normal form's constant
expressions read by the cost model (Gelu's 1/sqrt 2), and a layer norm written at opset 14 in the pieces ONNX
Runtime's LayerNormalization fusion reads (ReduceMean, Pow 2; not GlobalAveragePool, not d * d)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.rules import load_rules, read_rule_files
from taso_tvm.rules.verify.verdict import verify_rule
from verified_axioms import verified_axioms

NO_BIAS_RULES = ("pack_attention_projections_no_bias", "pack_split_projections_no_bias")


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


@pytest.fixture(scope="module")
def axioms():
    return verified_axioms()


@pytest.mark.parametrize("name", NO_BIAS_RULES)
def test_bias_free_packing_rules_verify(name, axioms):
    rule = next(r for r in load_rules() if r.name == name)
    assert verify_rule(rule, axioms).status == "verified"


def test_a_packed_bias_of_ones_is_not_verified(axioms, tmp_path):
    f = tmp_path / "rule.yaml"
    f.write_text("""
- name: pack_wrong_bias
  source:
    o: mha(matmul(x, wq), matmul(x, wk), matmul(x, wv), c, m, num_heads=n)
  target:
    w: concat(wq, wk, wv, axis=1)
    o: attention(x, w, add(mul(mean(w, axes=[0]), const(0.0, w)), const(1.0, w)), c, m, num_heads=n)
  where: [weight(wq), weight(wk), weight(wv)]
  verify:
    shapes: {x: [B, S, H], wq: [H, E], wk: [H, E], wv: [H, E], c: [], m: [B, 1, 1, S]}
    dims: {B: [1], S: [2], H: [2], E: [2]}
    attrs: {n: [1]}
    bounded_only: mean has no axioms
""")
    (rule,) = read_rule_files([str(f)])
    assert verify_rule(rule, axioms).status != "verified"


def _gelu_div_model() -> onnx.ModelProto:
    """x (erf(x / sqrt 2) + 1) / 2 as torch exports it."""
    nodes = [helper.make_node("Div", ["x", "r"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "o"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "h"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])],
                          [_const("r", np.sqrt(2.0)), _const("o", 1.0), _const("h", 0.5)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def test_the_normal_form_reads_gelus_constants_as_values():
    """div_by_constant's 1/c is an expression of weights in the normal form; the cost model's kernel signature
    reads its value (not "some weight"), so the kernel measured is ONNX Runtime's Gelu, not its pieces."""
    from taso_tvm.cost.fusion import Partitioner
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.rewrite import rewrite_module
    from taso_tvm.search import SearchConfig, optimize_graph

    got = []

    def grab(lifted):
        got.append(lifted.graph)
        return lifted.graph

    rewrite_module(load_onnx(_gelu_div_model(), fold_constants=False), grab, fold_weights=True)
    best, _ = optimize_graph(got[0], load_rules(), lambda g: float(g.num_runtime_ops), SearchConfig(budget=1))
    (gelu,) = [n for n in best.ops() if n.op == "erf_gelu"]
    assert any(best.store.nodes[i].op not in ("weight", "input") for i, _ in gelu.inputs)  # 1/c: an expression
    (kernel,) = [k for k in Partitioner().kernels(best) if any(n[0] == "erf_gelu" for n in k.sig.nodes)]
    values = [spec[2][1] for spec in kernel.sig.inputs if isinstance(spec[2], tuple)]
    assert any(abs(v - 1 / np.sqrt(2.0)) < 1e-6 for v in values), kernel.sig.inputs


def test_a_layer_norm_at_opset_14_is_fused_by_the_session(tmp_path):
    """The exporter's layer norm at opset 14 (pieces) is one LayerNormalization in ONNX Runtime's session, and
    computes what LayerNormalization does."""
    import onnxruntime as ort

    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.onnx_io.export import export_relax

    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-12)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])],
        [_const("g", rng.standard_normal(16)), _const("b", rng.standard_normal(16))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out = export_relax(load_onnx(model), opset=14)
    assert "GlobalAveragePool" not in [n.op_type for n in out.graph.node]
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort.InferenceSession(out.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert "LayerNormalization" in [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]
    x = rng.standard_normal((1, 8, 16)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {sess.get_inputs()[0].name: x})[0], ref.run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
