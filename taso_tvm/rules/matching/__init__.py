"""Matching rules against a TensorGraph and applying them.

- `matcher`: the graph index, the pattern matcher and the rewrite (`find_matches`, `apply_match`);
- `eqsat`: each rule as a pattern rewrite for the e-graph search.
"""
from .matcher import GraphIndex, Match, find_matches, graph_index
from .rewrite import apply_match

__all__ = ["GraphIndex", "Match", "apply_match", "find_matches", "graph_index"]
