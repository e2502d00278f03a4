"""Small graphs over the input pool: nodes, evaluation with the registry's shape inference and NumPy semantics,
fingerprints, and name-independent expression strings.

A graph is a tuple of `GNode` in a canonical topological order. An argument is a `Ref`: ``("i", name)`` for an
input variable or ``("n", node, output)`` for a node's output. An attribute value may be a tuple of `DimSum`
(split sizes): sums of input dimensions, or a `ShapeForm` (a reshape's target as a form of its argument's shape),
resolved at each evaluation so that the same graph evaluates at any shapes the generalizer tries.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ...graph.ops import OPS, facet
from ...graph.types import GraphError, TensorType
from ..op_facets import GEN_OUTPUTS
from .pool import CLASS_SIZES, HEADS

Ref = tuple
MAX_ELEMENTS = 4096  # a tensor larger than this is not enumerated (keeps evaluation cheap)
MAX_MAGNITUDE = 1e15


class DimSum(tuple):
    """A sum of input dimensions ``((var, axis), ...)``: an attribute value resolved at each evaluation."""

    def value(self, shapes: dict) -> int:
        return sum(shapes[v][ax] for v, ax in self)

    def text(self, rename: Callable[[str], str] = str) -> str:
        return " + ".join(f"dim({rename(v)}, {ax})" for v, ax in self)

    def __repr__(self) -> str:
        return f"DimSum{tuple(self)!r}"


@dataclass(frozen=True)
class ShapeForm:
    """A reshape's target shape as a form of its argument's shape: ``split_heads`` [B, L, E] -> [B, L, G, E / G]
    (G: the head count), ``merge_heads`` [B, X, G, D] -> [B, X, G * D], ``flatten`` [B, ...] -> [B, prod(...)]."""

    form: str

    def shape(self, shape: tuple, heads: int) -> tuple:
        if self.form == "split_heads" and len(shape) == 3 and heads > 0 and shape[2] % heads == 0:
            return (shape[0], shape[1], heads, shape[2] // heads)
        if self.form == "merge_heads" and len(shape) == 4:
            return (shape[0], shape[1], shape[2] * shape[3])
        if self.form == "flatten" and len(shape) >= 3:
            return (shape[0], int(np.prod(shape[1:])))
        raise GraphError(f"reshape form {self.form} does not apply to shape {shape} ({heads} heads)")


def heads_count(shapes: dict) -> int:
    """The head count of `split_heads` at these input shapes (the pseudo input `HEADS`, else its class size)."""
    return shapes[HEADS][0] if HEADS in shapes else CLASS_SIZES["G"]


@functools.lru_cache(maxsize=None)
def n_outputs(op: str) -> int:
    return facet(op, GEN_OUTPUTS)


@dataclass(frozen=True, slots=True)
class GNode:
    """One operator application: operator name, attributes as sorted (key, value) pairs, argument refs."""

    op: str
    attrs: tuple
    args: tuple

    @property
    def n_outputs(self) -> int:
        return n_outputs(self.op)

    def key(self) -> str:
        return repr((self.op, self.attrs, self.args))


def resolve(attrs: tuple, shapes: dict, in_types: Optional[list] = None) -> dict:
    """Attributes with their `DimSum` values replaced by sizes at the given input shapes, and their `ShapeForm`
    values by the shapes they give for the argument types `in_types`."""
    out = {}
    for k, v in attrs:
        if isinstance(v, tuple) and v and all(isinstance(x, DimSum) for x in v):
            v = tuple(x.value(shapes) for x in v)
        elif isinstance(v, ShapeForm):
            if not in_types:
                raise GraphError(f"reshape form {v.form} needs its argument's type")
            v = v.shape(tuple(in_types[0].shape), heads_count(shapes))
        out[k] = v
    return out


def infer_node(node: GNode, in_types: list, shapes: dict) -> tuple[dict, list]:
    """(normalized attributes, output types) of one node; raises GraphError (or ValueError) if it does not apply."""
    opdef = OPS[node.op]
    attrs = opdef.make_attrs(resolve(node.attrs, shapes, in_types), in_types)
    out_types = opdef.infer(in_types, attrs)
    for t in out_types:
        if any(not isinstance(d, int) or d < 1 for d in t.shape) or int(np.prod(t.shape)) > MAX_ELEMENTS:
            raise GraphError("degenerate or large output")
    return attrs, out_types


def compute_node(node: GNode, attrs: dict, in_values: list, out_types: list) -> list:
    """The output values of one node whose attributes and output types `infer_node` gave; raises GraphError if a
    value is not finite, huge or mis-shaped."""
    with np.errstate(all="ignore"):
        vals = [np.asarray(v, dtype=np.float64) for v in OPS[node.op].numpy(in_values, attrs)]
    for v, t in zip(vals, out_types):
        # one reduction: NaN fails the comparison, an infinity exceeds the bound
        if v.shape != tuple(t.shape) or (v.size and not np.abs(v).max() <= MAX_MAGNITUDE):
            raise GraphError("non-finite, huge or mis-shaped value")
    return vals


def apply_node(node: GNode, in_types: list, in_values: list, shapes: dict) -> tuple[list, list]:
    """(output types, output values) of one node; raises GraphError (or ValueError) if it does not apply."""
    attrs, out_types = infer_node(node, in_types, shapes)
    return out_types, compute_node(node, attrs, in_values, out_types)


def evaluate(nodes: tuple, shapes: dict, values: dict) -> dict:
    """Every tensor's (type, value): inputs from `values` (var -> array), nodes in order. Raises GraphError."""
    env: dict = {("i", v): (TensorType(tuple(shapes[v])), values[v]) for v in shapes}
    for j, n in enumerate(nodes):
        ts, vs = apply_node(n, [env[a][0] for a in n.args], [env[a][1] for a in n.args], shapes)
        for o, (t, v) in enumerate(zip(ts, vs)):
            env[("n", j, o)] = (t, v)
    return env


