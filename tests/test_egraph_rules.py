"""YAML rules as e-graph rewrites: every library rule translates; multi-output rules (split / concat) and
multi-pattern rules apply; `where` conditions (shapes, attributes, weight()) hold exactly where the matcher's do;
commutative operators match in both orders; a rule that cannot be translated is named once and left to the
backtracking search."""
import logging

import numpy as np
import pytest

pytest.importorskip("egglog")
pytest.importorskip("highspy")

from taso_tvm.graph import TensorGraph  # noqa: E402
from taso_tvm.graph.tensor_graph import NodeStore  # noqa: E402
from taso_tvm.graph.types import TensorType  # noqa: E402
from taso_tvm.rules import RuleSet, load_rules, parse_rules  # noqa: E402
from taso_tvm.search.egraph import EGraphConfig, egraph_search  # noqa: E402
from taso_tvm.search.egraph.egraph_view import EGraphView  # noqa: E402
from taso_tvm.search.egraph.engine import TensorEGraph  # noqa: E402

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def library():
    return load_rules()


def _w(s: NodeStore, *shape):
    return s.weight(RNG.standard_normal(shape).astype("float32"))


def _saturate(graph: TensorGraph, library, names) -> tuple:
    rewrites, _ = RuleSet([library[n] for n in names]).pattern_rewrites()
    teg = TensorEGraph(graph, list(rewrites), EGraphConfig())
    teg.saturate()
    return teg, EGraphView(teg)


def _ops_in_class(view, c) -> set:
    return {view.enodes[i].op for i in view.nodes_of[c]}


def test_every_library_rule_translates(library):
    rewrites, left = library.pattern_rewrites()
    assert len(rewrites) == len(library) and len(left) == 0
    multi = {r.name for r in rewrites if r.multi_root}
    assert "merge_convs_sharing_input" in multi and "merge_qkv_projections" in multi
    assert "split_relu" not in multi  # joined through its split: one pattern


def test_split_concat_cancels_join_the_pieces_with_their_sources(library):
    s = NodeStore()
    x = s.input("x", TensorType((2, 6)))
    a, b = s.add("relu", [x])[0], s.add("sigmoid", [x])[0]
    p, q = s.add("split", s.add("concat", [a, b], axis=1), axis=1, sizes=[6, 6])
    y = s.add("concat", s.add("split", [x], axis=1, sizes=[2, 4]), axis=1)[0]
    g = TensorGraph(s, [p, q, a, b, y, x])
    teg, view = _saturate(g, library, ["split_concat_cancel", "concat_split_cancel"])
    r = view.roots
    assert r[0] == r[2] and r[1] == r[3]  # split(concat(a, b)) = a, b
    assert r[4] == r[5]  # concat(split(x)) = x
    assert teg.stats.fired == {"split_concat_cancel": 1, "concat_split_cancel": 1}


def test_split_concat_cancel_needs_the_seams(library):
    s = NodeStore()
    x = s.input("x", TensorType((2, 6)))
    a, b = s.add("relu", [x])[0], s.add("sigmoid", [x])[0]
    p, q = s.add("split", s.add("concat", [a, b], axis=1), axis=1, sizes=[5, 7])  # not where a and b meet
    teg, view = _saturate(TensorGraph(s, [p, q, a, b]), library, ["split_concat_cancel"])
    assert len(set(view.roots)) == 4 and not teg.stats.fired


def test_multi_output_and_multi_pattern_targets(library):
    s = NodeStore()
    x = s.input("x", TensorType((4, 8)))
    p, q = s.add("split", [x], axis=1, sizes=[3, 5])
    r1, r2 = s.add("relu", [p])[0], s.add("relu", [q])[0]
    m1, m2 = s.add("matmul", [x, _w(s, 8, 6)])[0], s.add("matmul", [x, _w(s, 8, 2)])[0]
    g = TensorGraph(s, [r1, r2, m1, m2])
    teg, view = _saturate(g, library, ["split_relu", "merge_matmuls_sharing_input"])
    assert teg.stats.fired == {"split_relu": 1, "merge_matmuls_sharing_input": 1}
    for root in view.roots:  # each output's class now also holds an output of a split
        assert "get" in _ops_in_class(view, root)
    # the split of relu(x) and of the merged product are in the e-graph
    tups = {view.enodes[i].children[0] for root in view.roots for i in view.nodes_of[root]
            if view.enodes[i].kind == "get"}
    split_inputs = {view.enodes[i].children[0] for t in tups for i in view.nodes_of[t]}
    assert {"relu", "matmul"} <= {op for c in split_inputs for op in _ops_in_class(view, c)}


