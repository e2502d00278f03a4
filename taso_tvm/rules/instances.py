"""Concrete instances of a rule: small shapes and attribute values at which its source pattern builds.

An instance is the rule's source built as a TensorGraph (inputs named after the rule's input variables; variables
that the rule requires to be weights are weight nodes), the match of the rule on it, and the choices made. The verifier
evaluates both sides of the rule on instances symbolically (Z3); the tests evaluate them with NumPy.

Dimension symbols range over `verify.dims` (default 1, 2, 3); attribute variables over `verify.attrs` or a default
domain per operator attribute (`default_domain`). Instances are drawn at random (seeded by the rule name) until every
value of every symbol and attribute variable has appeared in some valid instance, or the budget is spent.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..graph import GraphError, NodeStore, TensorGraph, TensorType
from ..graph.ops import OPS
from ..graph.types import freeze
from . import expr as E
from .language import Rule
from .matcher import Match, find_matches

DEFAULT_DIMS = (1, 2, 3)
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")


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


def default_domain(op: str, key: str, in_types: list, n_outputs: int = 1) -> list:
    """Values an attribute variable ranges over during verification, given the node's input types."""
    nd = in_types[0].ndim if in_types else 0
    if key == "activation":
        return list(ACTIVATIONS)
    if op == "conv2d":
        if key == "strides":
            return [(1, 1), (2, 2)]
        if key == "padding":
            return [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)]
        if key == "dilation":
            return [(1, 1), (2, 2)]
        if key == "groups":
            c = in_types[0].shape[1]
            o = in_types[1].shape[0] if len(in_types) > 1 else c
            return [g for g in (1, 2, 3) if c % g == 0 and o % g == 0]
    if op in ("maxpool2d", "avgpool2d"):
        return {"kernel": [(1, 1), (2, 2), (3, 3)], "strides": [(1, 1), (2, 2)],
                "padding": [(0, 0, 0, 0), (1, 1, 1, 1)], "dilation": [(1, 1)], "ceil_mode": [False, True],
                "count_include_pad": [False, True]}.get(key, [])
    if key == "axis":
        return list(range(nd))
    if key == "perm":
        return [tuple(p) for p in itertools.permutations(range(nd))]
    if key == "shape":
        return _factor_shapes(math.prod(in_types[0].shape))
    if key == "epsilon":
        return [1e-5, 1e-3]
    if key == "momentum":
        return [0.1, 0.9]
    if op == "mean":
        if key == "axes":
            return [tuple(c) for r in range(1, nd + 1) for c in itertools.combinations(range(nd), r)]
        if key == "keepdims":
            return [False, True]
    if op == "layernorm" and key == "axes":
        return [(nd - 1,), tuple(range(max(0, nd - 2), nd))]
    if op == "enlarge" and key == "kernel":
        return [(3, 3), (5, 5)]
    if op == "split" and key == "sizes":
        return []  # depends on the axis; give it as an expression or in verify.attrs
    if op == "merge_gconv":
        return [1, 2, 4]
    return []


def _default_value(op: str, key: str) -> list:
    """Fallback domain: the attribute's default value, when it has one."""
    d = OPS[op].attrs.get(key)
    return [] if d is None else [d]


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


def _rng_for(rule: Rule, seed: int) -> random.Random:
    h = int(hashlib.sha256(f"{rule.name}:{seed}".encode()).hexdigest()[:12], 16)
    return random.Random(h)


