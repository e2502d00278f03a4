"""Rules as conditional rewrites for an equality-saturation engine (`search.egraph`).

An e-graph engine matches a rule's source *structure* (operators, arities, which tensors are shared) itself; this
module gives it that structure (`PatternRewrite.nodes`) and the part it cannot evaluate, as one call
(`PatternRewrite.apply`): the attribute checks of the source (constants, attribute variables, `**groups`,
expressions), the `where` clause and the building of the target. These are the matcher's own code
(`matcher.py`), run on *placeholder* tensors: the engine gives every e-class it binds a stand-in tensor of the
class's type in a scratch `NodeStore` (a graph input, or a weight when the class holds a weight-only term), so
`dim`, `shape`, `ndim`, `weight` and the target's shape inference see exactly what the class holds. The target is
built over those placeholders with `build_target` (the same code `apply_match` runs), and the engine turns the
new nodes into e-nodes.

What the matcher checks and the e-graph does not need: that the tensors a rewrite removes are not used elsewhere
(an e-graph removes nothing). What is the same: pattern nodes bind distinct nodes, commutative operators match in
both argument orders (one egglog query per order), matches equal up to a symmetry of the pattern (the two
convolutions of a merge, swapped) are applied once (`symmetries`; applying every order multiplies the e-graph by
the orders of every merge, 6 for three matrix products).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Optional

from ...graph import GraphError, TensorGraph
from ...graph.tensor_graph import NodeStore
from ..language import expr as E
from .. import op_facets
from ..language.rule import Rule
from .matcher import (Match, MatchEnv, _bind_attrs, _compiled, _conjuncts, _const_equal, _required_ranks,
                      constraints_hold, graph_index)
from .rewrite import build_target

log = logging.getLogger(__name__)


class Untranslatable(Exception):
    """A rule the e-graph engine cannot run (the message says why); it is left to the backtracking search."""


@dataclass(frozen=True)
class PatternNode:
    """One operator application of a rule's source: `args` are ('var', name) or ('node', index, output)."""

    op: str
    args: tuple
    n_outputs: int  # the outputs the pattern names (a node of a multi-output operator must have exactly these)
    multi_output: bool  # the operator's outputs are reached through a tuple (split)
    used_outputs: tuple  # output positions other pattern nodes read or the rule names
    commutative: bool  # the two arguments match in either order


@dataclass
class _St:
    """The binding state `matcher._bind_attrs` fills."""

    attrs: dict
    splats: dict


