"""Generalize a candidate found at the pool's shapes: split variables used twice where the rule still holds, give
every input dimension its own symbol where the rule still holds, and keep the equalities it needs.

The input dimensions start in the pool's classes (all 2-D dimensions are one class S, ...). Within a class, the
dimensions that must stay equal are found by trying them at other sizes: the smallest set containing a dimension
that can take a new size, with both sides still building, with equal output shapes and with equal values on fresh
random inputs, is that dimension's group. A candidate that splits heads has one more position, the head count
(`pool.HEADS`, class G): grouped with the heads axes it must equal, or alone when it is free. The result is only a
proposal: the verifier proves or refutes the rule.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ...graph.types import GraphError
from .enumerate import random_values
from .graphs import DimSum, GNode, ShapeForm, evaluate
from .pairs import Candidate
from .pool import CLASS_SIZES, HEADS, InputVar, dim_class

MAX_CLASS_POSITIONS = 12  # a larger class keeps its dimensions together
MAX_GROUP = 4  # a dimension's group is sought among sets of at most this many (else the rest stay together)


def holds(c: Candidate, shapes: dict, seed: int = 1) -> bool:
    """Whether both sides build at these input shapes and give equal outputs on random integer inputs."""
    values = random_values(shapes, seed)
    try:
        src = evaluate(c.src, shapes, values)
        dst = evaluate(c.dst, shapes, values) if c.dst else \
            {("i", v): (None, values[v]) for v in shapes}
    except (GraphError, ValueError, TypeError, IndexError, ZeroDivisionError, KeyError):
        return False
    for s, d in zip(c.src_outputs, c.dst_outputs):
        a, b = src[s][1], dst[d][1]
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=0):
            return False
    return True


def builds(c: Candidate, shapes: dict) -> bool:
    """Whether the source builds at these input shapes."""
    try:
        evaluate(c.src, shapes, random_values(shapes, 1))
        return True
    except (GraphError, ValueError, TypeError, IndexError, ZeroDivisionError, KeyError):
        return False


def splits_heads(c: Candidate) -> bool:
    """Whether a side of the candidate splits heads (its head count is then a position of its own)."""
    return any(n.op == "reshape" and ShapeForm("split_heads") in dict(n.attrs).values() for n in c.src + c.dst)


def _trial_size(k: str, base: int, fresh: int, size: dict, cls: dict) -> int:
    """A new size for a group of class `k`: a head count one that divides the embeddings as they are now, any other
    class the next size not used yet. (An embedding that a split reads then no longer divides into the pool's head
    count: the embeddings a rule splits stay one group, as the target may split them all by the source's count.)"""
    if k == "G":
        embeddings = [size[p] for p in size if cls[p] == "E"]
        fits = [d for d in (5, 8, 10, 2) if d != base and all(e % d == 0 for e in embeddings)]
        if fits:
            return fits[min(fresh, len(fits) - 1)]
    return base + 2 + fresh


def _positions(c: Candidate, pool: dict) -> tuple:
    """(rank per input, the input dimensions, their classes, their pool sizes); a candidate that splits heads has
    the head count as one more position (the pseudo input `HEADS`, class G)."""
    pseudo = [HEADS] if splits_heads(c) else []
    rank = {v: len(pool[v].shape) for v in c.inputs}
    rank.update({v: 1 for v in pseudo})
    positions = [(v, a) for v in list(c.inputs) + pseudo for a in range(rank[v])]
    cls = {p: "G" if p[0] == HEADS else dim_class(pool[p[0]], p[1]) for p in positions}
    base = {p: CLASS_SIZES.get(cls[p], int(cls[p]) if cls[p].isdigit() else 1) for p in positions}
    return rank, positions, cls, base


def _shapes(rank: dict, size: dict) -> dict:
    return {v: tuple(size[(v, a)] for a in range(rank[v])) for v in rank}


def _partition(c: Candidate, pool: dict, ok) -> list:
    """The finest grouping of input dimensions (within the pool's classes) under which `ok(shapes)` still holds
    when a group takes a size of its own."""
    rank, positions, cls, base = _positions(c, pool)
    size = dict(base)
    groups: list = []
    fresh = 0

    def shapes_of(sz: dict) -> dict:
        return _shapes(rank, sz)

    for k in sorted(set(cls.values())):
        remaining = [p for p in positions if cls[p] == k]
        while remaining:
            p0 = remaining[0]
            rest = remaining[1:]
            found: Optional[list] = None
            if len(remaining) <= MAX_CLASS_POSITIONS:
                new = _trial_size(k, base[p0], fresh, size, cls)
                for r in range(0, min(len(rest), MAX_GROUP)):
                    for extra in itertools.combinations(rest, r):
                        trial = dict(size)
                        for p in (p0,) + extra:
                            trial[p] = new
                        if ok(shapes_of(trial)):
                            found = [p0, *extra]
                            break
                    if found is not None:
                        break
            if found is None:
                found = remaining
            else:
                fresh += 1
                for p in found:
                    size[p] = new
            groups.append(found)
            remaining = [p for p in remaining if p not in found]
    return groups


def generalize(c: Candidate, pool: dict) -> list:
    """Groups of input dimensions that must be equal for the rule to hold: a list of lists of (var, axis), in a
    deterministic order. `pool` maps input names to `InputVar`."""
    return _partition(c, pool, lambda shapes: holds(c, shapes))


def source_groups(c: Candidate, pool: dict) -> list:
    """Groups of input dimensions that must be equal for the source to build (a match guarantees these).

    A group found by moving its dimensions together may only be tied by a sum (concat(concat(a, b, 1),
    concat(c, d, 1), 0) builds when a1 + b1 == c1 + d1, not only when a1 == c1): such a group is split (`_tied`),
    so that the rule states the equality its target needs."""
    groups = _partition(c, pool, lambda shapes: builds(c, shapes))
    return [h for g in groups for h in ([g] if _tied(c, pool, g) else [[p] for p in g])]


def _tied(c: Candidate, pool: dict, group: list) -> bool:
    """False when the source still builds with one of the group's dimensions one larger (or smaller) than the rest
    of the group, another dimension of its class moved the other way."""
    if len(group) < 2:
        return True
    rank, positions, cls, base = _positions(c, pool)
    for p in group:
        for r in positions:
            if r in group or cls[r] != cls[p]:
                continue
            for d in (1, -1):
                size = dict(base)
                size[p], size[r] = base[p] + d, base[r] - d
                if min(size[p], size[r]) < 1:
                    continue
                if builds(c, _shapes(rank, size)):
                    return False
    return True


def _rebuild(nodes: tuple, outputs: tuple, share: bool) -> tuple:
    """(nodes, outputs) rebuilt from the outputs' expression trees: `share=False` gives every use of a single-output
    node its own copy (so each variable occurrence can be renamed alone); `share=True` merges equal nodes again."""
    new: list = []
    index: dict = {}

    multi: dict = {}

    def build(ref):
        if ref[0] == "i":
            return ref
        n = nodes[ref[1]]
        if not share and n.n_outputs > 1 and ref[1] in multi:  # one copy of a multi-output node
            return ("n", multi[ref[1]], ref[2])
        args = tuple(build(a) for a in n.args)
        node = GNode(n.op, n.attrs, args)
        if not share and n.n_outputs > 1:
            new.append(node)
            multi[ref[1]] = len(new) - 1
            return ("n", len(new) - 1, ref[2])
        key = node
        if share:
            if key not in index:
                index[key] = len(new)
                new.append(node)
            return ("n", index[key], ref[2])
        new.append(node)
        return ("n", len(new) - 1, 0)

    outs = tuple(build(r) for r in outputs)
    return tuple(new), outs


def _occurrences(nodes: tuple, var: str) -> list:
    return [(j, k) for j, n in enumerate(nodes) for k, a in enumerate(n.args) if a == ("i", var)]


def _rename_at(nodes: tuple, where: set, new: str) -> tuple:
    out = []
    for j, n in enumerate(nodes):
        args = tuple(("i", new) if (j, k) in where else a for k, a in enumerate(n.args))
        out.append(GNode(n.op, n.attrs, args) if args != n.args else n)
    return tuple(out)


def _subsets(items: list) -> list:
    return [set(c) for r in range(0, len(items) + 1) for c in itertools.combinations(items, r)]


def _fresh(c: Candidate, pool: dict, var: InputVar) -> InputVar:
    prefix = var.name.rstrip("0123456789")
    taken = {int(v[len(prefix):]) for v in c.inputs if v.startswith(prefix) and v[len(prefix):].isdigit()}
    n = min(i for i in range(1, len(taken) + 2) if i not in taken)
    return InputVar(f"{prefix}{n}", var.kind, var.shape)


def split_variables(c: Candidate, pool: dict) -> Candidate:
    """The most general form of a candidate that uses an input more than once: occurrences of a variable are given
    a fresh variable of its kind while the two sides stay equal (concat(relu(x), relu(x)) = relu(concat(x, x))
    becomes concat(relu(a), relu(b)) = relu(concat(a, b))). `pool` gains the fresh variables it names."""
    src, souts = _rebuild(c.src, c.src_outputs, share=False)
    dst, douts = _rebuild(c.dst, c.dst_outputs, share=False) if c.dst else ((), c.dst_outputs)
    cur = Candidate(src, souts, dst, douts, c.inputs, c.fingerprint)
    changed = True
    while changed:
        changed = False
        in_attrs = {v for nodes in (cur.src, cur.dst) for n in nodes for _k, val in n.attrs
                    if isinstance(val, tuple) for x in val if isinstance(x, DimSum) for v, _a in x}
        for v in cur.inputs:
            if v in in_attrs:  # a split's sizes name it: renaming one occurrence would leave them behind
                continue
            so, do = _occurrences(cur.src, v), _occurrences(cur.dst, v)
            alias = [("out", i) for i, r in enumerate(cur.dst_outputs) if r == ("i", v)]
            if len(so) < 2 or len(so) > 4 or len(do) + len(alias) > 4:
                continue
            new = _fresh(cur, pool, pool[v])
            inputs = tuple(sorted(set(cur.inputs) | {new.name}))
            shapes = {x: tuple(CLASS_SIZES.get(d, 1) if isinstance(d, str) else d
                               for d in (new if x == new.name else pool[x]).shape) for x in inputs}
            for s_sub in _subsets(so[1:]):  # the first occurrence keeps the old name
                if not s_sub:
                    continue
                for d_sub in _subsets(do + alias):
                    trial = Candidate(
                        _rename_at(cur.src, s_sub, new.name), cur.src_outputs,
                        _rename_at(cur.dst, {x for x in d_sub if x[0] != "out"}, new.name),
                        tuple(("i", new.name) if ("out", i) in d_sub else r for i, r in enumerate(cur.dst_outputs)),
                        inputs, cur.fingerprint)
                    if holds(trial, shapes) and holds(trial, shapes, seed=2):
                        pool.setdefault(new.name, new)
                        cur = trial
                        changed = True
                        break
                if changed:
                    break
            if changed:
                break
    if cur.inputs == c.inputs:
        return c
    src, souts = _rebuild(cur.src, cur.src_outputs, share=True)
    dst, douts = _rebuild(cur.dst, cur.dst_outputs, share=True) if cur.dst else ((), cur.dst_outputs)
    return Candidate(src, souts, dst, douts, cur.inputs, cur.fingerprint)
