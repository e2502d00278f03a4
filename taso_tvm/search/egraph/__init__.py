"""Equality-saturation search (Tensat's method) beside the backtracking one: every graph the rules reach is kept
in one e-graph (egglog's), and the cheapest is extracted under the cost model, greedily or exactly (an ILP solved
by HiGHS). It finds rewrites whose intermediate graphs cost more, which the cost-bounded backtracking cuts off.

    best, stats = egraph_search(graph, rules, cost_model.graph_cost, EGraphConfig(node_limit=20000))

Needs the `egraph` extra: `pip install -e ".[egraph]"` (egglog, highspy).
"""
from .config import EGraphConfig, StopReason
from .search import EGraphReport, egraph_search

__all__ = ["EGraphConfig", "StopReason", "EGraphReport", "egraph_search"]
