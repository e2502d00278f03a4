"""Extraction from a saturated e-graph: the ILP (HiGHS, Tensat's formulation with cycle constraints, plus fused
pairs) finds the cheapest graph that exhaustive enumeration finds; greedy never closes a cycle; the extracted
graph is a valid TensorGraph of the original's function."""
import itertools
import math

import numpy as np
import pytest

pytest.importorskip("egglog")
pytest.importorskip("highspy")

from taso_tvm.cost import CostModel, load_cost_config  # noqa: E402
from taso_tvm.graph import TensorGraph  # noqa: E402
from taso_tvm.graph.tensor_graph import NodeStore  # noqa: E402
from taso_tvm.graph.types import TensorType  # noqa: E402
from taso_tvm.rules import RuleSet, load_rules  # noqa: E402
from taso_tvm.search.egraph import EGraphConfig  # noqa: E402
from taso_tvm.search.egraph import extract as X  # noqa: E402
from taso_tvm.search.egraph.costs import ENodeCoster  # noqa: E402
from taso_tvm.search.egraph.egraph_view import EGraphView  # noqa: E402
from taso_tvm.search.egraph.engine import TensorEGraph  # noqa: E402


@pytest.fixture(scope="module")
def library():
    return load_rules()


def _saturated(graph: TensorGraph, rules: RuleSet) -> EGraphView:
    rewrites, _ = rules.pattern_rewrites()
    teg = TensorEGraph(graph, list(rewrites), EGraphConfig())
    teg.saturate()
    return EGraphView(teg)


def _exact_total(view, costs, choice) -> float:
    """The ILP's model of a choice's cost: solo costs plus the best set of applicable pair discounts, each e-node
    in at most one pair per side (by brute force over the few candidate pairs)."""
    cands = [(d, m, i) for i in choice.values() for h, m, via, d in costs.pairs[i]
             if choice.get(h) == via and (via == m or costs.producer(view, choice, h) == m)]
    best = 0.0
    for r in range(1, len(cands) + 1):
        for sub in itertools.combinations(cands, r):
            ms, ns = [m for _, m, _ in sub], [i for _, _, i in sub]
            if len(set(ms)) == len(ms) and len(set(ns)) == len(ns):
                best = min(best, sum(d for d, _, _ in sub))
    return math.fsum(costs.solo[i] for i in choice.values()) + best


def _exhaustive(view, costs, fixed) -> float:
    """The cheapest acyclic choice, enumerating every e-node of every class the choice reaches."""
    best = [math.inf]

    def extend(choice: dict, todo: list) -> None:
        if not todo:
            try:
                X.reachable(view, choice, view.roots)
            except X.ExtractionError:
                return
            best[0] = min(best[0], _exact_total(view, costs, choice))
            return
        c, rest = todo[0], todo[1:]
        if c in choice:
            extend(choice, rest)
            return
        for i in view.nodes_of[c]:
            if not math.isfinite(costs.solo[i]):
                continue
            extend({**choice, c: i}, rest + [h for h in view.enodes[i].children if h not in choice])

    extend(dict(fixed), [r for r in view.roots if r not in fixed])
    return best[0]