def build_instance(rule: Rule, shapes: dict, choose: Callable[[str, list], Any],
                   values: Optional[dict] = None) -> Instance:
    """Build the rule's source at the given shapes; `choose(name, domain)` picks unbound attribute values.

    Raises NoInstance when the choices do not build or the rule's constraints reject them.
    """
    wv = weight_vars(rule)
    defs = defining_equations(rule)
    store = NodeStore()
    tensors: dict = {}
    for v in rule.inputs:
        ty = TensorType(tuple(shapes[v]), "float32")
        if v in wv:
            arr = values[v] if values is not None and v in values else np.zeros(ty.shape)
            tensors[v] = store.weight(arr, ty, key=f"var:{v}")
        else:
            tensors[v] = store.input(v, ty)
    choices: dict = {}
    groups: dict = {}
    built: dict = {}
    env = _BuildEnv(store, tensors, choices, groups)
    for p in rule.source:
        refs = [tensors[a.name] if a.kind == "var" else built[a.node][a.out] for a in p.args]
        in_types = [store.type(r) for r in refs]
        attrs: dict = {}
        try:
            for k, spec in p.attrs.items():
                if spec.kind == "const":
                    attrs[k] = spec.value
                elif spec.kind == "var":
                    if spec.value not in choices and spec.value in defs:
                        try:
                            choices[spec.value] = freeze(E.evaluate(defs[spec.value], env))
                        except E.ExprError:
                            pass
                    if spec.value not in choices:
                        dom = rule.verify.attrs.get(spec.value) or default_domain(p.op, k, in_types, p.n_outputs) \
                            or _default_value(p.op, k)
                        if not dom:
                            raise NoInstance(f"no domain for attribute variable '{spec.value}' ({p.op}.{k}); "
                                             "give verify.attrs")
                        choices[spec.value] = choose(spec.value, list(dom))
                    attrs[k] = choices[spec.value]
            for k, spec in p.attrs.items():  # expressions after the variables they may read
                if spec.kind == "expr":
                    attrs[k] = freeze(E.evaluate(spec.value, env))
            if p.splat is not None:
                if p.splat in groups:
                    for k, v in groups[p.splat].items():
                        attrs.setdefault(k, v)
                else:
                    g = {}
                    for k in OPS[p.op].attrs:
                        if k in p.attrs:
                            continue
                        name = f"{p.splat}.{k}"
                        dom = rule.verify.attrs.get(name) or default_domain(p.op, k, in_types, p.n_outputs) \
                            or _default_value(p.op, k)
                        if not dom:
                            raise NoInstance(f"no domain for {name}; give verify.attrs")
                        g[k] = choices[name] = choose(name, list(dom))
                    groups[p.splat] = g
                    attrs.update(g)
            outs = store.add(p.op, refs, **attrs)
        except (GraphError, E.ExprError) as err:
            raise NoInstance(str(err)) from None
        if len(outs) != p.n_outputs:
            raise NoInstance(f"{p.op} gave {len(outs)} outputs, the pattern names {p.n_outputs}")
        built[p.index] = outs
        for k, n in enumerate(p.names):
            if n is not None:
                tensors[n] = outs[k]
    graph = TensorGraph(store, [tensors[o] for o in rule.outputs])
    want = {p.index: built[p.index][0][0] for p in rule.source}
    for m in find_matches(rule, graph, dedupe=False):
        if m.nodes == want and all(m.tensors[v] == tensors[v] for v in rule.inputs):
            return Instance(rule, {v: tuple(shapes[v]) for v in rule.inputs}, choices, graph, m, wv)
    raise NoInstance("the rule's constraints reject this instance")


