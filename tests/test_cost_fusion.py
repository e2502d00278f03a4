"""The cost model's kernel partition agrees with TVM's FuseOps (pattern table, hand graphs, zoo models)."""
from __future__ import annotations

import collections
import re
import time

import numpy as np
import pytest
import tvm
from tvm import relax

from taso_tvm.cost import Partitioner
from taso_tvm.cost.kernel import KernelSig
from taso_tvm.cost.op_facets import TVM_NAMES
from taso_tvm.cost.patterns import expand, tvm_names
from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.graph.ops import OPS, facet
from taso_tvm.graph.ops.facets import has_facet

F32 = "float32"


def _w(shape):
    return np.random.default_rng(0).standard_normal(shape).astype(F32)


def _lower(graph: TensorGraph) -> tvm.IRModule:
    from taso_tvm.relay_pass.lower import lower_to_function

    return tvm.IRModule({"main": lower_to_function(graph)})


def _legalized(mod: tvm.IRModule) -> tvm.IRModule:
    with tvm.target.Target({"kind": "llvm"}):
        return tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()])(mod)


def _fused(mod: tvm.IRModule) -> tvm.IRModule:
    with tvm.target.Target({"kind": "llvm"}):
        return tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                         relax.transform.FoldConstant(), relax.transform.FuseOps(),
                                         relax.transform.FuseTIR()])(mod)


_BASES = sorted({n for op in OPS if has_facet(op, TVM_NAMES) for n in facet(op, TVM_NAMES)}
                | {"tir_sigmoid", "tir_tanh"}, key=len, reverse=True)


def _parse(name: str) -> tuple:
    """PrimFunc name (FuseTIR joins the fused functions' names) -> sorted base operator names."""
    name = re.sub(r"^fused_", "", name)
    out = []
    while name:
        for b in _BASES:
            m = re.match(re.escape(b) + r"\d*(_|$)", name)
            if m:
                out.append(b.replace("tir_", ""))
                name = name[m.end():]
                break
        else:
            raise ValueError(f"unknown PrimFunc name part {name!r}")
    return tuple(sorted(out))


