"""The matcher: matches on hand-built graphs and on zoo models, and applying them."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.rules import RuleSet, apply_match, find_matches, library_files, parse_rules, read_rule_files

F = "float32"


@pytest.fixture(scope="module")
def library():
    """The shipped rules, unverified (test_rules_library.py verifies them; matching does not need it)."""
    return RuleSet(read_rule_files(library_files()))


def _rule(text: str):
    (r,) = parse_rules(textwrap.dedent(text))
    return r


def _w(store, rng, *shape):
    return store.weight(rng.standard_normal(shape).astype(np.float32))


def _check_equal(g0: TensorGraph, g1: TensorGraph, feeds) -> None:
    for a, b in zip(g0.evaluate(feeds), g1.evaluate(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


MERGE = """
- name: merge
  source:
    a: matmul(x, w1)
    b: matmul(x, w2)
  target:
    y: matmul(x, concat(w1, w2, axis=-1))
    a, b: split(y, axis=-1, sizes=[dim(w1, -1), dim(w2, -1)])
  where: [weight(w1), weight(w2)]
"""


def test_multi_root_match_and_apply():
    rng = np.random.default_rng(0)
    s = NodeStore()
    x = s.input("x", TensorType((4, 8), F))
    w1, w2, w3 = _w(s, rng, 8, 3), _w(s, rng, 8, 5), _w(s, rng, 8, 2)
    (a,) = s.add("matmul", [x, w1])
    (b,) = s.add("matmul", [x, w2])
    (c,) = s.add("matmul", [x, w3])
    (d,) = s.add("matmul", [b, s.weight(np.ones((5, 3), np.float32))])
    (y,) = s.add("add", [s.add("relu", [a])[0], d])
    g = TensorGraph(s, [y, c])
    r = _rule(MERGE)
    ms = find_matches(r, g)
    # three matmuls share x: 3 unordered pairs (symmetric orders are reported once); the 4th matmul reads b, not x
    assert len(ms) == 3
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    for m in ms:
        g2 = apply_match(r, g, m)
        assert g2 is not None and g2 != g
        _check_equal(g, g2, feeds)
        assert sum(n.op == "split" for n in g2.topo_order()) == 1


def test_symmetric_matches_without_dedupe():
    s = NodeStore()
    rng = np.random.default_rng(0)
    x = s.input("x", TensorType((2, 3), F))
    (a,) = s.add("matmul", [x, _w(s, rng, 3, 2)])
    (b,) = s.add("matmul", [x, _w(s, rng, 3, 4)])
    g = TensorGraph(s, [a, b])
    r = _rule(MERGE)
    assert len(find_matches(r, g)) == 1
    assert len(find_matches(r, g, dedupe=False)) == 2


def test_weight_constraint_and_identical_nodes():
    s = NodeStore()
    x = s.input("x", TensorType((2, 3), F))
    act = s.input("w", TensorType((3, 2), F))  # an activation, not a weight
    (a,) = s.add("matmul", [x, act])
    (b,) = s.add("matmul", [x, s.weight(np.ones((3, 2), np.float32))])
    assert find_matches(_rule(MERGE), TensorGraph(s, [a, b])) == []
    # the same matmul twice is one node (hash-consing): no match of a two-node pattern
    (c,) = s.add("matmul", [x, s.weight(np.ones((3, 2), np.float32), key="k")])
    (d,) = s.add("matmul", [x, s.weight(np.ones((3, 2), np.float32), key="k")])
    assert c == d
    assert [m.node_ids for m in find_matches(_rule(MERGE), TensorGraph(s, [c]))] == []


def test_interior_tensor_used_outside_is_refused():
    r = _rule("""
    - name: fuse
      source:
        y: conv2d(x, w, activation=none, **c)
        z: relu(y)
      target:
        z: conv2d(x, w, activation=relu, **c)
    """)
    s = NodeStore()
    x = s.input("x", TensorType((1, 2, 4, 4), F))
    (y,) = s.add("conv2d", [x, s.weight(np.ones((3, 2, 3, 3), np.float32))], padding=1)
    (z,) = s.add("relu", [y])
    (m,) = find_matches(r, TensorGraph(s, [z]))
    (other,) = s.add("sigmoid", [y])  # y is also read outside the pattern
    assert find_matches(r, TensorGraph(s, [z, other])) == []
    assert find_matches(r, TensorGraph(s, [z, y])) == []  # ... or is a graph output
    assert apply_match(r, TensorGraph(s, [z, other]), m) is None  # apply checks it too


def test_commutative_add_matches_either_order():
    r = _rule("""
    - name: fold_adds
      source:
        y: add(add(x, c1), c2)
      target:
        y: add(x, add(c1, c2))
      where: [weight(c1), weight(c2), not weight(x)]
    """)
    s = NodeStore()
    x = s.input("x", TensorType((2, 3), F))
    c1 = s.weight(np.ones((3,), np.float32))
    c2 = s.weight(np.full((3,), 2, np.float32))
    (t,) = s.add("add", [c1, x])  # constant first
    (y,) = s.add("add", [c2, t])
    g = TensorGraph(s, [y])
    ms = find_matches(r, g)
    assert len(ms) == 1
    g2 = apply_match(r, g, ms[0])
    _check_equal(g, g2, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert g2.num_ops == 2 and any(n.op == "add" and all(g2.is_weight_only(i) for i in n.inputs)
                                   for n in g2.topo_order())


def test_apply_refuses_cycles():
    # b = x @ f(a) where f(a) depends on a: merging a and b would make the merged matmul read its own output
    r = _rule("""
    - name: merge_any
      source:
        a: matmul(x, w1)
        b: matmul(x, w2)
      target:
        y: matmul(x, concat(w1, w2, axis=-1))
        a, b: split(y, axis=-1, sizes=[dim(w1, -1), dim(w2, -1)])
    """)
    s = NodeStore()
    x = s.input("x", TensorType((3, 3), F))
    (a,) = s.add("matmul", [x, s.weight(np.eye(3, dtype=np.float32))])
    (w2,) = s.add("relu", [a])
    (b,) = s.add("matmul", [x, w2])
    g = TensorGraph(s, [b, a])
    ms = [m for m in find_matches(r, g) if m.tensors["w2"] == w2]
    assert ms and apply_match(r, g, ms[0]) is None


def test_apply_not_applicable_returns_none():
    r = _rule(MERGE)
    s = NodeStore()
    x = s.input("x", TensorType((2, 3), F))
    (a,) = s.add("matmul", [x, s.weight(np.ones((3, 2), np.float32))])
    (b,) = s.add("matmul", [x, s.weight(np.ones((2, 3, 4), np.float32))])  # 3-D weight: concat fails
    g = TensorGraph(s, [a, b])
    ms = find_matches(r, g)
    assert ms and all(apply_match(r, g, m) is None for m in ms)


def test_attribute_constants_match_canonical_forms():
    r = _rule("""
    - name: same
      source:
        y: conv2d(x, w, strides=[1, 1], padding=SAME, dilation=1, groups=1, activation=none)
      target:
        y: conv2d(x, w, padding=[1, 1, 1, 1])
    """)
    s = NodeStore()
    x = s.input("x", TensorType((1, 2, 5, 5), F))
    (y,) = s.add("conv2d", [x, s.weight(np.ones((2, 2, 3, 3), np.float32))], padding=(1, 1, 1, 1))
    assert len(find_matches(r, TensorGraph(s, [y]))) == 1
    r2 = _rule("""
    - name: axis
      source:
        y: concat(relu(a), relu(b), axis=-1)
      target:
        y: relu(concat(a, b, axis=-1))
    """)
    a = s.input("a", TensorType((2, 3), F))
    b = s.input("b", TensorType((2, 4), F))
    (c,) = s.add("concat", [s.add("relu", [a])[0], s.add("relu", [b])[0]], axis=1)  # axis=1 is axis=-1 here
    assert len(find_matches(r2, TensorGraph(s, [c]))) == 1


def test_ruleset_matches_share_one_index(library):
    s = NodeStore()
    rng = np.random.default_rng(1)
    x = s.input("x", TensorType((1, 4, 6, 6), F))
    (a,) = s.add("conv2d", [x, _w(s, rng, 3, 4, 1, 1)])
    (b,) = s.add("conv2d", [x, _w(s, rng, 5, 4, 3, 3)], padding=1)
    (y,) = s.add("concat", [s.add("relu", [a])[0], s.add("relu", [b])[0]], axis=1)
    g = TensorGraph(s, [y])
    names = {r.name for r, _ in library.matches(g)}
    assert {"merge_convs_enlarge", "concat_relu", "enlarge_conv_kernel"} <= names
    feeds = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    for r, m in library.matches(g):
        g2 = apply_match(r, g, m)
        assert g2 is not None, r.name
        _check_equal(g, g2, feeds)


# ---------------------------------------------------------------- zoo models (lift + ONNX import)
def _zoo_graph(name, **kw):
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function

    blocks = lift_function(load_onnx(zoo.get_model(name, **kw))["main"])
    assert len(blocks) == 1
    return blocks[0].graph


@pytest.fixture(scope="module")
def squeezenet():
    return _zoo_graph("squeezenet", image_size=64)


@pytest.fixture(scope="module")
def bert2():
    return _zoo_graph("bert", layers=2, seq_len=16, hidden=64, heads=4, ffn=128)


def test_squeezenet_every_fire_module_merges(library, squeezenet):
    g = squeezenet
    ms = find_matches(library["merge_convs_enlarge_bias"], g)
    assert len(ms) == 8  # SqueezeNet 1.1 has 8 fire modules
    for m in ms:
        w1, w2 = g.type(m.tensors["w1"]), g.type(m.tensors["w2"])
        assert w1.shape[2:] == (1, 1) and w2.shape[2:] == (3, 3)  # expand1x1 and expand3x3
        assert m.tensors["x"] == g.node(m.nodes[0]).inputs[0]
        assert r_ok(library["merge_convs_enlarge_bias"], g, m)
    assert len(find_matches(library["concat_relu"], g)) == 8


def test_squeezenet_fire_modules_become_one_conv(library, squeezenet):
    """merge the expand convs, move the relus through the concat, cancel split + concat: one conv per fire."""
    g = squeezenet
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    ref = g.evaluate(feeds)[0]
    for name in ("merge_convs_enlarge_bias", "concat_relu", "concat_split_cancel"):
        for _ in range(20):
            ms = find_matches(library[name], g)
            if not ms:
                break
            g = apply_match(library[name], g, ms[0])
            assert g is not None
    runtime = [n for n in g.ops() if not all(g.is_weight_only(i) for i in n.inputs)]
    assert sum(n.op == "conv2d" for n in runtime) == 26 - 8
    assert not any(n.op in ("split", "concat") for n in runtime)
    np.testing.assert_allclose(g.evaluate(feeds)[0], ref, rtol=1e-4, atol=1e-4)


def r_ok(rule, g, m) -> bool:
    g2 = apply_match(rule, g, m)
    return g2 is not None and g2.num_ops == g.num_ops - 4 + 6  # 2 conv + 2 add -> enlarge, concat x2, conv, add, split


def test_bert_every_layer_qkv_merges(library, bert2):
    g = bert2
    ms = find_matches(library["merge_qkv_projections"], g)
    assert len(ms) == 2  # one per layer, reported once despite the 3! orders
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 16, 64)).astype(np.float32)}
    ref = g.evaluate(feeds)
    for m in ms:
        xs = {m.tensors[k] for k in ("x",)}
        assert len(xs) == 1
        g2 = apply_match(library["merge_qkv_projections"], g, m)
        assert g2 is not None
        np.testing.assert_allclose(g2.evaluate(feeds)[0], ref[0], rtol=1e-3, atol=1e-3)
