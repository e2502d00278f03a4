"""Find the matches of a rule's source pattern in a TensorGraph (`rewrite.py` applies a match).

The search starts from the pattern node with the fewest candidates of its operator type (index by op type, built once
per graph), walks *down* into producers of bound nodes' inputs and *up* into consumers of bound tensors (this is how
multi-root patterns such as two convolutions sharing an input are found), and backtracks. Commutative operators (the
`rules.commutative` facet: `add`, `mul`) match in either argument order. Matches equivalent under a symmetry of the
pattern (swapping two identical branches) are reported once.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ...graph import GraphError, TensorGraph, TensorRef
from ...graph.ops import OPS
from ...graph.types import freeze
from ..language import expr as E
from .. import op_facets
from ..language.rule import ArgRef, PNode, Rule

log = logging.getLogger(__name__)


@dataclass
class Match:
    """One occurrence of a rule's source pattern: graph nodes, tensors, and attribute values it binds."""

    rule: Rule
    nodes: dict  # pattern node index -> graph node id
    tensors: dict  # input variable or named source tensor -> TensorRef
    attrs: dict  # attribute variable -> value
    splats: dict = field(default_factory=dict)  # attribute group -> {attribute: value}

    @property
    def outputs(self) -> list:
        """The graph tensors the rule replaces, in the rule's output order."""
        return [self.tensors[o] for o in self.rule.outputs]

    @property
    def node_ids(self) -> frozenset:
        return frozenset(self.nodes.values())

    def __repr__(self) -> str:
        return f"Match({self.rule.name}, nodes={sorted(self.nodes.values())})"


class GraphIndex:
    """Per-graph data every rule's matcher shares: nodes by operator, consumers, weight-only memo."""

    def __init__(self, graph: TensorGraph):
        self.graph = graph
        self.nodes = graph.store.nodes
        self.by_op: dict[str, list[int]] = {}
        for n in graph.topo_order():
            self.by_op.setdefault(n.op, []).append(n.id)
        self.consumers = graph.consumers()
        self._weight_memo: dict = {}
        self._ranked: dict = {}  # (op, argument ranks, argument orders) -> the nodes of op whose inputs fit

    def by_op_ranked(self, op: str, want: tuple, perms: tuple) -> list:
        """The nodes of `op` (in topological order) whose inputs have the ranks `want` (None: any) under one of the
        argument orders `perms`."""
        key = (op, want, perms)
        hit = self._ranked.get(key)
        if hit is None:
            hit = []
            for nid in self.by_op.get(op, ()):
                ins = self.nodes[nid].inputs
                if len(ins) == len(want) and any(all(w is None or self.nodes[ins[perm[j]][0]].types[ins[perm[j]][1]]
                                                     .ndim == w for j, w in enumerate(want)) for perm in perms):
                    hit.append(nid)
            self._ranked[key] = hit
        return hit

    def is_weight(self, ref: TensorRef) -> bool:
        return self.graph.is_weight_only(ref, self._weight_memo)

    def type(self, ref: TensorRef):
        return self.nodes[ref[0]].types[ref[1]]


_INDEX_CACHE: dict = {}


def graph_index(graph: TensorGraph) -> GraphIndex:
    """The index of a graph, built once and kept for the most recent graphs."""
    idx = _INDEX_CACHE.get(id(graph))
    if idx is not None and idx.graph is graph:
        return idx
    idx = GraphIndex(graph)
    if len(_INDEX_CACHE) > 64:
        _INDEX_CACHE.clear()
    _INDEX_CACHE[id(graph)] = idx
    return idx


# ---------------------------------------------------------------- attribute comparison
_CANON_CACHE: dict = {}


def _norm_attr(axis_attr: Optional[str], key: str, value: Any, in_types) -> Any:
    """Attribute value with negative axes made non-negative (so that axis=-1 and axis=1 of a 2-D tensor agree);
    `axis_attr` is the operator's `rules.axis_attr` facet."""
    if axis_attr == key and isinstance(value, int) and not isinstance(value, bool) and in_types:
        nd = in_types[0].ndim
        if -nd <= value < nd:
            return value % nd
    return value


