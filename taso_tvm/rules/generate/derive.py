"""Is a candidate implied by rules already kept? Rewrite both of its graphs with the kept rules, a few steps each,
and see whether they meet (TASO's pruning of substitutions that other substitutions compose).

A candidate is built as two graphs over shared inputs at concrete shapes (each dimension group of the
generalized candidate gets its own size where the graphs still build, else the pool's sizes). Rewriting the source
and the target breadth first with the kept rules, a common graph (compared by `canonical_text`, commutative
arguments sorted) shows source == target through rules that hold. A kept rule whose sides read the same inputs
rewrites both ways here (an equality holds in both directions). The test is only used to *drop* candidates: a
dropped candidate is never written, so a miss costs a verification and a false meet cannot occur without a chain
of kept rules.
"""
from __future__ import annotations

import logging
from typing import Optional

from ...graph import NodeStore, TensorGraph, TensorType
from ...graph.types import GraphError
from ..matching.matcher import find_matches, graph_index
from ..matching.rewrite import apply_match
from .coverage import canonical_text
from .enumerate import concrete_shape
from .graphs import resolve

log = logging.getLogger(__name__)


def _shapes(c, pool: dict, groups: Optional[list]) -> dict:
    """Input shapes: the pool's, or (with `groups`) the first group of a size class at the pool size and every
    other group at a size of its own."""
    shapes = {v: list(concrete_shape(pool[v])) for v in c.inputs}
    if groups:
        taken: dict = {}
        for g in groups:
            v0, a0 = g[0]
            base = shapes[v0][a0]
            n = taken.get(base, 0)
            taken[base] = n + 1
            for v, a in g:
                shapes[v][a] = base + n
    return {v: tuple(s) for v, s in shapes.items()}


def _build(store: NodeStore, nodes: tuple, outputs: tuple, inputs: dict, shapes: dict) -> list:
    refs: dict = {}
    for j, n in enumerate(nodes):
        args = [inputs[a[1]] if a[0] == "i" else refs[(a[1], a[2])] for a in n.args]
        outs = store.add(n.op, args, **resolve(n.attrs, shapes, [store.type(a) for a in args]))
        for o, r in enumerate(outs):
            refs[(j, o)] = r
    return [inputs[r[1]] if r[0] == "i" else refs[(r[1], r[2])] for r in outputs]


def candidate_graphs(c, pool: dict, groups: Optional[list] = None) -> Optional[tuple]:
    """(source graph, target graph) of a candidate over shared inputs, or None when neither size choice builds.
    `pool` maps input names to `InputVar`; `groups` are the candidate's dimension groups."""
    for g in ((groups, None) if groups else (None,)):
        shapes = _shapes(c, pool, g)
        store = NodeStore()
        inputs = {v: store.input(v, TensorType(shapes[v])) for v in c.inputs}
        try:
            src = _build(store, c.src, c.src_outputs, inputs, shapes)
            dst = _build(store, c.dst, c.dst_outputs, inputs, shapes)
        except (GraphError, ValueError, TypeError, IndexError, KeyError):
            continue
        if [store.type(r) for r in src] != [store.type(r) for r in dst]:
            continue
        return TensorGraph(store, src), TensorGraph(store, dst)
    return None


def _graph_ops(g: TensorGraph) -> frozenset:
    return frozenset(n.op for n in g.topo_order() if n.op not in ("input", "weight"))


class Deriver:
    """Kept rules, indexed by the operators of their source, and the rewriting test.

    `src_steps`/`dst_steps`: rewrite steps from each side; `max_nodes`: larger intermediate graphs are not
    explored; `max_states`: graphs explored per side."""

    def __init__(self, src_steps: int = 2, dst_steps: int = 1, max_nodes: int = 6, max_states: int = 200):
        self.src_steps, self.dst_steps = src_steps, dst_steps
        self.max_nodes, self.max_states = max_nodes, max_states
        self.by_ops: dict = {}  # frozenset of source operators -> [rule]
        self.n_rules = 0
        self.stats = {"tests": 0, "states": 0, "matches": 0}

    def add(self, rule) -> None:
        """A rule that holds (verified, or the reverse of a verified rule over the same inputs)."""
        self.by_ops.setdefault(frozenset(p.op for p in rule.source), []).append(rule)
        self.n_rules += 1

    def _rules_for(self, ops: frozenset) -> list:
        return [r for key, rules in self.by_ops.items() if key <= ops for r in rules]

    def _reach(self, g: TensorGraph, steps: int, stop: Optional[dict] = None) -> tuple[dict, Optional[list]]:
        """{canonical text: rule path} of graphs within `steps` rewrites; with `stop`, returns early (second
        element) with the joined path once a graph of `stop` is reached."""
        start = canonical_text(g)
        seen = {start: []}
        if stop is not None and start in stop:
            return seen, stop[start][::-1]
        frontier = [(g, [])]
        for _ in range(steps):
            nxt = []
            for h, path in frontier:
                index = graph_index(h)
                for r in self._rules_for(_graph_ops(h)):
                    for m in find_matches(r, h, index=index):
                        self.stats["matches"] += 1
                        h2 = apply_match(r, h, m)
                        if h2 is None or len(h2.topo_order()) > self.max_nodes + len(h2.inputs()):
                            continue
                        key = canonical_text(h2)
                        if key in seen:
                            continue
                        p2 = path + [r.name]
                        if stop is not None and key in stop:
                            return seen, p2 + stop[key][::-1]
                        if len(seen) >= self.max_states:
                            continue
                        seen[key] = p2
                        nxt.append((h2, p2))
            self.stats["states"] += len(nxt)
            frontier = nxt
        return seen, None

    def derive(self, src: TensorGraph, dst: TensorGraph) -> Optional[list]:
        """Names of kept rules rewriting `src` and `dst` into one graph (the target's part of the path reversed),
        or None if none is found within the bounds."""
        self.stats["tests"] += 1
        if not self.n_rules:
            return None
        back, _ = self._reach(dst, self.dst_steps)
        _seen, path = self._reach(src, self.src_steps, stop=back)
        return path