def _fire_module() -> TensorGraph:
    """SqueezeNet's fire module: 1x1 squeeze, then 1x1 and 3x3 expands with biases and relus, concatenated."""
    rng = np.random.default_rng(0)
    s = NodeStore()
    x = s.input("x", TensorType((1, 8, 6, 6)))

    def conv_bias_relu(inp, o, k):
        w = s.weight(rng.standard_normal((o, s.type(inp).shape[1], k, k)).astype("float32"))
        b = s.weight(rng.standard_normal((1, o, 1, 1)).astype("float32"))
        y = s.add("conv2d", [inp, w], padding=[k // 2] * 4)[0]
        return s.add("relu", [s.add("add", [y, b])[0]])[0]

    sq = conv_bias_relu(x, 4, 1)
    return TensorGraph(s, s.add("concat", [conv_bias_relu(sq, 8, 1), conv_bias_relu(sq, 8, 3)], axis=1))


@pytest.mark.parametrize("cycles", ["order", "lazy"])
@pytest.mark.parametrize("fusion", [False, True], ids=["solo-costs", "fused-pairs"])
def test_ilp_equals_exhaustive_enumeration(library, fusion, cycles):
    g = _fire_module()
    rules = RuleSet([library[n] for n in ("merge_convs_enlarge_bias", "concat_relu", "split_relu",
                                          "concat_split_cancel", "fuse_conv_relu")])
    view = _saturated(g, rules)
    with CostModel(load_cost_config(backend="analytic")) as cm:
        costs = ENodeCoster(view, cm.graph_cost, cm.prefetch, fusion=fusion).costs()
        fixed = X.fixed_classes(view)
        assert sum(len(view.nodes_of[c]) > 1 for c in range(view.num_classes) if c not in fixed) >= 4
        greedy = X.greedy(view, costs, fixed)
        ilp = X.ilp(view, costs, 30.0, greedy, fixed, cycles)
        assert ilp.status.startswith("Optimal")
        want = _exhaustive(view, costs, fixed)
        assert _exact_total(view, costs, ilp.choice) == pytest.approx(want, rel=1e-9)
        assert _exact_total(view, costs, greedy.choice) >= want - 1e-12
        if fusion:
            assert any(costs.pairs[i] for i in range(len(view.enodes)))  # conv2d + add fuse: discounts exist
        out = X.materialize(view, ilp.choice, g.store)
        feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32")}
        np.testing.assert_allclose(out.evaluate(feeds)[0], g.evaluate(feeds)[0], rtol=1e-4, atol=1e-4)


def _split_of_concat() -> TensorGraph:
    """p, q = split(concat(relu(x), relu(sigmoid(x)))); p + q: after split(concat(a, b)) -> a, b the classes of
    p and q hold both a Get of the split and a relu: a cycle through the concat."""
    s = NodeStore()
    x = s.input("x", TensorType((2, 4)))
    a = s.add("relu", [x])[0]
    b = s.add("relu", s.add("sigmoid", [x]))[0]
    p, q = s.add("split", s.add("concat", [a, b], axis=1), axis=1, sizes=[4, 4])
    return TensorGraph(s, s.add("add", [p, q]))


def _op_count_cost(weights: dict):
    def cost(graph: TensorGraph) -> float:
        return float(sum(weights.get(n.op, 1.0) for n in graph.ops() if n.id not in graph.weight_only_ids()))
    return cost


@pytest.mark.parametrize("cycles", ["order", "lazy"])
def test_ilp_cycle_constraints_keep_the_extraction_acyclic(library, cycles):
    g = _split_of_concat()
    view = _saturated(g, RuleSet([library["split_concat_cancel"]]))
    # relu costly, split and concat cheap: ignoring cycles, p = Get(split(concat(p, q))) would look cheapest
    costs = ENodeCoster(view, _op_count_cost({"relu": 10.0}), fusion=False).costs()
    fixed = X.fixed_classes(view)
    cyclic = [c for c in range(view.num_classes) if any(view.enodes[i].kind == "get" for i in view.nodes_of[c])
              and any(view.enodes[i].op == "relu" for i in view.nodes_of[c])]
    assert len(cyclic) == 2  # the classes of p and q
    greedy = X.greedy(view, costs, fixed)
    ilp = X.ilp(view, costs, 30.0, greedy, fixed, cycles)
    assert ilp.status == "Optimal" if cycles == "order" else ilp.status.startswith("Optimal (")
    X.reachable(view, ilp.choice, view.roots)  # raises on a cycle
    assert ilp.cost == pytest.approx(_exhaustive(view, costs, fixed))
    out = X.materialize(view, ilp.choice, g.store)
    assert sorted(n.op for n in out.ops()) == ["add", "relu", "relu", "sigmoid"]
