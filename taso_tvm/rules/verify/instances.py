"""Concrete instances of a rule: small shapes and attribute values at which its source pattern builds.

An instance is the rule's source built as a TensorGraph (inputs named after the rule's input variables; variables
that the rule requires to be weights are weight nodes), the match of the rule on it, and the choices made. The verifier
evaluates both sides of the rule on instances symbolically (Z3); the tests evaluate them with NumPy.

*Choices* are the shape alternative (`#shapes`), each dimension symbol (`verify.dims`, default 1, 2, 3) and each
attribute variable or group member (`verify.attrs`, else the operator's `rules.domains` facet in `op_facets.py`, else
its default value). An instance is *admissible* when its source builds and the rule's constraints hold: the rule claims to apply
there. Which instances cover a rule's choices: `plan.py`.

The sample depends on the rule's content (its canonical form), never on its name or file position.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ...graph import GraphError, NodeStore, TensorGraph, TensorType
from ...graph.ops import OPS
from ...graph.types import freeze
from ..language import expr as E
from .. import op_facets
from ..language.rule import PNode, Rule
from ..matching.matcher import Match, find_matches


class NoInstance(Exception):
    """The rule cannot be instantiated (missing shapes, or no choice builds)."""


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
