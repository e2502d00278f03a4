"""Concrete instances of a rule: small shapes and attribute values at which its source pattern builds.

An instance is the rule's source built as a TensorGraph (inputs named after the rule's input variables; variables
that the rule requires to be weights are weight nodes), the match of the rule on it, and the choices made. The verifier
evaluates both sides of the rule on instances symbolically (Z3); the tests evaluate them with NumPy.

*Choices* are the shape alternative (`#shapes`), each dimension symbol (`verify.dims`, default 1, 2, 3) and each
attribute variable or group member (`verify.attrs`, else the operator's `rules.domains` facet in `op_facets.py`, else
its default value). An instance is *admissible* when its source builds and the rule's constraints hold: the rule claims
to apply there. `plan_instances` covers the choices by combinations, not by values:

* every combination, when there are at most `EXHAUSTIVE_LIMIT` of them;
* otherwise every *pair* of values of two choices that occur together (a greedy covering array); a pair no
  admissible instance covers is searched for exhaustively (it is then outside the rule's domain) or reported as
  not covered (after the first such pair, which makes a proof impossible, the others are not searched for);
* plus one instance with every dimension symbol >= 4 where the source builds within the size bound;
* plus *wide* instances (checked numerically): some dimension symbols grown to `WIDE_DIMS` (one odd, one even size),
  the others at their domain's largest value, largest grown sets first, so that a source whose windows fit only at
  sizes beyond the domains (a kernel after a stride) builds somewhere.

The sample depends on the rule's content (its canonical form), never on its name or file position.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ...graph import GraphError, NodeStore, TensorGraph, TensorType
from ...graph.ops import OPS
from ...graph.types import freeze
from ..language import expr as E
from .. import op_facets
from ..language.rule import PNode, Rule
from ..matching.matcher import Match, find_matches

DEFAULT_DIMS = (1, 2, 3)
LARGE_DIMS = (4, 5)  # the "every dim >= 4" instance tries these
EXHAUSTIVE_LIMIT = 256  # combinations: all of them up to this many, else all pairs
PAIR_TRIES = 32  # random completions of an uncovered pair before searching it exhaustively
PAIR_SEARCH_LIMIT = 1200  # leaves of that exhaustive search
LARGE_ELEMENTS = 1200  # the large instance may have this many input elements
WIDE_DIMS = (7, 8)  # the wide instances' grown dimensions (odd and even: strides and SAME padding differ)
WIDE_TRIES = 32  # grown sets tried per size
WIDE_ELEMENTS = 4000  # a wide instance may have this many input elements
SWEEP_DIMS = tuple(range(1, 10))  # the sweep's dimension sizes (besides each symbol's own domain)


class NoInstance(Exception):
    """The rule cannot be instantiated (missing shapes, or no choice builds)."""


class _Branch(Exception):
    """Enumeration: a choice not fixed by the script (carries its domain)."""

    def __init__(self, name: str, dom: list):
        super().__init__(name)
        self.name, self.dom = name, dom


class _Reject(Exception):
    """A scripted value outside the domain offered at this point, or an instance over the size bound."""


@dataclass
class Instance:
    rule: Rule
    shapes: dict  # input variable -> shape
    choices: dict  # attribute variable / 'group.attr' / dimension symbol -> value
    graph: TensorGraph  # the source, outputs = the rule's outputs
    match: Match
    weight_vars: frozenset
    large: bool = False  # the every-dim->=4 instance
    wide: bool = False  # a wide instance (dimensions grown beyond their domains): checked numerically

    def describe(self) -> str:
        sh = ", ".join(f"{k}: {list(v)}" for k, v in self.shapes.items())
        at = ", ".join(f"{k}={v}" for k, v in self.choices.items() if k not in self.symbols)
        return f"shapes {{{sh}}}" + (f", attrs {{{at}}}" if at else "")

    @property
    def symbols(self) -> set:
        return {d for alt in self.rule.verify.shapes for s in alt.values() for d in s if isinstance(d, str)} | \
            {"#shapes"}

    @property
    def num_elements(self) -> int:
        return sum(math.prod(s) for s in self.shapes.values())


def weight_vars(rule: Rule) -> frozenset:
    """Input variables the rule's constraints require to be weights (a top-level `weight(v)` constraint)."""
    out = set()
    for c in rule.where:
        e = c.expr
        parts = [e]
        while parts:
            q = parts.pop()
            if isinstance(q, E.Binary) and q.op == "and":
                parts += [q.left, q.right]
            elif isinstance(q, E.Call) and q.func == "weight" and len(q.args) == 1 and isinstance(q.args[0], E.Name):
                out.add(q.args[0].id)
    return frozenset(v for v in out if v in rule.inputs)