def test_where_conditions_on_attributes_and_shapes(library):
    s = NodeStore()
    x = s.input("x", TensorType((2, 3, 4)))
    ident = s.add("transpose", [x], perm=[0, 1, 2])[0]
    swap = s.add("transpose", [x], perm=[0, 2, 1])[0]
    same = s.add("reshape", [x], shape=[2, 3, 4])[0]
    other = s.add("reshape", [x], shape=[6, 4])[0]
    g = TensorGraph(s, [ident, swap, same, other, x])
    teg, view = _saturate(g, library, ["transpose_identity", "reshape_identity"])
    r = view.roots
    assert r[0] == r[4] and r[2] == r[4]  # p == range(ndim(x)); s == shape(x)
    assert r[1] != r[4] and r[3] != r[4]
    assert teg.stats.fired == {"transpose_identity": 1, "reshape_identity": 1}


def test_where_conditions_on_weights(library):
    s = NodeStore()
    x = s.input("x", TensorType((4, 8)))
    v = s.input("v", TensorType((8, 8)))
    w1, w2 = _w(s, 8, 8), _w(s, 8, 5)
    folded = s.add("matmul", s.add("matmul", [x, w1]) + [w2])[0]  # weight(w1), weight(w2): folds
    kept = s.add("matmul", s.add("matmul", [x, v]) + [w2])[0]  # v is an input: does not
    c1, c2 = _w(s, 8), _w(s, 8)
    adds = s.add("add", [c2, s.add("add", [c1, x])[0]])[0]  # commuted: (c1 + x) on the right, x first inside
    consts = s.add("add", [s.add("add", [c1, c2])[0], c1])[0]  # not weight(x) fails: x is a weight here
    g = TensorGraph(s, [folded, kept, adds, consts])
    teg, view = _saturate(g, library, ["matmul_fold_weight_product", "fold_constant_adds"])
    assert teg.stats.fired == {"matmul_fold_weight_product": 1, "fold_constant_adds": 1}
    assert "matmul" in _ops_in_class(view, view.roots[0]) and len(view.nodes_of[view.roots[1]]) == 1
    assert len(view.nodes_of[view.roots[2]]) >= 2


def test_where_conditions_with_attribute_expressions(library):
    s = NodeStore()
    x = s.input("x", TensorType((1, 4, 6, 6)))
    a = s.add("conv2d", [x, _w(s, 3, 4, 1, 1)], padding=[0, 0, 0, 0])[0]
    b = s.add("conv2d", [x, _w(s, 5, 4, 3, 3)], padding=[1, 1, 1, 1])[0]  # p2 == p1 + (3 - 1) // 2: merges
    c = s.add("conv2d", [x, _w(s, 5, 4, 3, 3)], padding=[0, 0, 0, 0])[0]  # p2 != p1 + 1 against a: does not
    g = TensorGraph(s, [a, b, c])
    teg, view = _saturate(g, library, ["merge_convs_enlarge"])
    assert teg.stats.fired == {"merge_convs_enlarge": 1}
    assert "get" in _ops_in_class(view, view.roots[0]) and "get" in _ops_in_class(view, view.roots[1])
    assert "get" not in _ops_in_class(view, view.roots[2])
    best, st = egraph_search(g, RuleSet([library["merge_convs_enlarge"]]),
                             lambda gr: float(len(gr.ops()) - len(gr.weight_only_ids())))
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype("float32")}
    for got, want in zip(best.evaluate(feeds), g.evaluate(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


UNCONNECTED = """
- name: two_unrelated_relus
  source:
    a: relu(x)
    b: relu(y)
  target:
    a: relu(x)
    b: relu(y)
  verify:
    shapes: {x: [N], y: [N]}
"""


def test_untranslatable_rule_is_named_once_and_left_to_backtracking(library, caplog):
    rules = RuleSet([library["transpose_identity"]] + parse_rules(UNCONNECTED))
    with caplog.at_level(logging.WARNING):
        rewrites, left = rules.pattern_rewrites()
        rules.pattern_rewrites()
        RuleSet(list(rules)).pattern_rewrites()
    assert [r.name for r in rewrites] == ["transpose_identity"] and left.names == ["two_unrelated_relus"]
    msgs = [r.getMessage() for r in caplog.records if "two_unrelated_relus" in r.getMessage()]
    assert len(msgs) == 1 and "backtracking" in msgs[0] and "unconnected" in msgs[0]
    s = NodeStore()
    x = s.input("x", TensorType((3,)))
    g = TensorGraph(s, [s.add("transpose", [x], perm=[0])[0]])
    best, st = egraph_search(g, rules, lambda gr: float(len(gr.ops())))
    assert best.ops() == [] and st.egraph.untranslated == ["two_unrelated_relus"]
