"""The runtime's fused operators (graph/ops/fused.py): each decomposition equals ONNX Runtime's own kernel on random
inputs, the exporter writes them as com.microsoft nodes (or, with standard_ops, as default-domain ONNX only), and
on TVM attention lowers to Relax's R.nn.attention where asked."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

from taso_tvm.graph import GraphError, NodeStore, TensorGraph, TensorType
from taso_tvm.graph.ops.decompose import lowering
from taso_tvm.onnx_io.export import export_relax
from taso_tvm.relay_pass.lower import lower_to_module

F32 = "float32"
RNG = np.random.default_rng(7)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _graph(op: str, inputs: dict, weights: dict, **attrs) -> tuple[TensorGraph, dict]:
    """One fused node over named inputs (random feeds) and weights (constants)."""
    st = NodeStore()
    refs = []
    feeds = {}
    for name, value in inputs.items():
        if isinstance(value, tuple):
            feeds[name] = _rand(*value)
            refs.append(st.input(name, TensorType(value, F32)))
        else:
            refs.append(st.weight(np.asarray(value, np.float32)))
    for value in weights.values():
        refs.append(st.weight(np.asarray(value, np.float32)))
    (out,) = st.add(op, refs, **attrs)
    return TensorGraph(st, [out]), feeds


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _export(graph: TensorGraph, feeds: dict, standard_ops: bool = False) -> onnx.ModelProto:
    with lowering("composite"):
        mod = lower_to_module(graph, params=list(feeds))
    return export_relax(mod, standard_ops=standard_ops)


MASK = np.where(RNG.random((2, 1, 1, 7)) < 0.3, -1e4, 0.0).astype(np.float32)
CASES = {
    "mha": ("MultiHeadAttention", lambda: _graph("mha", {"q": (2, 5, 8), "k": (2, 7, 8), "v": (2, 7, 8)},
                                                  {"scale": 0.35, "mask": MASK}, num_heads=2)),
    "mha_unmasked": ("MultiHeadAttention", lambda: _graph("mha", {"q": (1, 4, 12), "k": (1, 4, 12),
                                                                   "v": (1, 4, 12)},
                                                           {"scale": 0.5, "mask": 0.0}, num_heads=3)),
    "attention": ("Attention", lambda: _graph("attention", {"x": (2, 7, 8)},
                                              {"w": _rand(8, 24), "b": _rand(24), "scale": 0.25, "mask": MASK},
                                              num_heads=4)),
    "skip_layernorm": ("SkipLayerNormalization", lambda: _graph(
        "skip_layernorm", {"x": (2, 3, 16), "s": (2, 3, 16)},
        {"g": _rand(16), "b": _rand(16), "bias": _rand(16)}, epsilon=1e-12)),
    "skip_layernorm_no_bias": ("SkipLayerNormalization", lambda: _graph(
        "skip_layernorm", {"x": (2, 3, 16), "s": (2, 3, 16)}, {"g": _rand(16), "b": _rand(16), "bias": 0.0})),
    "bias_gelu": ("BiasGelu", lambda: _graph("bias_gelu", {"x": (2, 3, 16)}, {"b": _rand(16)})),
    "fast_gelu": ("FastGelu", lambda: _graph("fast_gelu", {"x": (2, 3, 16)}, {"b": _rand(16)})),
    "quick_gelu": ("QuickGelu", lambda: _graph("quick_gelu", {"x": (2, 3, 16)}, {})),
    "quick_gelu_alpha_input": ("QuickGelu", lambda: _graph("quick_gelu", {"x": (2, 3, 16)}, {"c": [1.0]})),
    "fused_matmul": ("FusedMatMul", lambda: _graph("fused_matmul", {"a": (2, 5, 3), "b": (2, 4, 5)}, {},
                                                   trans_a=1, trans_b=1, alpha=0.5)),
    "erf_gelu": ("Gelu", lambda: _graph("erf_gelu", {"x": (2, 3, 16)}, {"r": 1 / np.sqrt(2), "o": 1.0, "h": 0.5})),
    "erf_bias_gelu": ("BiasGelu", lambda: _graph("erf_gelu", {"x": (2, 3, 16)},
                                                 {"b": _rand(16), "r": [0.70710677], "o": 1.0, "h": 0.5})),
    "tanh_gelu": ("FastGelu", lambda: _graph("tanh_gelu", {"x": (2, 3, 16)},
                                             {"k": np.sqrt(2 / np.pi), "c": 0.044715, "o": 1.0, "h": 0.5})),
    "tanh_bias_gelu": ("FastGelu", lambda: _graph("tanh_gelu", {"x": (2, 3, 16)},
                                                  {"b": _rand(16), "k": [0.7978846], "c": 0.044715, "o": 1.0,
                                                   "h": [0.5]})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decomposition_equals_the_runtimes_kernel(case):
    op_type, make = CASES[case]
    graph, feeds = make()
    model = _export(graph, feeds)
    fused = [n for n in model.graph.node if n.domain == "com.microsoft"]
    assert [n.op_type for n in fused] == [op_type]
    assert any(o.domain == "com.microsoft" for o in model.opset_import)
    ref = graph.evaluate(feeds)[0]  # the decomposition, in NumPy
    np.testing.assert_allclose(_run(model, feeds), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["mha", "attention", "skip_layernorm", "bias_gelu", "fused_matmul"])
def test_standard_ops_write_the_decomposition(case):
    graph, feeds = CASES[case][1]()
    model = _export(graph, feeds, standard_ops=True)
    assert {n.domain for n in model.graph.node} <= {""} and {o.domain for o in model.opset_import} == {""}
    np.testing.assert_allclose(_run(model, feeds), graph.evaluate(feeds)[0], rtol=1e-4, atol=1e-5)


def test_nan_guard_zeroes_fully_masked_rows_like_torch():
    """torch's exports put where(isnan(p), 0, p) after the softmax: a query whose every key is masked with -inf gives
    0. The fused form (MultiHeadAttention + IsNaN/Where on its output) does the same."""
    mask = np.zeros((1, 1, 3, 4), np.float32)
    mask[0, 0, 1, :] = -np.inf  # query 1 sees no key
    mask[0, 0, 2, 0] = -np.inf
    graph, feeds = _graph("mha", {"q": (1, 3, 8), "k": (1, 4, 8), "v": (1, 4, 8)}, {"scale": 0.5, "mask": mask,
                                                                                   "fill": 0.0}, num_heads=2)
    ref = graph.evaluate(feeds)[0]
    assert np.all(ref[0, 1] == 0) and np.all(np.isfinite(ref))
    model = _export(graph, feeds)
    assert [n.op_type for n in model.graph.node if n.domain] == ["MultiHeadAttention"]
    np.testing.assert_allclose(_run(model, feeds), ref, rtol=1e-4, atol=1e-5)


def test_a_scale_that_is_not_a_constant_is_written_as_the_decomposition():
    graph, feeds = _graph("mha", {"q": (1, 3, 8), "k": (1, 3, 8), "v": (1, 3, 8), "s": ()}, {"mask": 0.0},
                          num_heads=2)
    model = _export(graph, feeds)
    assert not any(n.domain for n in model.graph.node)
    np.testing.assert_allclose(_run(model, feeds), graph.evaluate(feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad,msg", [
    (dict(q=(1, 3, 8), k=(1, 3, 6), v=(1, 3, 8)), "do not fit"),
    (dict(q=(1, 3, 9), k=(1, 3, 9), v=(1, 3, 9)), "not divisible"),
])
def test_attention_shapes_are_checked(bad, msg):
    with pytest.raises(GraphError, match=msg):
        _graph("mha", bad, {"scale": 1.0, "mask": 0.0}, num_heads=2)


def test_tvm_lowers_attention_to_relax_attention():
    graph, feeds = CASES["mha"][1]()
    with lowering("relax_attention"):
        mod = lower_to_module(graph, params=list(feeds))
    assert "attention" in mod.script()
    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    np.testing.assert_allclose(out, graph.evaluate(feeds)[0], rtol=1e-4, atol=1e-5)
    from taso_tvm.runtime.cuda_build import enable_cuda_codegen

    enable_cuda_codegen()
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    with cuda:  # nvcc takes the architecture from the current target (taso_tvm.runtime.cuda_build)
        tvm.compile(mod, cuda)  # builds for CUDA without a GPU


@pytest.mark.parametrize("op, consts", [("erf_gelu", {"r": 0.5, "o": 1.0, "h": 0.5}),
                                       ("tanh_gelu", {"k": 0.8, "c": 0.044715, "o": 1.0, "h": 0.5})])
def test_gelu_with_other_constants_is_written_as_the_decomposition(op, consts):
    graph, feeds = _graph(op, {"x": (2, 3, 16)}, consts)
    model = _export(graph, feeds)
    assert not any(n.domain for n in model.graph.node)
    np.testing.assert_allclose(_run(model, feeds), graph.evaluate(feeds)[0], rtol=1e-5, atol=1e-6)