def _const_equal(op: str, axis_attr: Optional[str], key: str, const: Any, node, in_types) -> bool:
    """Does the pattern constant denote the node's (canonical) attribute value? `in_types`: list or callable."""
    have = node.attrs[key]
    if have == const:
        return True
    if callable(in_types):
        in_types = in_types()
    have = _norm_attr(axis_attr, key, have, in_types)
    if have == const or _norm_attr(axis_attr, key, const, in_types) == have:
        return True
    ck = (op, key, const, tuple(sorted(node.attrs.items())), tuple(in_types))
    hit = _CANON_CACHE.get(ck)
    if hit is None:
        try:
            canon = OPS[op].make_attrs({**node.attrs, key: const}, in_types)[key]
            hit = canon == node.attrs[key]
        except (GraphError, TypeError, ValueError, KeyError, IndexError):
            hit = False
        if len(_CANON_CACHE) > 100000:
            _CANON_CACHE.clear()
        _CANON_CACHE[ck] = hit
    return hit


# ---------------------------------------------------------------- expression environments
class MatchEnv(E.Env):
    """Expressions see the match's attribute variables, groups and tensors (plus target tensors when building)."""

    def __init__(self, match: Match, index: GraphIndex, extra: Optional[dict] = None):
        self.m, self.index = match, index
        self.extra = extra if extra is not None else {}  # the caller's dict: target tensors join it as built

    def lookup(self, name: str) -> Any:
        if name in self.m.attrs:
            return self.m.attrs[name]
        raise E.ExprError(f"'{name}' is not an attribute variable")

    def splat(self, name: str) -> dict:
        if name in self.m.splats:
            return self.m.splats[name]
        raise E.ExprError(f"unknown attribute group '{name}'")

    def _ref(self, name: str) -> TensorRef:
        if name in self.extra:
            return self.extra[name]
        if name in self.m.tensors:
            return self.m.tensors[name]
        raise E.ExprError(f"unknown tensor '{name}'")

    def is_tensor(self, name: str) -> bool:
        return name in self.extra or name in self.m.tensors

    def tensor_type(self, name: str):
        return self.index.graph.store.type(self._ref(name))

    def is_weight(self, name: str) -> bool:
        return self.index.is_weight(self._ref(name))


# ---------------------------------------------------------------- compiled pattern
class _Compiled:
    """Per-rule matcher data: which pattern nodes consume which tensors, and the pattern's symmetries."""

    def __init__(self, rule: Rule):
        self.rule = rule
        src = rule.source
        self.n = len(src)
        # consumers inside the pattern: key ('var', name) or ('node', idx, out) -> [(pattern node, arg position)]
        self.uses: dict[tuple, list[tuple[int, int]]] = {}
        for p in src:
            for j, a in enumerate(p.args):
                self.uses.setdefault(_key(a), []).append((p.index, j))
        self.output_keys = {_key(rule.src_names[o]) for o in rule.outputs}
        self.target_reads = {_key(rule.src_names[a.name]) for t in rule.target for a in t.args
                             if a.kind == "src" and a.name in rule.src_names}
        for ref in rule.tgt_outputs.values():
            if ref.kind == "src" and ref.name in rule.src_names:
                self.target_reads.add(_key(rule.src_names[ref.name]))
        self.symmetries = _symmetries(rule)
        self.deferred = [(p.index, k, E.compile_expr(s.value)) for p in src for k, s in p.attrs.items()
                         if s.kind == "expr"]
        self.where = [E.compile_expr(c.expr) for c in rule.where]
        self.ranks = _required_ranks(rule)  # input variable -> the rank a `where` conjunct demands, checked at bind
        # per pattern node: constant attributes (checked before any state is copied) and variable attributes
        self.consts = [[(k, s.value) for k, s in p.attrs.items() if s.kind == "const"] for p in src]
        self.vars = [[(k, s.value) for k, s in p.attrs.items() if s.kind == "var"] for p in src]
        # per pattern node: its operator's facets
        self.commutative = [op_facets.commutative(p.op) and len(p.args) == 2 for p in src]
        self.axis_attr = [op_facets.axis_attr(p.op) for p in src]
        self.perms = [[(0, 1), (1, 0)] if comm else [tuple(range(len(p.args)))]
                      for p, comm in zip(src, self.commutative)]
        # per pattern node: the rank each argument must have (None: any), or None when no argument is constrained
        arg_ranks = [[self.ranks.get(a.name) if a.kind == "var" else None for a in p.args] for p in src]
        self.arg_ranks = [r if any(w is not None for w in r) else None for r in arg_ranks]


def _conjuncts(where: list) -> list:
    out, todo = [], [c.expr for c in where]
    while todo:
        e = todo.pop()
        if isinstance(e, E.Binary) and e.op == "and":
            todo += [e.left, e.right]
        else:
            out.append(e)
    return out