def fingerprint(value: np.ndarray) -> bytes:
    """A hash of the value's shape and entries rounded to 40 mantissa bits: integers below 2**40 (everything the
    linear and piecewise-linear operators compute from the pool's small integer inputs) are kept exactly, results of
    transcendental operators are compared to ~12 significant digits."""
    m, e = np.frexp(value)
    m = np.round(m * float(2 ** 40)).astype(np.int64)
    e = np.where(m == 0, 0, e).astype(np.int64)
    h = hashlib.blake2b(digest_size=12)
    h.update(repr(value.shape).encode())
    h.update(m.tobytes())
    h.update(e.tobytes())
    return h.digest()


def graph_outputs(nodes: tuple) -> list:
    """The refs of node outputs that no node consumes, in node order."""
    used = {a for n in nodes for a in n.args}
    return [("n", j, o) for j, n in enumerate(nodes) for o in range(n.n_outputs) if ("n", j, o) not in used]


def graph_inputs(nodes: tuple) -> tuple:
    """Input variable names the graph reads, sorted."""
    return tuple(sorted({a[1] for n in nodes for a in n.args if a[0] == "i"}))


def expr_text(nodes: tuple, ref: Ref, rename: Optional[dict] = None, memo: Optional[dict] = None) -> str:
    """A name-independent tree expression of a tensor (inputs renamed by `rename`)."""
    if ref[0] == "i":
        return (rename or {}).get(ref[1], ref[1])
    memo = {} if memo is None else memo
    key = ref[1]
    if key not in memo:
        n = nodes[key]
        attrs = ",".join(f"{k}={_attr_text(v, rename)}" for k, v in n.attrs)
        args = ",".join(expr_text(nodes, a, rename, memo) for a in n.args)
        memo[key] = f"{n.op}{{{attrs}}}({args})"
    return memo[key] + (f"#{ref[2]}" if nodes[ref[1]].n_outputs > 1 else "")


def _attr_text(v: Any, rename: Optional[dict]) -> str:
    if isinstance(v, tuple) and v and all(isinstance(x, DimSum) for x in v):
        return "[" + ";".join(x.text(lambda s: (rename or {}).get(s, s)) for x in v) + "]"
    return repr(v)


def node_texts(nodes: tuple, rename: Optional[dict] = None) -> list:
    """Expression text of every node (its first output), for common-subgraph tests."""
    memo: dict = {}
    return [expr_text(nodes, ("n", j, 0), rename, memo).split("#")[0] for j in range(len(nodes))]


def connected(nodes: tuple) -> bool:
    """Whether the nodes form one component, counting a shared input as a connection."""
    parent = list(range(len(nodes)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    seen_input: dict = {}
    for j, n in enumerate(nodes):
        for a in n.args:
            other = a[1] if a[0] == "n" else seen_input.setdefault(a[1], j)
            parent[find(j)] = find(other)
    return len({find(j) for j in range(len(nodes))}) <= 1
