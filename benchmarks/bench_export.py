"""Relax -> ONNX export time on a BERT-base-like 12-layer encoder.

Builds the model with ``taso_tvm.zoo.get_model("bert", layers=12)`` when the zoo is
available (otherwise an equivalent ONNX BERT encoder built here with ``onnx.helper``),
imports it with TVM's ``from_onnx`` + FoldConstant, and times ``export_relax`` (median of
several runs).  Target: under 2 s.

    python benchmarks/bench_export.py [--layers 12] [--runs 5] [--verify]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _helper_bert(layers=12, seq=128, hidden=768, heads=12, ffn=3072, seed=0) -> onnx.ModelProto:
    """BERT-base encoder (post-LN) with onnx.helper: fallback when taso_tvm.zoo is missing."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    cnt = [0]

    def name(p):
        cnt[0] += 1
        return f"{p}_{cnt[0]}"

    def const(arr):
        n = name("w")
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def i64(vals):
        n = name("s")
        inits.append(numpy_helper.from_array(np.asarray(vals, np.int64), n))
        return n

    def node(op, ins, **kw):
        out = name(op.lower())
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    def linear(x, n_in, n_out):
        w = const(rng.standard_normal((n_in, n_out)) / math.sqrt(n_in))
        return node("Add", [node("MatMul", [x, w]), const(np.zeros(n_out))])

    def layernorm(x):
        return node("LayerNormalization", [x, const(np.ones(hidden)), const(np.zeros(hidden))], axis=-1,
                    epsilon=1e-12)

    dh = hidden // heads
    x = "input"
    for _ in range(layers):
        def heads_of(t, perm):
            return node("Transpose", [node("Reshape", [t, i64([1, seq, heads, dh])])], perm=perm)

        q = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(linear(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k]), const(np.float32(math.sqrt(dh)))])
        c = node("MatMul", [node("Softmax", [s], axis=-1), v])
        c = node("Reshape", [node("Transpose", [c], perm=[0, 2, 1, 3]), i64([1, seq, hidden])])
        x = layernorm(node("Add", [linear(c, hidden, hidden), x]))
        h = linear(x, hidden, ffn)
        g = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, const(np.float32(math.sqrt(2)))])]),
                                                     const(np.float32(1))])]), const(np.float32(0.5))])
        x = layernorm(node("Add", [linear(g, ffn, hidden), x]))
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    g = helper.make_graph(nodes, "bert", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def build_bert(layers: int) -> tuple[onnx.ModelProto, str]:
    try:
        from taso_tvm import zoo

        return zoo.get_model("bert", layers=layers), "taso_tvm.zoo bert"
    except Exception:  # zoo missing or without bert
        return _helper_bert(layers=layers), "onnx.helper bert (bench fallback)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--verify", action="store_true", help="also check_model + compare with ORT")
    ap.add_argument("--target", type=float, default=2.0, help="target seconds (exit 1 if slower)")
    a = ap.parse_args(argv)

    warnings.filterwarnings("ignore")
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from taso_tvm.onnx_io.export import export_relax
    from taso_tvm.quiet import quiet

    t0 = time.perf_counter()
    model, source = build_bert(a.layers)
    t1 = time.perf_counter()
    with quiet():
        mod = from_onnx(model)
    mod = relax.transform.FoldConstant()(mod)
    t2 = time.perf_counter()
    n_bindings = sum(len(b.bindings) for b in mod["main"].body.blocks)

    export_relax(mod)  # warm-up (imports converters, fills schema caches)
    times = []
    for _ in range(a.runs):
        s = time.perf_counter()
        exported = export_relax(mod)
        times.append(time.perf_counter() - s)
    med = statistics.median(times)
    mb = sum(len(t.raw_data) for t in exported.graph.initializer) / 1e6
    print(f"model: {source}, {a.layers} layers; build {t1 - t0:.2f}s, from_onnx+FoldConstant {t2 - t1:.2f}s, "
          f"{n_bindings} Relax bindings")
    print(f"exported: {len(exported.graph.node)} nodes, {len(exported.graph.initializer)} initializers "
          f"({mb:.0f} MB), opset {exported.opset_import[0].version}")
    print(f"export time: median {med:.3f}s over {a.runs} runs (min {min(times):.3f}s, max {max(times):.3f}s); "
          f"target < {a.target:.1f}s: {'OK' if med < a.target else 'SLOW'}")
    if a.verify:
        import onnxruntime as ort

        onnx.checker.check_model(exported, full_check=True)
        x = np.random.default_rng(0).standard_normal((1, 128, 768)).astype(np.float32)
        ref = ort.InferenceSession(model.SerializeToString()).run(None, {model.graph.input[0].name: x})[0]
        got = ort.InferenceSession(exported.SerializeToString()).run(None, {exported.graph.input[0].name: x})[0]
        print(f"verify: check_model(full_check) ok; max |ORT(exported) - ORT(original)| = "
              f"{float(np.max(np.abs(got - ref))):.2e}")
    return 0 if med < a.target else 1


if __name__ == "__main__":
    sys.exit(main())