def _required_ranks(rule: Rule) -> dict:
    """{input variable: rank} from top-level `ndim(v) == k` conjuncts of the rule's `where`: a tensor of another
    rank cannot complete a match, so the matcher refuses it as soon as it binds (generated rules say the rank of
    every input, which prunes them on graphs of other ranks before any structure is explored)."""
    inputs = set(rule.inputs)
    out: dict = {}
    for e in _conjuncts(rule.where):
        if not (isinstance(e, E.Binary) and e.op == "=="):
            continue
        for call, const in ((e.left, e.right), (e.right, e.left)):
            if (isinstance(call, E.Call) and call.func == "ndim" and len(call.args) == 1 and not call.kwargs
                    and isinstance(call.args[0], E.Name) and call.args[0].id in inputs
                    and isinstance(const, E.Const) and type(const.value) is int):
                name = call.args[0].id
                if out.get(name, const.value) != const.value:  # contradictory: no tensor can match
                    out[name] = -1
                else:
                    out[name] = const.value
    return out


def _key(a: ArgRef) -> tuple:
    return ("var", a.name) if a.kind == "var" else ("node", a.node, a.out)


def _compiled(rule: Rule) -> _Compiled:
    if rule._compiled is None:
        rule._compiled = _Compiled(rule)
    return rule._compiled


def _symmetries(rule: Rule) -> list:
    """Permutations of the source pattern nodes (with a renaming of variables) that map the pattern onto itself."""
    src = rule.source
    groups: dict[str, list[int]] = {}
    for p in src:
        groups.setdefault(p.op, []).append(p.index)
    if all(len(g) == 1 for g in groups.values()):
        return []
    total = 1
    for g in groups.values():
        for k in range(2, len(g) + 1):
            total *= k
    if total > 720:
        return []
    where_texts = _constraint_key(rule.where, None)
    out_set = set(rule.outputs)
    perms_per_group = [list(itertools.permutations(g)) for g in groups.values()]
    keys = list(groups.values())
    found = []
    for choice in itertools.product(*perms_per_group):
        sigma = {}
        for g, perm in zip(keys, choice):
            sigma.update(dict(zip(g, perm)))
        if all(sigma[i] == i for i in sigma):
            continue
        ren = _induced_renaming(src, sigma)
        if ren is None:
            continue
        r = lambda s: ren.get(s, s)  # noqa: E731
        if _constraint_key(rule.where, r) != where_texts:
            continue
        if {r(o) for o in rule.outputs} != out_set:
            continue
        found.append(tuple(sigma[i] for i in range(len(src))))
    return found


def _constraint_key(where: list, rename) -> list:
    """The constraints as a sorted list of conjunct texts, with == / != operands in canonical order."""
    parts = []
    todo = [c.expr for c in where]
    while todo:
        e = todo.pop()
        if isinstance(e, E.Binary) and e.op == "and":
            todo += [e.left, e.right]
        elif isinstance(e, E.Binary) and e.op in ("==", "!="):
            a, b = sorted((E.to_text(e.left, rename), E.to_text(e.right, rename)))
            parts.append(f"{a} {e.op} {b}")
        else:
            parts.append(E.to_text(e, rename))
    return sorted(parts)


def _induced_renaming(src: list, sigma: dict) -> Optional[dict]:
    ren: dict[str, str] = {}

    def bind(a: Optional[str], b: Optional[str]) -> bool:
        if a is None or b is None:
            return a is b
        if ren.get(a, b) != b:
            return False
        ren[a] = b
        return True

    for p in src:
        q = src[sigma[p.index]]
        if len(p.args) != len(q.args) or p.attrs.keys() != q.attrs.keys() or (p.splat is None) != (q.splat is None):
            return None
        for a, b in zip(p.args, q.args):
            if a.kind != b.kind:
                return None
            if a.kind == "var" and not bind(a.name, b.name):
                return None
            if a.kind == "node" and (sigma[a.node] != b.node or a.out != b.out):
                return None
        for k, s in p.attrs.items():
            t = q.attrs[k]
            if s.kind != t.kind:
                return None
            if s.kind == "const" and s.value != t.value:
                return None
            if s.kind == "var" and not bind(s.value, t.value):
                return None
        if p.splat is not None and not bind(p.splat, q.splat):
            return None
        for a, b in zip(p.names, q.names):
            if not bind(a, b):
                return None
    # a renaming must be a bijection
    if len(set(ren.values())) != len(ren):
        return None
    for p in src:  # expression attributes must correspond too
        q = src[sigma[p.index]]
        for k, s in p.attrs.items():
            if s.kind == "expr" and E.to_text(s.value, lambda x: ren.get(x, x)) != E.to_text(q.attrs[k].value):
                return None
    return ren


