"""Rules into the fused operators: the shipped ones verify (test_rules_library checks every library rule), broken
variants do not, and attention in torch's TorchScript (legacy) and dynamo exports of a small BERT fuses into ONNX
Runtime's MultiHeadAttention through the normalizing rules, with the result equal to the original in ORT."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from taso_tvm.rules import read_rule_files
from taso_tvm.rules.verify.verdict import verify_rule
from verified_axioms import verified_axioms

DATA = Path(__file__).parent / "data"
HEADS_WHERE = """
  where:
    - weight(c)
    - numel(c) == 1 and ndim(c) <= 1
    - ndim(q) == 3 and ndim(k) == 3 and ndim(v) == 3
    - len(s1) == 4 and s1 == [dim(q, 0), dim(q, 1), s1[2], dim(q, 2) // s1[2]]
    - s2 == [dim(k, 0), dim(k, 1), s1[2], dim(k, 2) // s1[2]]
    - s3 == [dim(v, 0), dim(v, 1), s1[2], dim(v, 2) // s1[2]]
    - s4 == [dim(q, 0), dim(q, 1), dim(v, 2)]
  verify:
    shapes: {q: [B, S, E], k: [B, L, E], v: [B, L, F], c: [], m: [B, 1, S, L]}
    dims: {B: [1, 2], S: [2], L: [3], E: [4], F: [4]}
    attrs: {s1: [[1, 2, 2, 2], [2, 2, 2, 2], [1, 2, 1, 4]]}
"""


def _mha_rule(name: str, k_perm: str = "[0, 2, 3, 1]", target: str = "mha(q, k, v, c, m, num_heads=s1[2])") -> str:
    return f"""
- name: {name}
  source:
    qh: transpose(reshape(q, shape=s1), perm=[0, 2, 1, 3])
    kt: transpose(reshape(k, shape=s2), perm={k_perm})
    vh: transpose(reshape(v, shape=s3), perm=[0, 2, 1, 3])
    p: softmax(add(mul(matmul(qh, kt), c), m), axis=-1)
    o: reshape(transpose(matmul(p, vh), perm=[0, 2, 1, 3]), shape=s4)
  target:
    o: {target}
{HEADS_WHERE}"""


WRONG = {
    "right": (_mha_rule("right"), "verified"),
    # K split into heads like Q, not transposed: another product
    "wrong_perm": (_mha_rule("wrong_perm", k_perm="[0, 2, 1, 3]"), "refuted"),
    # the scale squared
    "wrong_scale": (_mha_rule("wrong_scale", target="mha(q, k, v, mul(c, c), m, num_heads=s1[2])"), "not verified"),
    # the mask added along the query axis instead of the key axis
    "wrong_mask_axis": (_mha_rule("wrong_mask_axis",
                                  target="mha(q, k, v, c, transpose(m, perm=[0, 1, 3, 2]), num_heads=s1[2])"),
                        "not verified"),
}


@pytest.fixture(scope="module")
def axioms():
    return verified_axioms()


def _verdict(text: str, axioms, tmp_path) -> str:
    """The verifier's status for the one rule written in `text` (YAML)."""
    f = tmp_path / "rule.yaml"
    f.write_text(text)
    (rule,) = read_rule_files([str(f)])
    return verify_rule(rule, axioms).status


@pytest.mark.parametrize("case", sorted(WRONG))
def test_attention_rule_verifies_only_when_right(case, axioms, tmp_path):
    text, want = WRONG[case]
    if case == "wrong_mask_axis":  # a mask that transposes needs a square one
        text = text.replace("m: [B, 1, S, L]", "m: [B, 1, S, S]").replace("L: [3]", "L: [2]")
    if case == "wrong_perm":  # q kᵀ with k not transposed builds only where the key length is the head size
        text = text.replace("L: [3]", "L: [2]")
    f = tmp_path / f"{case}.yaml"
    f.write_text(text)
    (rule,) = read_rule_files([str(f)])
    res = verify_rule(rule, axioms)
    if want == "not verified":
        assert res.status != "verified", res.reason()
    else:
        assert res.status == want, res.reason()


def test_dropping_the_nan_guard_is_not_verified(axioms, tmp_path):
    """where(isnan(p), 0, p) differs from p in IEEE arithmetic (a fully masked row): no rule may drop it."""
    assert _verdict("""
- name: drop_guard
  source:
    p: softmax(x, axis=-1)
    g: where(isnan(p), z, p)
  target:
    g: softmax(x, axis=-1)
  where: [weight(z), numel(z) == 1]
  verify: {shapes: {x: [A, B], z: []}}
""", axioms, tmp_path) != "verified"


def test_packing_projections_in_the_wrong_order_is_refuted(axioms, tmp_path):
    assert _verdict("""
- name: pack_swapped
  source:
    o: mha(add(matmul(x, wq), bq), add(matmul(x, wk), bk), add(matmul(x, wv), bv), c, m, num_heads=n)
  target:
    o: attention(x, concat(wk, wq, wv, axis=1), concat(bk, bq, bv, axis=0), c, m, num_heads=n)
  where: [weight(wq), weight(wk), weight(wv), weight(bq), weight(bk), weight(bv)]
  verify:
    shapes: {x: [B, S, H], wq: [H, E], wk: [H, E], wv: [H, E], bq: [E], bk: [E], bv: [E], c: [], m: [B, 1, 1, S]}
    dims: {B: [1], S: [2], H: [2], E: [2]}
    attrs: {n: [1]}
""", axioms, tmp_path) == "refuted"


def _fused(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if n.domain == "com.microsoft"]


def _session_fused(model: onnx.ModelProto) -> list[str]:
    """The fused operators ONNX Runtime's session runs for `model` (its own fusions included: Add + Gelu is
    BiasGelu there, so the search need not write it)."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = f"{d}/opt.onnx"
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return _fused(onnx.load(f"{d}/opt.onnx"))


@pytest.mark.parametrize("name", ["bert", "sentence_encoder"])  # torch dynamo and TorchScript exports
def test_attention_of_a_torch_export_fuses(name):
    from taso_tvm.runtime.check import check_onnx
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.onnx_opt.driver import feeds_at
    from taso_tvm.onnx_opt.prepare import make_binding, second_bindings

    model = onnx.load(str(DATA / "real_models" / f"{name}.onnx"))
    out, report = optimize_onnx(model, time_check=False)
    assert _fused(out).count("MultiHeadAttention") + _fused(out).count("Attention") == 2, report.decision
    assert [[d.dim_param for d in i.type.tensor_type.shape.dim] for i in out.graph.input] == \
        [[d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input]  # symbolic dims kept
    first = make_binding(model, None)
    for binding in (first, second_bindings(first, model)[1]):  # a binding the optimizer did not check
        check_onnx(model, out, [feeds_at(model, binding, seed=3)])


def test_gpt2_attention_and_tanh_gelu_fuse():
    """GPT-2's form (benchmarks/peers/gpt2_blocks.py, tiny): Q, K, V split from one packed projection, a causal
    mask sliced from a buffer to the run-time length (a value that depends on the sequence dim, read by the region
    as a run-time input) and torch's tanh GELU: Attention and FastGelu in every block, equal at a binding the
    optimizer did not check."""
    from taso_tvm.runtime.check import check_onnx
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.onnx_opt.driver import feeds_at
    from taso_tvm.onnx_opt.prepare import make_binding

    model = onnx.load(str(DATA / "gpt2_blocks_tiny.onnx"))
    out, report = optimize_onnx(model, time_check=False)
    fused = _fused(out)
    assert fused.count("Attention") == 2 and fused.count("FastGelu") == 2, (fused, report.decision)
    assert sum(n.op_type == "Slice" for n in out.graph.node) == 4  # the masks are still sliced at run time
    for shape in ([1, 64], [2, 40]):  # 64 positions: the optimizer checked sequence 64 and 32
        check_onnx(model, out, [feeds_at(model, make_binding(model, {"input_ids": shape}), seed=3)])


def test_paddle_attention_fuses():
    """paddle2onnx's form (benchmarks/peers/paddle_encoder.py, tiny, opset 17): the query scale written as x * s + 0
    (paddle's `scale` op; the + 0 lifts as x) and a [B, 1, 1, S] mask, expanded along the query axis to the run-time
    length in the written Attention: equal at bindings the optimizer did not check."""
    from taso_tvm.runtime.check import check_onnx
    from taso_tvm.onnx_opt import optimize_onnx
    from taso_tvm.onnx_opt.driver import feeds_at
    from taso_tvm.onnx_opt.prepare import make_binding

    model = onnx.load(str(DATA / "paddle_encoder_tiny.onnx"))
    out, report = optimize_onnx(model, time_check=False)
    fused, ran = _fused(out), _session_fused(out)
    assert fused.count("Attention") == 2 and ran.count("BiasGelu") == 2, (fused, ran, report.decision)
    for shape in ([1, 20], [2, 33]):
        binding = make_binding(model, {"input_ids": shape, "attention_mask": shape})
        check_onnx(model, out, [feeds_at(model, binding, seed=5)])


def test_tanh_gelu_with_a_square_for_the_cube_is_not_verified(axioms, tmp_path):
    assert _verdict("""
- name: tanh_gelu_square
  source: {y: "mul(mul(x, add(tanh(mul(add(x, mul(mul(x, x), c)), k)), o)), h)"}
  target: {y: "tanh_gelu(x, k, c, o, h)"}
  verify: {shapes: {x: [A, B], k: [], c: [], o: [], h: []}}
""", axioms, tmp_path) != "verified"


def test_standard_ops_output_has_only_the_default_domain(tmp_path):
    out = tmp_path / "bert.std.onnx"
    r = subprocess.run([sys.executable, "-m", "taso_tvm.cli", "optimize", str(DATA / "real_models" / "bert.onnx"),
                        "-o", str(out), "--standard-ops", "--no-time-check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = onnx.load(str(out))
    assert {n.domain for n in m.graph.node} <= {"", "ai.onnx"} and {o.domain for o in m.opset_import} == {""}
    assert "optimized" in r.stdout


def _generated_pairs(tmp_path, ops: list) -> set:
    from taso_tvm.rules.generate import generate_rules

    out = tmp_path / "fused.yaml"
    res = generate_rules(2, ops=ops, kinds=["mat", "row"], jobs=1, out=str(out), time_budget=240)
    assert res.complete
    return {(frozenset(n.op for n in r.source), frozenset(n.op for n in r.target))
            for r in read_rule_files([str(out)])}


def test_the_generator_finds_rules_into_fused_operators(tmp_path):
    """Fused operators are in the generator's operator set: gelu(x + b) = bias_gelu(x, b) is discovered, verified
    and written."""
    pairs = _generated_pairs(tmp_path, ["add", "gelu", "bias_gelu"])
    assert (frozenset({"add", "gelu"}), frozenset({"bias_gelu"})) in pairs


@pytest.mark.slow
def test_the_generator_finds_fused_matmul_with_a_transposed_operand(tmp_path):
    pairs = _generated_pairs(tmp_path, ["matmul", "transpose", "fused_matmul"])
    assert any("fused_matmul" in t and "transpose" in s for s, t in pairs)



@pytest.mark.parametrize("alpha", [None, 1.702])  # torch's SiLU (x sigmoid(x)); CLIP's quick_gelu
def test_swish_and_quick_gelu_rewrite_into_quick_gelu(alpha):
    """ONNX Runtime fuses Sigmoid and Mul into QuickGelu itself, so the cost model sees no gain and the search keeps
    either form; the rules are proven (test_rules_library) and, applied, written as QuickGelu equal to the original."""
    from taso_tvm.graph import NodeStore, TensorGraph, TensorType
    from taso_tvm.graph.ops.decompose import lowering
    from taso_tvm.onnx_io.export import export_relax
    from taso_tvm.relay_pass.lower import lower_to_module
    from taso_tvm.rules import apply_match, find_matches, load_rules

    st = NodeStore()
    x = st.input("x", TensorType((3, 16), "float32"))
    (h,) = st.add("matmul", [x, st.weight(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))])
    arg = h if alpha is None else st.add("mul", [h, st.weight(np.array(alpha, np.float32))])[0]
    (s,) = st.add("sigmoid", [arg])
    (y,) = st.add("mul", [s, h])  # sigmoid first: the matcher takes mul both ways
    g = TensorGraph(st, [y])
    rule = load_rules()["fuse_silu" if alpha is None else "fuse_quick_gelu"]
    (m,) = find_matches(rule, g)
    fused = apply_match(rule, g, m)
    with lowering("composite"):
        model = export_relax(lower_to_module(fused, params=["x"]))
    q = [n for n in model.graph.node if n.domain == "com.microsoft"]
    assert [n.op_type for n in q] == ["QuickGelu"]
    assert abs(onnx.helper.get_attribute_value(q[0].attribute[0]) - (alpha or 1.0)) < 1e-6
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)}
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, g.evaluate(feeds)[0], rtol=1e-4, atol=1e-5)


def test_quick_gelu_with_the_wrong_alpha_is_not_verified(axioms, tmp_path):
    assert _verdict("""
- name: silu_wrong
  source: {y: "mul(x, sigmoid(x))"}
  target: {y: "quick_gelu(x, alpha=1.702)"}
  verify: {shapes: {x: [A, B]}}
""", axioms, tmp_path) != "verified"