def tvm_kernels(mod: tvm.IRModule) -> collections.Counter:
    """Kernels TVM makes of `main`: one per call_tir after FuseOps + FuseTIR, by operator names."""
    c: collections.Counter = collections.Counter()
    for block in _fused(mod)["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                c[_parse(v.args[0].name_hint)] += 1
    return c


def our_kernels(graph: TensorGraph) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for k in Partitioner().kernels(graph):
        names: list[str] = []
        for op, attrs, _ in k.sig.nodes:
            names += tvm_names(op, dict(attrs))
        c[tuple(sorted(names))] += 1
    return c


# ---------------------------------------------------------------- the pattern table is TVM's
def _pattern_cases():
    S = NodeStore()
    x = S.input("x", TensorType((1, 8, 16, 16)))
    m = S.input("m", TensorType((16, 16)))
    g8 = S.input("g8", TensorType((8,)))
    g16 = S.input("g16", TensorType((16,)))
    cases = {
        "conv": ("conv2d", [x, S.input("w", TensorType((8, 8, 3, 3)))], dict(padding=(1, 1, 1, 1))),
        "conv_depthwise": ("conv2d", [x, S.input("wd", TensorType((8, 1, 3, 3)))], dict(groups=8)),
        "matmul": ("matmul", [m, m], {}),
        "matmul_batched": ("matmul", [S.input("b3", TensorType((2, 16, 16))), m], {}),
        "maxpool": ("maxpool2d", [x], dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
        "avgpool": ("avgpool2d", [x], dict(kernel=(2, 2), strides=(2, 2))),
        "mean": ("mean", [x], dict(axes=(2, 3))),
        "mean_keep": ("mean", [x], dict(axes=(1,), keepdims=True)),
        "softmax": ("softmax", [m], {}),
        "layernorm": ("layernorm", [m, g16, g16], {}),
        "batchnorm": ("batchnorm", [x, g8, g8, g8, g8], {}),
        "concat": ("concat", [x, x], dict(axis=1)),
        "split": ("split", [x], dict(axis=1, sizes=(3, 5))),
        "transpose": ("transpose", [x], dict(perm=(0, 2, 3, 1))),
        "reshape": ("reshape", [x], dict(shape=(8, 256))),
        "enlarge": ("enlarge", [S.input("w1", TensorType((8, 8, 1, 1)))], dict(kernel=(3, 3))),
        "add_same": ("add", [x, x], {}),
        "add_bias": ("add", [x, S.input("b", TensorType((1, 8, 1, 1)))], {}),
        "add_rank": ("add", [S.input("b2", TensorType((16,))), m], {}),
        "add_both_broadcast": ("add", [S.input("c1", TensorType((8, 1))), S.input("r1", TensorType((1, 16)))], {}),
        "mul_scalar": ("mul", [m, S.input("s", TensorType(()))], {}),
        "div": ("div", [m, m], {}),
        "sub": ("sub", [m, m], {}),
        "merge_gconv": ("merge_gconv", [S.input("wm", TensorType((8, 4, 3, 3)))], dict(count=2, groups=4)),
    }
    for op in ("relu", "sigmoid", "tanh", "gelu", "erf", "exp", "sqrt", "neg"):
        cases[op] = (op, [m], {})
    return S, cases


@pytest.mark.parametrize("case", sorted(_pattern_cases()[1]))
def test_pattern_table_matches_annotate_tir_op_pattern(case):
    S, cases = _pattern_cases()
    op, args, attrs = cases[case]
    node = S.make(op, args, attrs)
    chain, _ = expand(op, node.attrs, [S.type(r) for r in node.inputs], node.types)
    mod = _legalized(_lower(TensorGraph(S, node.outputs)))
    tvm_pats = [int(f.attrs["op_pattern"]) for _, f in mod.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and "op_pattern" in f.attrs]
    assert sorted(chain) == sorted(tvm_pats), f"{case}: ours {chain}, TVM {tvm_pats}"


# ---------------------------------------------------------------- hand-built graphs
def _conv_block(S, x, cin, cout, bias=True, bn=False, relu=True):
    y = S.add("conv2d", [x, S.weight(_w((cout, cin, 3, 3)))], padding=(1, 1, 1, 1))[0]
    if bias:
        y = S.add("add", [y, S.weight(_w((1, cout, 1, 1)))])[0]
    if bn:
        y = S.add("batchnorm", [y] + [S.weight(np.abs(_w((cout,))) + 0.5) for _ in range(4)])[0]
    if relu:
        y = S.add("relu", [y])[0]
    return y


def test_conv_bias_relu_is_one_kernel():
    S = NodeStore()
    y = _conv_block(S, S.input("x", TensorType((1, 4, 8, 8))), 4, 8)
    g = TensorGraph(S, [y])
    ks = Partitioner().kernels(g)
    assert [k.sig.ops for k in ks] == [("conv2d", "add", "relu")]
    assert our_kernels(g) == tvm_kernels(_lower(g))


def test_conv_then_batchnorm_is_two_kernels():
    S = NodeStore()
    y = _conv_block(S, S.input("x", TensorType((1, 4, 8, 8))), 4, 8, bias=False, bn=True)
    g = TensorGraph(S, [y])
    assert sorted(k.sig.ops for k in Partitioner().kernels(g)) == [("batchnorm", "relu"), ("conv2d",)]
    assert our_kernels(g) == tvm_kernels(_lower(g))


def test_weight_only_subgraphs_are_no_kernels():
    S = NodeStore()
    x = S.input("x", TensorType((4, 16)))
    wt = S.add("transpose", [S.weight(_w((32, 16)))], perm=(1, 0))[0]  # folded at compile time
    g = TensorGraph(S, S.add("matmul", [x, wt]))
    ks = Partitioner().kernels(g)
    assert [k.sig.ops for k in ks] == [("matmul",)]
    assert ks[0].sig.inputs[1] == ((16, 32), F32, True)


def test_graph_output_is_not_fused_into_its_consumers():
    S = NodeStore()
    x = S.input("x", TensorType((1, 4, 8, 8)))
    c = S.add("conv2d", [x, S.weight(_w((8, 4, 3, 3)))])[0]
    r = S.add("relu", [c])[0]
    g = TensorGraph(S, [c, r])  # the conv's result is also a graph output: TVM keeps it a separate kernel
    assert sorted(k.sig.ops for k in Partitioner().kernels(g)) == [("conv2d",), ("relu",)]
    assert our_kernels(g) == tvm_kernels(_lower(g))


def test_split_concat_reshape_transpose_graph_agrees_with_fuseops():
    S = NodeStore()
    x = S.input("x", TensorType((1, 8, 6, 6)))
    a = _conv_block(S, x, 8, 8)
    p = S.add("split", [a], axis=1, sizes=(3, 5))
    y = S.add("concat", [S.add("sigmoid", [p[1]])[0], p[0]], axis=1)[0]
    z = S.add("transpose", [S.add("reshape", [y], shape=(1, 8, 36))[0]], perm=(0, 2, 1))[0]
    m = S.add("matmul", [z, S.weight(_w((8, 8)))], activation="relu")[0]
    n = S.add("layernorm", [m, S.weight(_w((8,))), S.weight(_w((8,)))], axes=(-1,))[0]
    q = S.add("add", [S.add("softmax", [n])[0], m])[0]
    g = TensorGraph(S, [q, S.add("maxpool2d", [a], kernel=(2, 2), strides=(2, 2))[0]])
    assert our_kernels(g) == tvm_kernels(_lower(g))


def test_signature_is_canonical_across_stores_and_build_order():
    def build(order: int):
        S = NodeStore()
        if order:  # create unrelated nodes first so that node ids differ
            S.add("relu", [S.input("z", TensorType((3,)))])
        x = S.input("x", TensorType((1, 4, 8, 8)))
        return TensorGraph(S, [_conv_block(S, x, 4, 8)])

    k1, k2 = Partitioner().kernels(build(0))[0], Partitioner().kernels(build(1))[0]
    assert k1.sig is k2.sig and k1.sig.key == k2.sig.key
    assert KernelSig.make(k1.sig.nodes, k1.sig.inputs, k1.sig.outputs) is k1.sig
    assert k1.sig.label() == "conv2d+add+relu f32[1,4,8,8]->[1,8,8,8]"


# ---------------------------------------------------------------- zoo models
def _lift(model):
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function

    mod = load_onnx(model)
    return mod, lift_function(mod["main"])[0].graph


ZOO = [("squeezenet", {}), ("resnet50", {}), ("bert", {"layers": 2}), ("nasrnn", {}),
       pytest.param("inception_v3", {}, marks=pytest.mark.slow), pytest.param("nasnet_a", {}, marks=pytest.mark.slow),
       pytest.param("resnext50", {}, marks=pytest.mark.slow)]


@pytest.mark.parametrize("name,kw", ZOO)
def test_zoo_kernels_agree_with_fuseops(name, kw):
    """Our kernels == the fused PrimFuncs TVM makes of the lowered lifted graph (the module TASO hands back),
    and, except for binding-order ties, of the module as imported."""
    from taso_tvm import zoo

    mod, g = _lift(zoo.get_model(name, **kw))
    ours = our_kernels(g)
    assert ours == tvm_kernels(_lower(g))
    if name != "nasnet_a":  # NASNet's ONNX node order breaks ties between two anchors differently
        assert ours == tvm_kernels(mod)


def test_partition_speed_on_a_300_node_graph():
    from taso_tvm import zoo

    _, g = _lift(zoo.get_model("nasrnn"))  # 222 ops, 300+ nodes with weights
    assert len(g.topo_order()) >= 300
    p = Partitioner()
    p.kernels(g)  # first sight of the nodes: expansion and signatures are memoized
    t0 = time.perf_counter()
    for _ in range(10):
        p.kernels(TensorGraph(g.store, g.outputs))  # new graph objects, known nodes: full partition
    fresh_ms = (time.perf_counter() - t0) / 10 * 1e3
    t0 = time.perf_counter()
    for _ in range(100):
        p.kernels(g)
    memo_ms = (time.perf_counter() - t0) / 100 * 1e3
    print(f"partition of {len(g.topo_order())} nodes: {fresh_ms:.2f} ms fresh, {memo_ms * 1e3:.1f} us memoized")
    assert memo_ms < 1.0
    assert fresh_ms < 30.0  # ~3 ms on an idle core; generous for loaded CI machines