# ---------------------------------------------------------------- search
class _State:
    __slots__ = ("nodes", "used", "tensors", "attrs", "splats")

    def __init__(self, nodes, used, tensors, attrs, splats):
        self.nodes, self.used, self.tensors, self.attrs, self.splats = nodes, used, tensors, attrs, splats

    def copy(self) -> "_State":
        return _State(dict(self.nodes), set(self.used), dict(self.tensors), dict(self.attrs), dict(self.splats))


def _bind_attrs(p: PNode, var_attrs: list, axis_attr: Optional[str], node, in_types, st: _State) -> bool:
    for k, name in var_attrs:
        v = node.attrs[k]
        if axis_attr is not None:
            v = _norm_attr(axis_attr, k, v, in_types)
        have = st.attrs.get(name, _MISSING)
        if have is _MISSING:
            st.attrs[name] = v
        elif have != v:
            return False
    if p.splat is not None:
        group = {k: (_norm_attr(axis_attr, k, v, in_types) if axis_attr is not None else v)
                 for k, v in node.attrs.items() if k not in p.attrs}
        have = st.splats.get(p.splat)
        if have is None:
            st.splats[p.splat] = group
        elif have != group:
            return False
    return True


_MISSING = object()


def _try_bind(comp: "_Compiled", p: PNode, nid: int, st: _State, index: GraphIndex):
    """Yield (state, pending) for each way pattern node p can bind graph node nid."""
    node = index.nodes[nid]
    if node.op != p.op or nid in st.used or len(node.inputs) != len(p.args) or len(node.types) != p.n_outputs:
        return
    types = index.nodes
    in_types = [types[i].types[j] for i, j in node.inputs]
    want = comp.arg_ranks[p.index]
    if want is not None and not any(all(w is None or in_types[perm[j]].ndim == w for j, w in enumerate(want))
                                    for perm in comp.perms[p.index]):
        return  # an input variable of the wrong rank under every argument order
    for k, const in comp.consts[p.index]:
        if not _const_equal(p.op, comp.axis_attr[p.index], k, const, node, in_types):
            return
    base = st.copy()
    if not _bind_attrs(p, comp.vars[p.index], comp.axis_attr[p.index], node, in_types, base):
        return
    base.nodes[p.index] = nid
    base.used.add(nid)
    perms = comp.perms[p.index]
    for perm in perms:
        s = base.copy() if len(perms) > 1 else base
        pending = []
        ok = True
        for j, a in enumerate(p.args):
            ref = node.inputs[perm[j]]
            if a.kind == "var":
                have = s.tensors.get(a.name)
                if have is None:
                    rank = comp.ranks.get(a.name)
                    if rank is not None and types[ref[0]].types[ref[1]].ndim != rank:
                        ok = False
                        break
                    s.tensors[a.name] = ref
                elif have != ref:
                    ok = False
                    break
            else:  # an output of another pattern node
                if ref[1] != a.out:
                    ok = False
                    break
                bound = s.nodes.get(a.node)
                if bound is None:
                    pending.append((a.node, ref[0]))
                elif bound != ref[0]:
                    ok = False
                    break
        if ok:
            yield s, pending


def _candidates(comp: _Compiled, st: _State, index: GraphIndex) -> tuple[Optional[int], list]:
    """The unbound pattern node reachable from bound tensors with the fewest candidates (and those candidates)."""
    best, best_c = None, None
    src = comp.rule.source
    for p in src:
        if p.index in st.nodes:
            continue
        cands = None
        for j, a in enumerate(p.args):
            if a.kind == "var":
                ref = st.tensors.get(a.name)
            else:
                b = st.nodes.get(a.node)
                ref = (b, a.out) if b is not None else None
            if ref is None:
                continue
            comm = comp.commutative[p.index]
            c = {nid for nid, pos in index.consumers.get(ref, ()) if nid >= 0 and index.nodes[nid].op == p.op
                 and (pos == j or comm)}
            cands = c if cands is None else cands & c
        if cands is None:
            continue
        if best_c is None or len(cands) < len(best_c):
            best, best_c = p.index, cands
            if not cands:
                break
    if best is None:
        for p in src:  # disconnected pattern component: fall back to the op index
            if p.index not in st.nodes:
                return p.index, list(index.by_op.get(p.op, ()))
        return None, []
    return best, sorted(best_c)


def _search(comp: _Compiled, st: _State, pending: list, index: GraphIndex):
    if pending:
        (p_idx, nid), rest = pending[-1], pending[:-1]
        if p_idx in st.nodes:
            if st.nodes[p_idx] == nid:
                yield from _search(comp, st, rest, index)
            return
        for s, more in _try_bind(comp, comp.rule.source[p_idx], nid, st, index):
            yield from _search(comp, s, rest + more, index)
        return
    if len(st.nodes) == comp.n:
        yield st
        return
    p_idx, cands = _candidates(comp, st, index)
    if p_idx is None:
        return
    for nid in cands:
        for s, more in _try_bind(comp, comp.rule.source[p_idx], nid, st, index):
            yield from _search(comp, s, more, index)


