"""Reshapes of attention heads in rule text: a generated graph's `ShapeForm` reshapes become shapes stated in terms
of the tensors a match binds, so that a rule found at the pool's sizes matches a model of any size (BERT: 12 heads
of 64 over an embedding of 768).

In a rule's source, reshape node j binds its shape to the attribute variable ``s<j>`` and a `where` constraint
fixes the form: merging heads ``s<j> == [dim(x, 0), dim(x, 1), dim(x, 2) * dim(x, 3)]``, flattening
``s<j> == [dim(x, 0), numel(x) // dim(x, 0)]``, splitting heads ``s<j> == [dim(x, 0), dim(x, 1), h, dim(x, 2) // h]``
where h, the head count, is a heads axis of an input the generalizer tied it to (``dim(q, 1)``), else the first
split's own count ``s<j>[2]`` (free: any head count). A target's reshapes are written with the same expressions
over its own arguments. A target that splits heads with no head count in its source cannot be written (its text
names an unknown variable, so the rule does not compile and is never written). A free split's variable gets the
shapes the bounded proof tries (`split_domain`): every head count of `HEAD_COUNTS` that divides the embedding, at
every size of the verification's dimension symbols.
"""
from __future__ import annotations

import itertools
from typing import Optional

from ...graph.ops import OPS
from ...graph.types import GraphError, TensorType
from .graphs import ShapeForm, resolve
from .pool import HEADS

HEAD_COUNTS = (2, 3)  # head counts the bounded proof tries for a free split
VERIFY_DEFAULT = (1, 2, 3)  # a symbol's sizes when the rule gives none (the verifier's default)
MAX_COMBINATIONS = 4096
UNKNOWN_HEADS = "head_count_not_in_source"  # a name no rule binds: the rule does not compile


def shape_form(node) -> Optional[ShapeForm]:
    """The node's reshape form, if it is a generated reshape."""
    if node.op != "reshape":
        return None
    v = dict(node.attrs).get("shape")
    return v if isinstance(v, ShapeForm) else None


def strip_heads(groups: list) -> list:
    """The groups without the head count's pseudo position (empty groups dropped)."""
    out = [[p for p in g if p[0] != HEADS] for g in groups]
    return [g for g in out if g]


class HeadText:
    """The head count and reshape shapes of one rule, as text. `ties`: input positions (heads axes) the head count
    equals, from the group holding `HEADS` (or, for a rule at the pool's classes, the G class group)."""

    def __init__(self, ties: list):
        self.count = f"dim({ties[0][0]}, {ties[0][1]})" if ties else None
        self.where: list = []
        self.free: dict = {}  # attribute variable of a free split -> source node index

    @staticmethod
    def of(groups: list, classes: dict) -> "HeadText":
        hg = next((g for g in groups if (HEADS, 0) in g), None)
        if hg is None:
            hg = next((g for g in groups if g and all(classes.get(p) == "G" for p in g)), [])
        return HeadText(sorted(p for p in hg if p[0] != HEADS))

    def _shape(self, form: ShapeForm, x: str) -> str:
        if form.form == "merge_heads":
            return f"[dim({x}, 0), dim({x}, 1), dim({x}, 2) * dim({x}, 3)]"
        if form.form == "flatten":
            return f"[dim({x}, 0), numel({x}) // dim({x}, 0)]"
        h = self.count or UNKNOWN_HEADS
        return f"[dim({x}, 0), dim({x}, 1), {h}, dim({x}, 2) // {h}]"

    def source_attr(self, j: int, node, x: str) -> Optional[str]:
        """`shape=s<j>` for a reshape (its form joins `where`), None for another node."""
        form = shape_form(node)
        if form is None:
            return None
        var = f"s{j}"
        if form.form == "split_heads" and self.count is None:
            self.count = f"{var}[2]"
            self.free[var] = j
            self.where.append(f"len({var}) == 4 and {var} == [dim({x}, 0), dim({x}, 1), {var}[2], "
                              f"dim({x}, 2) // {var}[2]]")
        else:
            self.where.append(f"{var} == {self._shape(form, x)}")
        return f"shape={var}"

    def target_attr(self, j: int, node, x: str) -> Optional[str]:
        form = shape_form(node)
        return None if form is None else f"shape={self._shape(form, x)}"


def _infer(nodes: tuple, upto: int, shapes: dict) -> Optional[dict]:
    """Types of the tensors of `nodes[:upto]` at these input shapes (None where a node does not build)."""
    env = {("i", v): TensorType(tuple(s)) for v, s in shapes.items()}
    for j, n in enumerate(nodes[:upto]):
        types = [env[a] for a in n.args]
        try:
            opdef = OPS[n.op]
            outs = opdef.infer(types, opdef.make_attrs(resolve(n.attrs, shapes, types), types))
        except (GraphError, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
            return None
        for o, t in enumerate(outs):
            env[("n", j, o)] = t
    return env


def split_domain(nodes: tuple, j: int, shapes: dict, dims: dict) -> list:
    """The shapes the bounded proof tries for free split `j` of the source `nodes`: at every size of the dimension
    symbols of `shapes` (input -> symbols; sizes from `dims`), every head count of `HEAD_COUNTS` dividing the
    embedding of the split's argument."""
    syms = sorted({d for s in shapes.values() for d in s if isinstance(d, str)})
    out: set = set()
    for k, combo in enumerate(itertools.product(*(dims.get(s, VERIFY_DEFAULT) for s in syms))):
        if k >= MAX_COMBINATIONS:
            break
        size = dict(zip(syms, combo))
        env = _infer(nodes, j, {v: tuple(size.get(d, d) for d in s) for v, s in shapes.items()})
        x = env.get(nodes[j].args[0]) if env is not None else None
        if x is None or x.ndim != 3:
            continue
        b, n, e = x.shape
        out |= {(b, n, h, e // h) for h in HEAD_COUNTS if e % h == 0}
    return [list(s) for s in sorted(out)]
