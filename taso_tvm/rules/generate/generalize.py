"""Generalize a candidate found at the pool's shapes: give every input dimension its own symbol where the rule
still holds, and keep the equalities it needs.

The input dimensions start in the pool's classes (all 2-D dimensions are one class S, ...). Within a class, the
dimensions that must stay equal are found by trying them at other sizes: the smallest set containing a dimension
that can take a new size, with both sides still building, with equal output shapes and with equal values on fresh
random inputs, is that dimension's group. The result is only a proposal: the verifier proves or refutes the rule.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ...graph.types import GraphError
from .graphs import evaluate
from .pairs import Candidate
from .pool import CLASS_SIZES, InputVar, dim_class

MAX_CLASS_POSITIONS = 10  # a larger class keeps its dimensions together (2**9 trials per dimension)


def holds(c: Candidate, shapes: dict, seed: int = 1) -> bool:
    """Whether both sides build at these input shapes and give equal outputs on random integer inputs."""
    rng = np.random.default_rng(seed)
    values = {v: (rng.integers(1, 5, size=s) * rng.choice([-1, 1], size=s)).astype(np.float64)
              for v, s in shapes.items()}
    try:
        src = evaluate(c.src, shapes, values)
        dst = evaluate(c.dst, shapes, values) if c.dst else \
            {("i", v): (None, values[v]) for v in shapes}
    except (GraphError, ValueError, TypeError, IndexError, ZeroDivisionError, KeyError):
        return False
    for s, d in zip(c.src_outputs, c.dst_outputs):
        a, b = src[s][1], dst[d][1]
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=1e-9):
            return False
    return True


def generalize(c: Candidate, pool: dict) -> list:
    """Groups of input dimensions that must be equal: a list of lists of (var, axis), in a deterministic order.

    `pool` maps input names to `InputVar`."""
    positions = [(v, a) for v in c.inputs for a in range(len(pool[v].shape))]
    cls = {p: dim_class(pool[p[0]], p[1]) for p in positions}
    base = {p: CLASS_SIZES.get(cls[p], int(cls[p]) if cls[p].isdigit() else 1) for p in positions}
    size = dict(base)
    groups: list = []
    fresh = 0

    def shapes_of(sz: dict) -> dict:
        return {v: tuple(sz[(v, a)] for a in range(len(pool[v].shape))) for v in c.inputs}

    for k in sorted(set(cls.values())):
        remaining = [p for p in positions if cls[p] == k]
        while remaining:
            p0 = remaining[0]
            rest = remaining[1:]
            found: Optional[list] = None
            if len(remaining) <= MAX_CLASS_POSITIONS:
                new = base[p0] + 2 + fresh
                for r in range(0, len(rest)):
                    for extra in itertools.combinations(rest, r):
                        trial = dict(size)
                        for p in (p0,) + extra:
                            trial[p] = new
                        if holds(c, shapes_of(trial)):
                            found = [p0, *extra]
                            break
                    if found is not None:
                        break
            if found is None:
                found = remaining
            else:
                fresh += 1
                for p in found:
                    size[p] = base[p0] + 1 + fresh
            groups.append(found)
            remaining = [p for p in remaining if p not in found]
    return groups