class PatternRewrite:
    """A rule as an e-graph rewrite: its source structure, the prefilters an engine can evaluate itself, and `apply`."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.name = rule.name
        comp = _compiled(rule)
        self._comp = comp
        if rule.facts or not rule.outputs or not rule.tgt_outputs:
            raise Untranslatable("it has no target (an axiom)")
        used: dict[int, set] = {p.index: set() for p in rule.source}
        for p in rule.source:
            for a in p.args:
                if a.kind == "node":
                    used[a.node].add(a.out)
        for ref in rule.src_names.values():
            used[ref.node].add(ref.out)
        self.nodes = tuple(PatternNode(p.op, tuple(("var", a.name) if a.kind == "var" else ("node", a.node, a.out)
                                                   for a in p.args), p.n_outputs, op_facets.multi_output(p.op),
                                       tuple(sorted(used[p.index])), comp.commutative[p.index])
                           for p in rule.source)
        self.variables = tuple(rule.inputs)
        self.ranks = {v: r for v, r in _required_ranks(rule).items() if r >= 0}
        self.weight_vars = frozenset(_weight_conjuncts(rule))
        # Tensat's multi-pattern rules: a source of several patterns joined only by shared input tensors (two
        # convolutions of one input), matched for every pair of consumers of a tensor, so they grow an e-graph
        # fastest. A source whose parts are joined through one of its own nodes (relu on both outputs of a split)
        # is one pattern: its matches are bounded by that node's uses.
        self.multi_root = not _connected(rule, through_variables=False)
        self.source_ops = frozenset(p.op for p in rule.source)
        self.target_ops = frozenset(n.op for n in rule.target if n.op != "const")
        self.symmetries = comp.symmetries  # pattern-node permutations that map the source onto itself
        if not _connected(rule):
            raise Untranslatable("its source has unconnected parts (every pair of their matches would be a match)")

    def __repr__(self) -> str:
        return f"PatternRewrite({self.name!r})"

    def apply(self, store: NodeStore, attrs: list, tensors: dict, outputs: list) -> Optional[dict]:
        """Check the match and build the target over placeholders.

        `attrs[i]`: the attributes of the node bound to pattern node i; `tensors`: variable -> placeholder;
        `outputs[i]`: the placeholders of pattern node i's outputs (None where no class is bound). Returns
        {replaced placeholder: new tensor in `store`} or None when an attribute, the `where` clause or the target
        does not hold there."""
        rule, comp = self.rule, self._comp
        st = _St({}, {})
        index = graph_index(TensorGraph(store, ()))
        in_types = []
        for p in rule.source:
            ins = [tensors[a.name] if a.kind == "var" else outputs[a.node][a.out] for a in p.args]
            types = [store.type(r) for r in ins]
            in_types.append(types)
            node = _AttrView(attrs[p.index])
            for k, const in comp.consts[p.index]:
                if not _const_equal(p.op, comp.axis_attr[p.index], k, const, node, types):
                    return None
            if not _bind_attrs(p, comp.vars[p.index], comp.axis_attr[p.index], node, types, st):
                return None
        named = dict(tensors)
        for name, ref in rule.src_names.items():
            named[name] = outputs[ref.node][ref.out]
        m = Match(rule, {}, named, dict(st.attrs), dict(st.splats))
        if not constraints_hold(comp, MatchEnv(m, index), lambda i: (_AttrView(attrs[i]), in_types[i])):
            return None
        try:
            return build_target(rule, TensorGraph(store, ()), m, index)
        except GraphError as err:  # the target does not build here, or changes a type
            log.debug("rule %s not applicable: %s", rule.name, err)
            return None


class _AttrView:
    """What the matcher's attribute checks read of a node."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: dict):
        self.attrs = attrs


def _weight_conjuncts(rule: Rule) -> set:
    """Tensors a top-level `weight(t)` conjunct of the `where` clause requires to be weight-only."""
    out = set()
    for e in _conjuncts(rule.where):
        if (isinstance(e, E.Call) and e.func == "weight" and len(e.args) == 1 and not e.kwargs
                and isinstance(e.args[0], E.Name)):
            name = e.args[0].id
            if name in rule.inputs or name in rule.src_names:
                out.add(name)
    return out


def _connected(rule: Rule, through_variables: bool = True) -> bool:
    """Do the source's operator nodes form one component, joined by the tensors they share (only by the outputs
    of pattern nodes unless `through_variables`)?"""
    n = len(rule.source)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_var: dict = {}
    for p in rule.source:
        for a in p.args:
            if a.kind == "node":
                parent[find(a.node)] = find(p.index)
            elif through_variables:
                by_var.setdefault(a.name, []).append(p.index)
    for idxs in by_var.values():
        for i in idxs[1:]:
            parent[find(i)] = find(idxs[0])
    return len({find(i) for i in range(n)}) == 1


def pattern_rewrites(rules: Iterable[Rule]) -> tuple[list, dict]:
    """([PatternRewrite], {rule name: why it is not translated}) for the rules, in order."""
    out, skipped = [], {}
    for r in rules:
        try:
            out.append(PatternRewrite(r))
        except Untranslatable as e:
            skipped[r.name] = str(e)
    return out, skipped


__all__ = ["PatternRewrite", "PatternNode", "Untranslatable", "pattern_rewrites"]
