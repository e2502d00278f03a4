"""The search needs only its RuleSource protocol (matches and apply) and a cost function: nothing of the rules
package. A rule source written here, removing a ReLU applied to a ReLU, drives it."""
from __future__ import annotations

from typing import Optional

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.search import SearchConfig, optimize_graph
from taso_tvm.search.config import MAX_OPS_SLACK


class DoubleRelu:
    """relu(relu(x)) -> relu(x), as a RuleSource; counts what the search asked of it."""

    name = "double_relu"

    def __init__(self) -> None:
        self.applied = 0

    def matches(self, graph: TensorGraph) -> list:
        nodes = graph.store.nodes
        return [(self, n.id) for n in graph.ops() if n.op == "relu" and nodes[n.inputs[0][0]].op == "relu"]

    def apply(self, graph: TensorGraph, rule: "DoubleRelu", match: int) -> Optional[TensorGraph]:
        self.applied += 1
        return graph.replace({(match, 0): graph.store.nodes[match].inputs[0]})


def test_the_search_applies_matches_through_its_rule_source():
    s = NodeStore()
    y = s.input("x", TensorType((2, 3)))
    for _ in range(4):
        (y,) = s.add("relu", [y])
    g = TensorGraph(s, [y])
    rules = DoubleRelu()
    best, stats = optimize_graph(g, rules, lambda h: float(h.num_ops), SearchConfig(budget=8))
    assert best.num_ops == 1 and rules.applied >= 3
    assert stats.rules_applied == {"double_relu": 3}


def test_the_operator_bound_is_written_once():
    assert SearchConfig().max_ops(10) == 15 + MAX_OPS_SLACK
    assert SearchConfig(max_ops_ratio=2.0).max_ops(3) == 6 + MAX_OPS_SLACK
