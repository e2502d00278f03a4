"""Operator registry and TensorGraph: semantics, shape inference, hashing, copy-on-write edits."""
import numpy as np
import pytest

from taso_tvm.graph import OPS, CycleError, GraphError, NodeStore, TensorGraph, TensorType
from taso_tvm.graph.ops.nn import conv2d_numpy

TASO_OPS = {"conv2d", "matmul", "add", "sub", "mul", "div", "relu", "sigmoid", "tanh", "gelu", "concat", "split",
            "transpose", "reshape", "maxpool2d", "avgpool2d", "batchnorm", "softmax", "layernorm", "input", "weight",
            "enlarge", "merge_gconv"}


def test_registry_has_taso_operator_set():
    assert TASO_OPS <= set(OPS)
    for name, op in OPS.items():
        assert op.name == name and op.doc


def _conv_loop(x, w, stride, pad, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (h + pad[0] + pad[2] - kh) // stride + 1
    ow = (wd + pad[1] + pad[3] - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("stride,pad,groups", [(1, (1, 1, 1, 1), 1), (2, (0, 1, 2, 0), 1), (1, (1, 1, 1, 1), 2)])
def test_conv2d_numpy_matches_loops(stride, pad, groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 4 // groups, 3, 3))
    got = conv2d_numpy(x, w, (stride, stride), pad, (1, 1), groups)
    np.testing.assert_allclose(got, _conv_loop(x, w, stride, pad, groups), rtol=1e-10)


def test_same_padding_and_shape_inference():
    s = NodeStore()
    x = s.input("x", TensorType((1, 3, 7, 7)))
    w = s.weight(np.zeros((8, 3, 3, 3), np.float32))
    y, = s.add("conv2d", [x, w], strides=(2, 2), padding="SAME")
    assert s.type(y) == TensorType((1, 8, 4, 4))
    assert s.nodes[y[0]].attrs["padding"] == (1, 1, 1, 1)
    p, = s.add("maxpool2d", [x], kernel=(3, 3), strides=(2, 2), padding="VALID")
    assert s.type(p).shape == (1, 3, 3, 3)
    a, b = s.add("split", [y], axis=1, sizes=(3, 5))
    assert s.type(a).shape == (1, 3, 4, 4) and s.type(b).shape == (1, 5, 4, 4)
    m, = s.add("matmul", [s.input("q", TensorType((2, 1, 5, 4))), s.input("k", TensorType((3, 4, 6)))])
    assert s.type(m).shape == (2, 3, 5, 6)


def test_same_padding_is_one_function_for_conv_and_pool():
    from taso_tvm.graph.ops.nn import same_padding

    assert same_padding(7, 3, 2) == (1, 1) and same_padding(8, 3, 2) == (0, 1)  # an odd total pads after
    assert same_padding(8, 3, 1, dilation=2) == (2, 2) and same_padding(5, 1, 1) == (0, 0)
    s = NodeStore()
    x = s.input("x", TensorType((1, 2, 8, 6)))
    w = s.weight(np.zeros((4, 2, 3, 2), np.float32))
    y, = s.add("conv2d", [x, w], strides=(2, 1), dilation=(1, 2), padding="same")
    assert s.nodes[y[0]].attrs["padding"] == (0, 1, 1, 1) and s.type(y).shape == (1, 4, 4, 6)
    p, = s.add("avgpool2d", [x], kernel=(3, 2), strides=(2, 2), padding="SAME")
    assert s.nodes[p[0]].attrs["padding"] == (0, 0, 1, 0) and s.type(p).shape == (1, 2, 4, 3)
    with pytest.raises(GraphError, match="pool2d: padding must be SAME, VALID or ints"):
        s.add("maxpool2d", [x], kernel=(2, 2), padding="FULL")


@pytest.mark.parametrize("op,inputs,attrs,msg", [
    ("conv2d", [(1, 3, 8, 8), (4, 5, 3, 3)], {}, "inconsistent"),
    ("add", [(2, 3), (4, 3)], {}, "do not broadcast"),
    ("matmul", [(2, 3), (4, 5)], {}, "inner dimensions"),
    ("concat", [(2, 3), (3, 4)], {"axis": 0}, "differ outside axis"),
    ("split", [(2, 6)], {"axis": 1, "sizes": (2, 2)}, "do not add up"),
    ("reshape", [(2, 6)], {"shape": (5, -1)}, "cannot reshape"),
    ("transpose", [(2, 6)], {"perm": (0, 0)}, "not a permutation"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"activation": "swish"}, "unknown activation"),
    ("relu", [(2,)], {"alpha": 1}, "unknown attribute"),
])
def test_bad_inputs_raise_graph_error(op, inputs, attrs, msg):
    s = NodeStore()
    refs = [s.input(f"x{i}", TensorType(shape)) for i, shape in enumerate(inputs)]
    with pytest.raises(GraphError, match=msg):
        s.add(op, refs, **attrs)


def _block(s, x, w1, w2):
    a, = s.add("conv2d", [x, w1], padding=(1, 1, 1, 1))
    b, = s.add("conv2d", [x, w2])
    c, = s.add("add", [a, b])
    return c


def test_hash_is_structural_and_order_independent():
    s = NodeStore()
    x = s.input("x", TensorType((1, 2, 5, 5)))
    w1 = s.weight(np.ones((2, 2, 3, 3), np.float32))
    w2 = s.weight(np.ones((2, 2, 1, 1), np.float32))
    g1 = TensorGraph(s, [_block(s, x, w1, w2)])
    # build the same computation again, the other operand first: interned to the same nodes
    b, = s.add("conv2d", [x, w2])
    a, = s.add("conv2d", [x, w1], padding=(1, 1, 1, 1))
    g2 = TensorGraph(s, [s.add("add", [a, b])[0]])
    assert g1 == g2 and g1.structural_hash() == g2.structural_hash()
    g3 = TensorGraph(s, [s.add("add", [b, a])[0]])  # operands swapped: a different graph
    assert g3 != g1


def test_replace_is_copy_on_write_and_checks_cycles():
    s = NodeStore()
    x = s.input("x", TensorType((1, 2, 5, 5)))
    w1 = s.weight(np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32))
    w2 = s.weight(np.random.default_rng(1).standard_normal((2, 2, 1, 1)).astype(np.float32))
    out = _block(s, x, w1, w2)
    r, = s.add("relu", [out])
    g = TensorGraph(s, [r])
    before = list(g.topo_order())
    conv1x1 = [n for n in g.ops() if n.op == "conv2d" and n.attrs["padding"] == (0, 0, 0, 0)][0]
    big, = s.add("enlarge", [w2], kernel=(3, 3))
    new, = s.add("conv2d", [x, big], padding=(1, 1, 1, 1))
    g2 = g.replace({conv1x1.outputs[0]: new})
    assert g.topo_order() == before  # the original graph is unchanged
    assert conv1x1.id not in g2.node_ids and new[0] in g2.node_ids
    xv = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(g.evaluate({"x": xv})[0], g2.evaluate({"x": xv})[0], rtol=1e-5, atol=1e-5)
    # replacing a tensor by something computed from it is a cycle
    twice, = s.add("add", [out, out])
    with pytest.raises(CycleError):
        g.replace({out: twice})


def test_evaluate_and_weight_only():
    s = NodeStore()
    x = s.input("x", TensorType((2, 3)))
    w = s.weight(np.arange(12, dtype=np.float32).reshape(3, 4))
    wt, = s.add("transpose", [w], perm=(1, 0))
    wtt, = s.add("transpose", [wt], perm=(1, 0))
    y, = s.add("matmul", [x, wtt], activation="relu")
    g = TensorGraph(s, [y])
    xv = np.array([[1, -2, 3], [0, 1, -1]], np.float32)
    np.testing.assert_allclose(g.evaluate({"x": xv})[0], np.maximum(xv @ np.arange(12).reshape(3, 4), 0))
    assert g.is_weight_only(wtt) and not g.is_weight_only(y)
    assert g.num_ops == 3 and [n.op for n in g.inputs()] == ["input"]
