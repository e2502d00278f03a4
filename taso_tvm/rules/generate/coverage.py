"""Does a rule set cover a given substitution? Rewrite its source graph with the rules, breadth first, until the
target appears (up to commutative argument order): one step means the substitution is *found*, more steps that it
is *subsumed* by the rules of the path. Used to compare generated rules with a reference rule file."""
from __future__ import annotations

from typing import Iterable, Optional

from ...graph import TensorGraph
from ..matching.matcher import find_matches, graph_index
from ..matching.rewrite import apply_match
from ..op_facets import commutative


def canonical_text(graph: TensorGraph) -> str:
    """The graph's outputs as expression trees, inputs by name, commutative arguments sorted."""
    memo: dict = {}

    def text(ref) -> str:
        nid, out = ref
        if nid not in memo:
            n = graph.node(nid)
            if n.op == "input":
                memo[nid] = str(n.attrs["name"])
            elif n.op == "weight":
                memo[nid] = f"weight:{n.attrs['key']}"
            else:
                args = [text(a) for a in n.inputs]
                if commutative(n.op):
                    args.sort()
                attrs = ",".join(f"{k}={v}" for k, v in sorted(n.attrs.items()))
                memo[nid] = f"{n.op}[{attrs}]({','.join(args)})"
        return memo[nid] + (f"#{out}" if len(graph.node(nid).types) > 1 else "")

    return ";".join(text(r) for r in graph.outputs)


def rewrite_path(rules: Iterable, src: TensorGraph, dst: TensorGraph, max_steps: int = 2,
                 max_states: int = 3000) -> Optional[list]:
    """Names of the rules whose applications, in order, turn `src` into `dst`; None if none within the bounds."""
    rules = list(rules)
    goal = canonical_text(dst)
    start = canonical_text(src)
    if start == goal:
        return []
    frontier = [(src, [])]
    seen = {start}
    for _step in range(max_steps):
        nxt = []
        for g, path in frontier:
            index = graph_index(g)
            for r in rules:
                for m in find_matches(r, g, index=index):
                    try:
                        g2 = apply_match(r, g, m)
                    except Exception:  # a rule that does not apply here (type change, cycle)
                        continue
                    if g2 is None:
                        continue
                    key = canonical_text(g2)
                    if key == goal:
                        return path + [r.name]
                    if key not in seen and len(seen) < max_states:
                        seen.add(key)
                        nxt.append((g2, path + [r.name]))
        frontier = nxt
    return None
