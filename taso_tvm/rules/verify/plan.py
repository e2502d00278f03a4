"""Which instances cover a rule: the plan of the bounded proof, and the off-plan sweep.

An instance is *admissible* when its source builds and the rule's constraints hold: the rule claims
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

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from ...graph.types import freeze
from ..language.rule import Rule
from .instances import Instance, NoInstance, build_instance, content_seed

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


class _Branch(Exception):
    """Enumeration: a choice not fixed by the script (carries its domain)."""

    def __init__(self, name: str, dom: list):
        super().__init__(name)
        self.name, self.dom = name, dom


class _Reject(Exception):
    """A scripted value outside the domain offered at this point, or an instance over the size bound."""


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