def defining_equations(rule: Rule) -> dict:
    """Where-clauses `v == expr` (v an attribute variable): instances compute v instead of sampling it."""
    out = {}
    for c in rule.where:
        e = c.expr
        if isinstance(e, E.Binary) and e.op == "==":
            for a, b in ((e.left, e.right), (e.right, e.left)):
                if isinstance(a, E.Name) and a.id in rule.attr_vars and a.id not in E.names_in(b):
                    out.setdefault(a.id, b)
                    break
    return out


# ---------------------------------------------------------------- domains
def _factor_shapes(n: int) -> list:
    """A few shapes with n elements (for a reshape target)."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    out = [(n,), (1, n), (n, 1)]
    out += [(d, n // d) for d in divs if 1 < d < n]
    out += [(1, d, n // d) for d in divs if 1 < d < n][:2]
    seen, res = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            res.append(s)
    return res


def _partitions(total: int, parts: int, limit: int = 6) -> list:
    """Ways to cut `total` into `parts` positive sizes: unequal ones first, then the rest (at most `limit`)."""
    if parts < 1 or total < parts:
        return []
    out = [c for c in itertools.combinations(range(1, total), parts - 1)]
    sizes = [tuple(b - a for a, b in zip((0,) + c, c + (total,))) for c in out]
    sizes.sort(key=lambda s: (len(set(s)) == 1, s))
    return sizes[:limit]


def _groups(in_types: list) -> list:
    """A conv's group count is fixed by its input and weight shapes: C_in / C_weight (when that divides)."""
    if len(in_types) < 2 or in_types[0].ndim < 2 or in_types[1].ndim < 2 or not in_types[1].shape[1]:
        return [1]
    c, cw, o = in_types[0].shape[1], in_types[1].shape[1], in_types[1].shape[0]
    return [c // cw] if c % cw == 0 and o % (c // cw) == 0 else []


# domain words of the `rules.domains` facet: values derived from the node's input types (and attributes chosen before)
DOMAIN_WORDS: dict[str, Callable[[list, dict, int], list]] = {
    "axis": lambda t, a, n: list(range(t[0].ndim)) if t else [],
    "perm": lambda t, a, n: [tuple(p) for p in itertools.permutations(range(t[0].ndim))],
    "axes": lambda t, a, n: [tuple(c) for r in range(1, t[0].ndim + 1)
                             for c in itertools.combinations(range(t[0].ndim), r)],
    "trailing_axes": lambda t, a, n: [(t[0].ndim - 1,), tuple(range(max(0, t[0].ndim - 2), t[0].ndim))],
    "reshape": lambda t, a, n: _factor_shapes(math.prod(t[0].shape)),
    "groups": lambda t, a, n: _groups(t),
    "partition": lambda t, a, n: _partitions(t[0].shape[a["axis"]], n)
    if isinstance(a.get("axis"), int) and -t[0].ndim <= a["axis"] < t[0].ndim else [],
}


def default_domain(op: str, key: str, in_types: list, n_outputs: int = 1, attrs: Optional[dict] = None) -> list:
    """Values an attribute ranges over when a rule leaves it free: the operator's `rules.domains` entry, else its
    default."""
    spec = op_facets.domains(op).get(key)
    if spec is None:
        d = OPS[op].attrs.get(key)
        return [] if d is None else [d]
    if isinstance(spec, str):
        try:
            return list(DOMAIN_WORDS[spec](list(in_types), dict(attrs or {}), n_outputs))
        except (IndexError, TypeError, ValueError):
            return []
    return list(spec)


class _BuildEnv(E.Env):
    def __init__(self, store: NodeStore, tensors: dict, choices: dict, groups: dict):
        self.store, self.tensors, self.choices, self.groups = store, tensors, choices, groups

    def lookup(self, name):
        if name in self.choices:
            return self.choices[name]
        raise E.ExprError(f"attribute variable '{name}' is not bound yet")

    def splat(self, name):
        return self.groups[name]

    def is_tensor(self, name):
        return name in self.tensors

    def tensor_type(self, name):
        return self.store.type(self.tensors[name])

    def is_weight(self, name):
        return self.store.nodes[self.tensors[name][0]].op == "weight"


def content_seed(rule: Rule, seed: int = 0) -> int:
    """The sampler's seed: a hash of the rule's content (canonical form without its name) and `seed`."""
    return int(hashlib.sha256(f"{rule.canonical}:{seed}".encode()).hexdigest()[:12], 16)


def build_instance(rule: Rule, shapes: dict, choose: Callable[[str, list], Any],
                   values: Optional[dict] = None) -> Instance:
    """Build the rule's source at the given shapes; `choose(name, domain)` picks unbound attribute values.

    Raises NoInstance when the choices do not build or the rule's constraints reject them.
    """
    b = _SourceBuilder(rule, shapes, choose, values)
    b.check_early()
    built = {p.index: b.build_node(p) for p in rule.source}
    graph = TensorGraph(b.store, [b.tensors[o] for o in rule.outputs])
    want = {p.index: built[p.index][0][0] for p in rule.source}
    for m in find_matches(rule, graph, dedupe=False):
        if m.nodes == want and all(m.tensors[v] == b.tensors[v] for v in rule.inputs):
            return Instance(rule, {v: tuple(shapes[v]) for v in rule.inputs}, b.choices, graph, m, b.weight_vars)
    raise NoInstance("the rule's constraints reject this instance")


class _SourceBuilder:
    """Builds a rule's source pattern node by node, choosing the attribute values the rule leaves free."""

    def __init__(self, rule: Rule, shapes: dict, choose: Callable[[str, list], Any], values: Optional[dict]):
        self.rule, self.choose = rule, choose
        self.weight_vars = weight_vars(rule)
        self.defs = defining_equations(rule)
        self.store = NodeStore()
        self.tensors: dict = {}  # input variables and named source tensors -> TensorRef
        self.choices: dict = {}  # attribute variable / 'group.attr' -> value
        self.groups: dict = {}  # attribute group -> {attribute: value}
        self.env = _BuildEnv(self.store, self.tensors, self.choices, self.groups)
        self.pending = list(rule.where)  # constraints not checked yet
        self.built: dict = {}  # pattern node index -> its output refs
        for v in rule.inputs:
            ty = TensorType(tuple(shapes[v]), "float32")
            if v in self.weight_vars:
                arr = values[v] if values is not None and v in values else np.zeros(ty.shape)
                self.tensors[v] = self.store.weight(arr, ty, key=f"var:{v}")
            else:
                self.tensors[v] = self.store.input(v, ty)

    def check_early(self) -> None:
        """Constraints whose names are all bound hold (the matcher checks them all again): a violated one prunes
        the enumeration before later choices multiply it."""
        bound = set(self.rule.inputs) | set(self.choices)
        for c in list(self.pending):
            if E.names_in(c.expr) <= bound:
                self.pending.remove(c)
                try:
                    holds = bool(E.evaluate(c.expr, self.env))
                except E.ExprError:
                    continue
                if not holds:
                    raise NoInstance(f"constraint '{c.text}' is false")

    def build_node(self, p: PNode) -> list:
        """Add pattern node `p` to the store (its attributes chosen); returns its outputs."""
        refs = [self.tensors[a.name] if a.kind == "var" else self.built[a.node][a.out] for a in p.args]
        in_types = [self.store.type(r) for r in refs]
        try:
            attrs = self.attrs_of(p, in_types)
            outs = self.store.add(p.op, refs, **attrs)
        except (GraphError, E.ExprError) as err:
            raise NoInstance(str(err)) from None
        if len(outs) != p.n_outputs:
            raise NoInstance(f"{p.op} gave {len(outs)} outputs, the pattern names {p.n_outputs}")
        self.built[p.index] = outs
        for k, n in enumerate(p.names):
            if n is not None:
                self.tensors[n] = outs[k]
        return outs

    def attrs_of(self, p: PNode, in_types: list) -> dict:
        """Node `p`'s attributes: constants, variables (computed from a defining equation or chosen), then
        expressions (which may read the variables), then its attribute group."""
        attrs: dict = {}
        for k, spec in p.attrs.items():
            if spec.kind == "const":
                attrs[k] = spec.value
            elif spec.kind == "var":
                attrs[k] = self.variable(spec.value, p, k, in_types, attrs)
        for k, spec in p.attrs.items():
            if spec.kind == "expr":
                attrs[k] = freeze(E.evaluate(spec.value, self.env))
        if p.splat is not None:
            if p.splat not in self.groups:
                self.groups[p.splat] = self.group(p, in_types, attrs)
            for k, v in self.groups[p.splat].items():
                attrs.setdefault(k, v)
        return attrs

    def variable(self, name: str, p: PNode, key: str, in_types: list, attrs: dict) -> Any:
        """The value of attribute variable `name` (first bound at `p.key`)."""
        if name not in self.choices and name in self.defs:
            try:
                self.choices[name] = freeze(E.evaluate(self.defs[name], self.env))
            except E.ExprError:
                pass
        if name not in self.choices:
            dom = self.rule.verify.attrs.get(name) or default_domain(p.op, key, in_types, p.n_outputs, attrs)
            if not dom:
                raise NoInstance(f"no domain for attribute variable '{name}' ({p.op}.{key}); give verify.attrs")
            self.choices[name] = self.choose(name, list(dom))
            self.check_early()
        return self.choices[name]

    def group(self, p: PNode, in_types: list, attrs: dict) -> dict:
        """Choose the members of `p`'s attribute group: the operator's attributes the pattern does not name."""
        g: dict = {}
        for k in OPS[p.op].attrs:
            if k in p.attrs:
                continue
            name = f"{p.splat}.{k}"
            dom = self.rule.verify.attrs.get(name) or default_domain(p.op, k, in_types, p.n_outputs, {**attrs, **g})
            if not dom:
                raise NoInstance(f"no domain for {name}; give verify.attrs")
            g[k] = self.choices[name] = self.choose(name, list(dom))
        return g


# ---------------------------------------------------------------- plans: which instances cover the rule
_KEYS: dict = {}


def _key(v: Any) -> str:
    """A value's identity for coverage (repr of the frozen value: 1 and True differ)."""
    try:
        k = (type(v), v)
        out = _KEYS.get(k)
    except TypeError:  # unhashable (a list): freeze it first
        return repr(freeze(v))
    if out is None:
        out = _KEYS[k] = repr(freeze(v))
    return out


def _offered(v: Any, dom: list) -> bool:
    """v is one of the domain's values (by `_key`: 1, 1.0 and True differ)."""
    t = type(v)
    if (t is int or t is str) and all(type(d) is t for d in dom):  # the common case, fast
        return v in dom
    k = _key(v)
    return any(_key(d) == k for d in dom)


def _symbols_of(alt: dict) -> list:
    return sorted({d for s in alt.values() for d in s if isinstance(d, str)})


def _attempt(rule: Rule, choose: Callable[[str, list], Any], elements: int, large: bool = False,
             values_fn: Optional[Callable[[dict], dict]] = None) -> Instance:
    """One instance from a chooser: the shape alternative, each dimension symbol, then the source's attributes.

    Raises NoInstance (the source does not build or the constraints reject it), _Reject or _Branch (from choose)."""
    spec = rule.verify
    alts = spec.shapes or [{}]
    a_idx = choose("#shapes", list(range(len(alts))))
    alt = alts[a_idx]
    dims = {}
    for sym in _symbols_of(alt):
        dims[sym] = choose(sym, list(LARGE_DIMS if large else spec.dims.get(sym, DEFAULT_DIMS)))
    shapes = {v: tuple(dims[d] if isinstance(d, str) else d for d in alt[v]) for v in rule.inputs}
    if sum(math.prod(s) for s in shapes.values()) > elements:
        raise _Reject("over the size bound")
    inst = build_instance(rule, shapes, choose, values_fn(shapes) if values_fn else None)
    inst.choices.update(dims)
    inst.large = large
    return inst


@dataclass
class Plan:
    """The instances the bounded proof checks, and how they cover the rule's choices."""

    instances: list = field(default_factory=list)
    mode: str = "exhaustive"  # 'exhaustive' | 'pairwise'
    combinations: int = 0  # exhaustive: admissible combinations; pairwise: value pairs that occur together
    pairs_covered: int = 0
    outside: int = 0  # pairs no admissible instance has (proven by exhaustive search)
    uncovered: list = field(default_factory=list)  # descriptions of pairs / values not covered
    oversize: int = 0  # combinations over the size bound (not checked)
    large: bool = False  # an instance with every dimension >= 4 is included
    wide: int = 0  # wide instances included
    truncated: bool = False  # max_instances cut the plan short

    @property
    def complete(self) -> bool:
        return not self.uncovered and not self.truncated and bool(self.instances)

    def describe(self) -> str:
        n = len(self.instances)
        if self.mode == "exhaustive":
            txt = f"{n} instances, all {self.combinations} combinations"
        else:
            txt = f"{n} instances, all pairs ({self.pairs_covered} of {self.combinations}"
            txt += f", {self.outside} outside the rule's domain)" if self.outside else ")"
        if self.large:
            txt += ", one with every dim >= 4"
        if self.wide:
            txt += f", {self.wide} wide"
        if self.oversize:
            txt += f", {self.oversize} over the size bound"
        if self.uncovered:
            txt += f"; NOT covered: {'; '.join(self.uncovered[:4])}" + \
                (f" (+{len(self.uncovered) - 4} more)" if len(self.uncovered) > 4 else "")
        if self.truncated:
            txt += "; truncated by max_instances"
        return txt


class _Planner:
    def __init__(self, rule: Rule, seed: int, values_fn):
        self.rule, self.values_fn = rule, values_fn
        self.rng = random.Random(content_seed(rule, seed))
        self.elements = rule.verify.elements
        self.seen: set = set()  # assignments tried
        self.offered: set = set()  # value pairs that occurred together in some attempt
        self.covered: set = set()
        self.values: dict = {}  # (name, repr) -> value, for every value offered
        self.offers_seen: set = set()
        self.memo: dict = {}  # script -> outcome, for the enumerations of pair searches
        self.instances: list = []
        self.oversize = 0
        self.syms = frozenset(d for alt in (rule.verify.shapes or [{}]) for d in _symbols_of(alt))

    # -------------------------------------------------------- one attempt
    def run(self, script: dict, fill: Optional[Callable[[str, list, dict], Any]], large: bool = False,
            offer: bool = True) -> tuple:
        """Build with the script; unscripted choices from `fill` (None: raise _Branch). Returns (instance or None,
        assignment, scope). `offer`: record the pairs this attempt offers."""
        if fill is None and not offer and not large:  # a pair's completions: outcomes are memoised
            key = tuple(sorted((k, _key(v)) for k, v in script.items()))
            hit = self.memo.get(key)
            if hit is None:
                try:
                    hit = self.memo[key] = ("done", self._run(script, None, large, offer))
                except _Branch as b:
                    hit = self.memo[key] = ("branch", b)
            if hit[0] == "branch":
                raise hit[1]
            return hit[1]
        return self._run(script, fill, large, offer)

    def _run(self, script: dict, fill, large: bool, offer: bool) -> tuple:
        assign: dict = {}
        scope: list = []

        def choose(name: str, dom: list) -> Any:
            if not dom:
                raise NoInstance(f"empty domain for {name}")
            scope.append((name, dom))
            if name in script:
                v = script[name]
                if not large or name not in self.syms:
                    if not _offered(v, dom):
                        raise _Reject(f"{name}={v} not offered")
            elif fill is None:
                raise _Branch(name, dom)
            else:
                v = fill(name, dom, assign)
            assign[name] = freeze(v)
            return v

        try:
            inst = _attempt(self.rule, choose, LARGE_ELEMENTS if large else self.elements, large, self.values_fn)
        except _Reject as err:
            if "size bound" in str(err) and fill is None:
                self.oversize += 1
            inst = None
        except NoInstance:
            inst = None
        finally:
            if offer:
                self._offer(scope, assign)
        return inst, assign, scope

    def _syms(self) -> frozenset:
        return self.syms

    def _offer(self, scope: list, assign: dict) -> None:
        """Record the pairs this attempt offered: each chosen value with every value a later choice could take
        (a later choice's domain, even its presence, may depend on the earlier value)."""
        sig = tuple((n, tuple(_key(v) for v in dom), _key(assign[n]) if n in assign else None) for n, dom in scope)
        if sig in self.offers_seen:
            return
        self.offers_seen.add(sig)
        for j, (n2, dom) in enumerate(scope):
            keys = sig[j][1]
            for v, k in zip(dom, keys):
                self.values.setdefault((n2, k), freeze(v))
            for n1, _ in scope[:j]:
                if n1 == n2 or n1 not in assign:
                    continue
                k1 = _key(assign[n1])
                for k2 in keys:
                    self.offered.add(_pair((n1, k1), (n2, k2)))

    def keep(self, inst: Instance, assign: dict) -> bool:
        key = tuple(sorted((k, _key(v)) for k, v in assign.items()))
        if key in self.seen:
            return False
        self.seen.add(key)
        self.instances.append(inst)
        self.covered |= _pairs_of(assign)
        return True

    def estimate(self, probes: int = 12) -> int:
        """The number of combinations, estimated from random completions (the largest product of the domain
        sizes along one of them)."""
        best = 1
        for _ in range(probes):
            _, _, scope = self.run({}, lambda n, d, a: self.rng.choice(d))
            best = max(best, math.prod(len(d) for _, d in scope))
        return best

    # -------------------------------------------------------- exhaustive enumeration
    def enumerate(self, script: dict, limit: int, want: Optional[tuple] = None) -> tuple:
        """Depth-first over every combination extending the script. Returns (admissible leaves as (inst, assign),
        leaves visited, complete). With `want` (a pair) stops at the first admissible leaf that has it."""
        stack = [dict(script)]
        found, leaves = [], 0
        while stack:
            s = stack.pop()
            try:
                inst, assign, _ = self.run(s, None, offer=want is None)
            except _Branch as b:
                # dimension symbols largest first when searching for a pair (windows fit at large sizes)
                order = b.dom if want is not None and b.name in self._syms() else list(reversed(b.dom))
                for v in order:
                    stack.append({**s, b.name: freeze(v)})
                continue
            leaves += 1
            if inst is not None:
                found.append((inst, assign))
                if want is not None and want in _pairs_of(assign):
                    return found, leaves, True
            if leaves >= limit and stack:
                return found, leaves, False
        return found, leaves, True

    # -------------------------------------------------------- greedy completion for pairwise coverage
    def random_fill(self, name: str, dom: list, assign: dict) -> Any:
        return self.rng.choice(dom)

    def wide_fill(self, name: str, dom: list, assign: dict) -> Any:
        """Dimension symbols at their largest (windows fit), attributes at random."""
        return max(dom) if name in self._syms() else self.rng.choice(dom)

    def greedy_fill(self, name: str, dom: list, assign: dict) -> Any:
        best, score = [], -1
        for v in dom:
            k = _key(v)
            sc = sum(1 for n2, v2 in assign.items()
                     if _pair((name, k), (n2, _key(v2))) not in self.covered)
            if sc > score:
                best, score = [v], sc
            elif sc == score:
                best.append(v)
        return self.rng.choice(best)


def _pair(a: tuple, b: tuple) -> tuple:
    return (a, b) if a <= b else (b, a)


def _pairs_of(assign: dict) -> set:
    items = sorted((k, _key(v)) for k, v in assign.items())
    return {(a, b) for a, b in itertools.combinations(items, 2)}


def _describe_pair(p: tuple) -> str:
    return f"{p[0][0]}={p[0][1]} with {p[1][0]}={p[1][1]}"


def plan_instances(rule: Rule, seed: int = 0, max_instances: Optional[int] = None,
                   values_fn: Optional[Callable[[dict], dict]] = None) -> Plan:
    """The admissible instances that cover the rule's choices (see the module docstring). Raises NoInstance when
    verify.shapes is incomplete."""
    alts = rule.verify.shapes or [{}]
    for alt in alts:
        missing = [v for v in rule.inputs if v not in alt]
        if missing:
            raise NoInstance(f"verify.shapes gives no shape for input(s) {', '.join(missing)}")
    pl = _Planner(rule, seed, values_fn)
    plan = Plan()
    found, complete = [], False
    if pl.estimate() <= EXHAUSTIVE_LIMIT:
        found, _, complete = pl.enumerate({}, EXHAUSTIVE_LIMIT)
    if complete:
        plan.mode = "exhaustive"
        for inst, assign in found:
            pl.keep(inst, assign)
        plan.combinations = len(pl.instances)
    else:
        plan.mode = "pairwise"
        for inst, assign in found:
            pl.keep(inst, assign)
        _pairwise(pl, plan)
    plan.oversize = pl.oversize if plan.mode == "exhaustive" else 0
    _add_large(pl, plan)
    _add_wide(pl, plan)
    plan.instances = pl.instances
    if max_instances is not None and len(plan.instances) > max_instances:
        plan.instances, plan.truncated = plan.instances[:max_instances], True
    if not plan.instances and not plan.uncovered:
        plan.uncovered.append("no admissible instance (check verify.shapes / verify.dims / where)")
    return plan


def _pairwise(pl: _Planner, plan: Plan) -> None:
    # a first sweep of random completions discovers which choices occur together
    for _ in range(24):
        inst, assign, _ = pl.run({}, lambda n, d, a: pl.rng.choice(d))
        if inst is not None:
            pl.keep(inst, assign)
    outside: set = set()
    missed: set = set()
    while True:
        todo = sorted(pl.offered - pl.covered - outside - missed)
        if not todo:
            break
        want = todo[0]
        script = {want[0][0]: pl.values[want[0]], want[1][0]: pl.values[want[1]]}
        done = False
        for k in range(PAIR_TRIES):  # greedy completions, then random ones
            fill = pl.greedy_fill if k < PAIR_TRIES // 4 else pl.wide_fill if k % 2 else pl.random_fill
            inst, assign, _ = pl.run(script, fill)
            if inst is not None and pl.keep(inst, assign) and want in pl.covered:
                done = True
                break
        if done or want in pl.covered:
            continue
        if missed:  # the plan is incomplete already (no proof): its instances are still checked, not searched for
            missed.add(want)
            continue
        found, _, complete = pl.enumerate(script, PAIR_SEARCH_LIMIT, want)
        hit = next(((i, a) for i, a in found if want in _pairs_of(a)), None)
        if hit is not None:
            pl.keep(*hit)
        elif complete:
            outside.add(want)
        else:
            missed.add(want)
    plan.combinations = len(pl.offered)
    plan.pairs_covered = len(pl.offered & pl.covered)
    plan.outside = len(outside)
    plan.uncovered = [_describe_pair(p) for p in sorted(missed)]


def _add_large(pl: _Planner, plan: Plan) -> None:
    """One instance with every dimension symbol >= 4 (and the attributes completed greedily), if one builds."""
    syms = sorted(pl._syms())
    if not syms:
        return
    for dim in LARGE_DIMS:
        for a_idx in range(len(pl.rule.verify.shapes or [{}])):
            script = {"#shapes": a_idx, **{s: dim for s in syms}}
            for _ in range(6):
                inst, assign, _ = pl.run(script, pl.greedy_fill, large=True)
                if inst is not None:
                    pl.instances.append(inst)
                    plan.large = True
                    return


def _add_wide(pl: _Planner, plan: Plan) -> None:
    """Wide instances (module docstring): for each size of `WIDE_DIMS`, the first grown set of dimension symbols
    (largest sets first, at most `WIDE_TRIES`) whose source builds within `WIDE_ELEMENTS`."""
    rule = pl.rule
    syms = sorted(pl._syms())
    if not syms:
        return
    top = {s: max(rule.verify.dims.get(s, DEFAULT_DIMS)) for s in syms}
    subsets = [c for r in range(len(syms), 0, -1) for c in itertools.combinations(syms, r)][:WIDE_TRIES]
    for big in WIDE_DIMS:
        for grown in subsets:
            if all(top[s] >= big for s in grown):
                continue
            dims = {**top, **{s: big for s in grown}}

            def choose(name: str, dom: list) -> Any:
                if not dom:
                    raise NoInstance(f"empty domain for {name}")
                return dims[name] if name in dims else pl.rng.choice(dom)

            try:
                inst = _attempt(rule, choose, WIDE_ELEMENTS)
            except (NoInstance, _Reject):
                continue
            inst.wide = True
            pl.instances.append(inst)
            plan.wide += 1
            break


def sweep_instances(rule: Rule, tries: int, seed: int = 0) -> Iterator[Instance]:
    """Admissible instances off the plan, for the verifier's refutation sweep: `tries` assignments where each
    dimension symbol takes a value of its domain or of `SWEEP_DIMS` (even odds), and the shape alternative and the
    attributes a value of their domains, at random from the rule's content seed (deterministic). Assignments that do
    not build, that the constraints reject, or that repeat one tried before are skipped."""
    rng = random.Random(content_seed(rule, seed) ^ 0x5EED)
    syms = frozenset(d for alt in (rule.verify.shapes or [{}]) for d in _symbols_of(alt))
    seen: set = set()
    for _ in range(tries):
        assign: dict = {}

        def choose(name: str, dom: list) -> Any:
            if not dom:
                raise NoInstance(f"empty domain for {name}")
            v = rng.choice(SWEEP_DIMS) if name in syms and rng.random() < 0.5 else rng.choice(dom)
            assign[name] = freeze(v)
            return v

        try:
            inst = _attempt(rule, choose, 10 ** 6)
        except (NoInstance, _Reject):
            continue
        key = tuple(sorted((k, _key(v)) for k, v in assign.items()))
        if key not in seen:
            seen.add(key)
            yield inst


def iter_instances(rule: Rule, max_instances: Optional[int] = None, seed: int = 0,
                   values_fn: Optional[Callable[[dict], dict]] = None) -> Iterator[Instance]:
    """The planned instances (see `plan_instances`), at most `max_instances`."""
    plan = plan_instances(rule, seed, max_instances, values_fn)
    if not plan.instances:
        raise NoInstance("; ".join(plan.uncovered) or "no admissible instance")
    yield from plan.instances


def positive_vars(rule: Rule) -> set:
    """Input variables read where an operator wants positive values (`rules.positive_inputs`: a variance, a sqrt):
    they get positive values in NumPy checks."""
    return {p.args[i].name for p in rule.source for i in op_facets.positive_inputs(p.op) if p.args[i].kind == "var"}


def numpy_check(inst: Instance, rng: Optional[np.random.Generator] = None, rtol: float = 1e-6,
                atol: float = 1e-9, integers: bool = False, tgt: Optional[TensorGraph] = None) -> tuple:
    """Evaluate both sides of the rule at the instance with NumPy. Returns (ok, detail, feeds).

    Inputs are random in +-[0.25, 2], or with `integers` in +-{1, 2, 3} (float64: exact for linear arithmetic,
    relu, max, concat and split; an output that is not finite is not compared); positive where an operator wants
    positive values. `tgt`: the instance's graph
    rewritten by the rule, when the caller has it."""
    from ..matching.rewrite import build_target

    rng = rng or np.random.default_rng(0)
    g = inst.graph
    feeds = {}
    pos = positive_vars(inst.rule)
    for v in inst.rule.inputs:
        feeds[v] = rng.integers(1, 4, inst.shapes[v]).astype(np.float64) if integers else \
            rng.uniform(0.25, 2.0, inst.shapes[v])
        if v not in pos:
            feeds[v] *= rng.choice([-1.0, 1.0], inst.shapes[v])
    # weight variables hold their values in the store: give them these values
    store = g.store
    for v in inst.weight_vars:
        node = store.nodes[inst.match.tensors[v][0]]
        node.value = feeds[v]
    if tgt is None:
        tgt = g.replace(build_target(inst.rule, g, inst.match))
    with np.errstate(all="ignore"):  # a NaN or inf is compared like any value, not warned about
        src_vals = g.evaluate(feeds)
        tgt_vals = tgt.evaluate(feeds)
    for i, (a, b) in enumerate(zip(src_vals, tgt_vals)):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return False, f"output {inst.rule.outputs[i]}: shape {a.shape} vs {b.shape}", feeds
        if np.isnan(a).any() or np.isnan(b).any() or integers and not (np.isfinite(a).all() and np.isfinite(b).all()):
            continue  # (integers: an exact zero divides more often; such an output decides nothing)
        finite = np.abs(a[np.isfinite(a)])
        scale = max(1.0, float(finite.max(initial=0.0)))
        if not np.allclose(a, b, rtol=rtol, atol=atol * scale):
            k = int(np.argmax(np.abs(a - b)))
            return False, (f"output {inst.rule.outputs[i]}{[int(j) for j in np.unravel_index(k, a.shape)]}: source "
                           f"{a.flat[k]:.6g} vs target {b.flat[k]:.6g}"), feeds
    return True, "", feeds
