"""The TVM cost model's kernels are the kernels of the build: for a small encoder layer, as imported and as the search
writes it (fused attention, skip layer norms, GELU: grouped on their decompositions, `cost.decomposed`, as the TVM
backend groups), the model's kernels equal the PrimFunc calls of the module
`taso-tvm compile` builds (the CPU schedules' pipeline: layout passes, LegalizeOps with the fast erf, FoldConstant,
FuseOps, FuseTIR), compared by the tensors each kernel writes; and the kernels the model measures are built with
that pipeline, so a GELU kernel calls no scalar libm erf."""
from __future__ import annotations

import collections
import re

import pytest
import tvm
from tvm import relax

from taso_tvm.cost import Partitioner
from taso_tvm.graph import TensorGraph

TARGET = {"kind": "llvm"}


def _encoder_graph(fused: bool) -> TensorGraph:
    from taso_tvm import zoo
    from taso_tvm.graph import fold_weights
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.rewrite import rewrite_module

    got = []

    def grab(lifted):
        got.append(lifted.graph)
        return lifted.graph

    model = zoo.get_model("bert", layers=1, seq_len=16, hidden=32, heads=2, ffn=64)
    rewrite_module(load_onnx(model), grab, fold_weights=True)
    graph = fold_weights(got[0])
    if not fused:
        return graph
    from taso_tvm.rules import load_rules
    from taso_tvm.search import SearchConfig, optimize_graph

    best, _ = optimize_graph(graph, load_rules(), lambda g: float(g.num_runtime_ops), SearchConfig(budget=4))
    return best


def _shape(ty) -> tuple:
    return (tuple(int(d) for d in ty.shape), str(ty.dtype))


def model_kernels(graph: TensorGraph) -> collections.Counter:
    """The TVM cost model's kernels (its backend's grouping on llvm), each as the sorted (shape, dtype) of the tensors
    it writes."""
    from taso_tvm.cost import load_cost_config
    from taso_tvm.cost.backends.tvm_backend import TvmBackend
    from taso_tvm.cost.kernel import rebuild

    backend = TvmBackend(load_cost_config(backend="tvm", target=TARGET))
    c: collections.Counter = collections.Counter()
    try:
        ks = backend.grouping(Partitioner(), None).kernels(graph)
    finally:
        backend.close()
    for k in ks:
        _, _, nodes = rebuild(k.sig)
        c[tuple(sorted(_shape(nodes[i].types[j]) for i, j in k.sig.outputs))] += 1
    return c


def build_kernels(graph: TensorGraph) -> collections.Counter:
    """The PrimFunc calls of the module the build makes of `graph` (lowered as the search writes it), each as the
    sorted (shape, dtype) of the tensors it writes."""
    from taso_tvm.relay_pass.lower import lower_to_function
    from taso_tvm.schedule import schedule_module

    mod, _ = schedule_module(tvm.IRModule({"main": lower_to_function(graph)}), tvm.target.Target(TARGET))
    c: collections.Counter = collections.Counter()
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                ty = b.var.ty
                outs = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
                c[tuple(sorted(_shape(t) for t in outs))] += 1
    return c


@pytest.mark.parametrize("fused", [False, True], ids=["imported", "searched"])
def test_model_kernels_are_the_builds_kernels(fused):
    g = _encoder_graph(fused)
    if fused:
        assert {"attention", "skip_layernorm"} & {n.op for n in g.ops()}, "the search reached no fused form"
    ours, built = model_kernels(g), build_kernels(g)
    assert sum(ours.values()) == sum(built.values()), (ours, built)
    assert ours == built


def test_a_gelu_kernel_is_measured_without_scalar_erf():
    """The cost model builds a GELU kernel as the build does: erf as the vectorized polynomial, not a call of libm's
    erff per element, whose time depends on the values (the model's random arrays are not the model's
    activations)."""
    from taso_tvm.cost.backends.tvm_build import bind_weights, kernel_pipeline
    from taso_tvm.cost.relax_kernel import kernel_module

    (k,) = {k.sig for k in Partitioner().kernels(_encoder_graph(False)) if "erf" in k.sig.ops}
    tgt = tvm.target.Target(TARGET)
    with tgt:
        ex = tvm.compile(bind_weights(kernel_module(k), k), target=tgt, relax_pipeline=kernel_pipeline(tgt))
    source = ex.jit().imports[0].inspect_source("ll")
    assert "fused_" in source and not re.search(r"call [^\n@]*@erff\(", source)