def _complete(comp: _Compiled, st: _State, index: GraphIndex, check_interior: bool) -> Optional[Match]:
    rule = comp.rule
    tensors = dict(st.tensors)
    for name, ref in rule.src_names.items():
        tensors[name] = (st.nodes[ref.node], ref.out)
    m = Match(rule, dict(st.nodes), tensors, dict(st.attrs), dict(st.splats))

    def bound(p_idx: int) -> tuple:
        node = index.nodes[st.nodes[p_idx]]
        return node, [index.type(r) for r in node.inputs]

    if not constraints_hold(comp, MatchEnv(m, index), bound):
        return None
    if check_interior and not _removable(comp, m, index):
        return None
    return m


def constraints_hold(comp: _Compiled, env: MatchEnv, bound: Callable[[int], tuple]) -> bool:
    """The attributes computed from other bindings and the `where` clause, on a match; `bound(i)`: the node bound
    to pattern node i (its `attrs`) and its input types. A constraint that cannot be evaluated there fails."""
    rule = comp.rule
    try:
        for p_idx, k, fn in comp.deferred:
            node, in_types = bound(p_idx)
            if not _const_equal(rule.source[p_idx].op, comp.axis_attr[p_idx], k, freeze(fn(env)), node, in_types):
                return False
        return all(fn(env) for fn in comp.where)
    except E.ExprError as err:
        log.debug("rule %s: constraint not evaluable on a match: %s", rule.name, err)
        return False


def _removable(comp: _Compiled, m: Match, index: GraphIndex) -> bool:
    """True if no interior source tensor (one the rewrite removes) is read outside the match or is a graph output."""
    used = m.node_ids
    for p in comp.rule.source:
        nid = m.nodes[p.index]
        for k in range(p.n_outputs):
            key = ("node", p.index, k)
            if key in comp.output_keys or key in comp.target_reads:
                continue
            for cid, _ in index.consumers.get((nid, k), ()):
                if cid not in used:  # read outside the match (or a graph output: cid == -1)
                    return False
    return True


def find_matches(rule: Rule, graph: TensorGraph, index: Optional[GraphIndex] = None, dedupe: bool = True,
                 limit: Optional[int] = None, check_interior: bool = True) -> list:
    """Every match of the rule's source in the graph (that the rule could remove: see `check_interior`)."""
    comp = _compiled(rule)
    index = index or graph_index(graph)
    src = rule.source
    # anchor: the pattern node whose operator is rarest in this graph
    anchor = min(src, key=lambda p: len(index.by_op.get(p.op, ())))
    cands = index.by_op.get(anchor.op)
    want = comp.arg_ranks[anchor.index]
    if cands and want is not None:  # only the nodes whose inputs have the ranks the rule demands
        cands = index.by_op_ranked(anchor.op, tuple(want), tuple(comp.perms[anchor.index]))
    if not cands:
        return []
    out: list[Match] = []
    seen: set = set()
    inputs = rule.inputs
    for nid in cands:
        st0 = _State({}, set(), {}, {}, {})
        for st, pending in _try_bind(comp, anchor, nid, st0, index):
            for full in _search(comp, st, pending, index):
                key = tuple(full.nodes[i] for i in range(comp.n))
                tkey = (key, tuple(full.tensors.get(v) for v in inputs))
                if tkey in seen:
                    continue
                seen.add(tkey)
                if dedupe and comp.symmetries and any(tuple(key[s] for s in sig) < key for sig in comp.symmetries):
                    continue
                m = _complete(comp, full, index, check_interior)
                if m is not None:
                    out.append(m)
                    if limit is not None and len(out) >= limit:
                        return out
    return out


def every_match(rules: list, graph: TensorGraph, index: Optional[GraphIndex] = None) -> list:
    """[(rule, match)] with every rule tried to the end and ranks left to each rule's `where` clause: no rule
    index, no early rank check. The reference the fast paths (`RuleSet.matches`) are checked against."""
    index = index or graph_index(graph)
    out = []
    for r in rules:
        comp = _compiled(r)
        saved, comp.ranks, comp.arg_ranks = (comp.ranks, comp.arg_ranks), {}, [None] * comp.n
        try:
            out += [(r, m) for m in find_matches(r, graph, index=index)]
        finally:
            comp.ranks, comp.arg_ranks = saved
    return out