def iter_instances(rule: Rule, max_instances: Optional[int] = None, seed: int = 0, attempts: int = 400,
                   values_fn: Optional[Callable[[dict], dict]] = None) -> Iterator[Instance]:
    """Valid instances of the rule, covering every value of every symbol and attribute variable when possible."""
    spec = rule.verify
    limit = max_instances or spec.instances
    alts = spec.shapes or [{}]
    for alt in alts:
        missing = [v for v in rule.inputs if v not in alt]
        if missing:
            raise NoInstance(f"verify.shapes gives no shape for input(s) {', '.join(missing)}")
    rng = _rng_for(rule, seed)
    known: set = set()
    covered: set = set()
    seen: set = set()
    count = 0
    for i, alt in enumerate(alts):
        known.add(("#shapes", i))
        for sym in sorted({d for s in alt.values() for d in s if isinstance(d, str)}):
            for v in spec.dims.get(sym, DEFAULT_DIMS):
                known.add((sym, v))

    def pick(name: str, dom: list) -> Any:
        for v in dom:
            known.add((name, freeze(v)))
        unc = [v for v in dom if (name, freeze(v)) not in covered]
        if unc and rng.random() < 0.75:
            return rng.choice(unc)
        return rng.choice(dom)

    for _ in range(attempts):
        a_idx = pick("#shapes", list(range(len(alts))))
        alt = alts[a_idx]
        symbols = sorted({d for s in alt.values() for d in s if isinstance(d, str)})
        dims = {s: pick(s, list(spec.dims.get(s, DEFAULT_DIMS))) for s in symbols}
        shapes = {v: tuple(dims[d] if isinstance(d, str) else d for d in alt[v]) for v in rule.inputs}
        if sum(math.prod(s) for s in shapes.values()) > spec.elements:
            continue
        record: dict = {}

        def choose(name: str, dom: list) -> Any:
            v = pick(name, dom)
            record[name] = freeze(v)
            return v

        try:
            inst = build_instance(rule, shapes, choose, values_fn(shapes) if values_fn else None)
        except NoInstance:
            continue
        key = (a_idx, tuple(sorted(dims.items())), tuple(sorted(record.items(), key=lambda kv: kv[0])))
        if key in seen:
            continue
        seen.add(key)
        inst.choices.update(dims)
        covered.add(("#shapes", a_idx))
        covered.update((k, freeze(v)) for k, v in dims.items())
        covered.update(record.items())
        count += 1
        yield inst
        if count >= limit or (count >= min(limit, 4) and known <= covered):
            return
    if count == 0:
        raise NoInstance(f"no valid instance in {attempts} attempts (check verify.shapes / verify.dims)")


def positive_vars(rule: Rule) -> set:
    """Input variables read as a variance (batch norm) or under sqrt: they get positive values in NumPy checks."""
    out = {p.args[4].name for p in rule.source if p.op == "batchnorm" and p.args[4].kind == "var"}
    out |= {a.name for p in rule.source if p.op == "sqrt" for a in p.args if a.kind == "var"}
    return out


def numpy_check(inst: Instance, rng: Optional[np.random.Generator] = None, rtol: float = 1e-6,
                atol: float = 1e-9) -> tuple:
    """Evaluate both sides of the rule at the instance with NumPy. Returns (ok, detail, feeds)."""
    from .matcher import build_target

    rng = rng or np.random.default_rng(0)
    g = inst.graph
    feeds = {}
    pos = positive_vars(inst.rule)
    for v in inst.rule.inputs:
        feeds[v] = rng.uniform(0.25, 2.0, inst.shapes[v])
        if v not in pos:
            feeds[v] *= rng.choice([-1.0, 1.0], inst.shapes[v])
    # weight variables hold their values in the store: give them these values
    store = g.store
    for v in inst.weight_vars:
        node = store.nodes[inst.match.tensors[v][0]]
        node.value = feeds[v]
    mapping = build_target(inst.rule, g, inst.match)
    tgt = g.replace(mapping)
    src_vals = g.evaluate(feeds)
    tgt_vals = tgt.evaluate(feeds)
    for i, (a, b) in enumerate(zip(src_vals, tgt_vals)):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return False, f"output {inst.rule.outputs[i]}: shape {a.shape} vs {b.shape}", feeds
        if np.isnan(a).any() or np.isnan(b).any():
            continue
        finite = np.abs(a[np.isfinite(a)])
        scale = max(1.0, float(finite.max(initial=0.0)))
        if not np.allclose(a, b, rtol=rtol, atol=atol * scale):
            k = int(np.argmax(np.abs(a - b)))
            return False, (f"output {inst.rule.outputs[i]}{[int(j) for j in np.unravel_index(k, a.shape)]}: source "
                           f"{a.flat[k]:.6g} vs target {b.flat[k]:.6g}"), feeds
    return True, "", feeds
