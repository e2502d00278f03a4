"""Enumerate every graph of up to N operators over the input pool, in canonical form, with its fingerprint.

Canonical form (so that each graph is produced once): the nodes are in the *greedy* topological order (each node
is the smallest, by its key, of those whose arguments are available), no two nodes are equal, and the input
variables of a kind are first used in the order of their numbers. A concatenation records its parts on its axis
(sums of input dimensions); operators carry them along the axes their `rules.generate.carries` facet names, and a
split may cut a tensor only at such a boundary (TASO's split works the same way).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ...graph.ops import OPS, facet
from ...graph.types import GraphError, TensorType, normalize_axis
from .graphs import (DimSum, GNode, ShapeForm, compute_node, connected, fingerprint, graph_inputs, graph_outputs,
                     infer_node, resolve)
from ..op_facets import (GEN_ARITY, GEN_ATTRS, GEN_CARRIES, GEN_OPERANDS, GEN_PARTITION, GEN_SAME_SHAPE,
                         commutative)
from .pool import CLASS_SIZES, InputVar, dim_class


@dataclass(slots=True)
class Record:
    """One enumerated graph: its nodes, output refs, output fingerprints and the inputs it reads."""

    nodes: tuple
    outputs: tuple
    fps: tuple
    inputs: tuple

    @property
    def key(self) -> tuple:
        return tuple(sorted(self.fps))


def concrete_shape(var: InputVar) -> tuple:
    return tuple(CLASS_SIZES[d] if isinstance(d, str) else d for d in var.shape)


def random_values(shapes: dict, seed: int) -> dict:
    """Random non-zero integers for each input: up to 64 in magnitude (exact through several products), up to 4096
    for a scalar (a scalar is one draw: a small range would let it equal a constant by chance)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(shapes.items()):
        top = 4096 if len(shape) == 0 else 64
        sign = np.where(rng.random(size=shape) < 0.5, -1, 1).reshape(-1)
        if sign.size >= 2:  # both signs present, whatever the draw (else relu(x) would equal x)
            sign[0], sign[-1] = -1, 1
        vals = rng.integers(1, top + 1, size=shape) * sign.reshape(shape)
        out[name] = np.asarray(vals, dtype=np.float64)
    return out


def input_values(pool: list, seed: int) -> dict:
    """The pool's input values (the same for every graph of a run)."""
    return random_values({v.name: concrete_shape(v) for v in pool}, seed)


def _word_values(word: str, op: str, types: list) -> list:
    """Attribute values a facet names by a word, for these argument types."""
    nd = types[0].ndim
    if word == "axis":
        return list(range(nd)) if nd <= 3 else [0, 1]
    if word == "groups":
        if len(types) < 2 or types[0].ndim != 4 or types[1].ndim != 4 or types[1].shape[1] < 1:
            return []
        return [types[0].shape[1] // types[1].shape[1]]
    if word == "swap_last":
        return [tuple(range(nd - 2)) + (nd - 1, nd - 2)] if nd >= 2 else []
    if word == "swap_last_or_heads":  # and heads <-> sequence of a 4-D [B, G, L, D]
        return _word_values("swap_last", op, types) + ([(0, 2, 1, 3)] if nd == 4 else [])
    if word == "head_forms":
        return [ShapeForm(f) for f in {3: ("split_heads", "flatten"), 4: ("merge_heads", "flatten")}.get(nd, ())]
    raise ValueError(f"{op}: unknown attribute word {word!r} in its {GEN_ATTRS} facet")


def attr_variants(op: str, types: list, overrides: Optional[dict] = None) -> list:
    """Every attribute assignment the operator's facet enumerates (values in `overrides` replace the facet's),
    for these argument types."""
    spec = {**(facet(op, GEN_ATTRS) or {}), **((overrides or {}).get(op, {}))}
    keys, domains = [], []
    for k, vals in sorted(spec.items()):
        keys.append(k)
        domains.append(_word_values(vals, op, types) if isinstance(vals, str) else list(vals))
    return [tuple(zip(keys, combo)) for combo in itertools.product(*domains)]


class _State:
    """The graph built so far: nodes, and per tensor its type, value, dimension sums and concatenation parts."""

    def __init__(self, pool: list, values: dict):
        self.nodes: list = []
        self.keys: list = []
        self.type: dict = {}
        self.value: dict = {}
        self.dims: dict = {}
        self.parts: dict = {}
        self.fp: dict = {}  # ref -> fingerprint, computed when first needed
        self.shapes = {v.name: concrete_shape(v) for v in pool}
        for v in pool:
            ref = ("i", v.name)
            self.type[ref] = TensorType(self.shapes[v.name])
            self.value[ref] = values[v.name]
            self.dims[ref] = tuple(DimSum(((v.name, a),)) for a in range(len(v.shape)))
            self.parts[ref] = {}


def _carry(node: GNode, st: _State, out_type: TensorType, o: int) -> tuple:
    """(dimension sums, concatenation parts) of a node's output `o`."""
    nd = out_type.ndim
    dims: list = [None] * nd
    parts: dict = {}
    mode = facet(node.op, GEN_PARTITION)
    a0 = node.args[0]
    if mode == "join":
        ax = normalize_axis(dict(node.attrs)["axis"], nd)
        for i in range(nd):
            if i != ax:
                dims[i] = st.dims[a0][i]
                if i in st.parts[a0]:
                    parts[i] = st.parts[a0][i]
        pieces = []
        for a in node.args:
            pieces += list(st.parts[a].get(ax, (st.dims[a][ax],)))
        if all(p is not None for p in pieces):
            parts[ax] = tuple(pieces)
            dims[ax] = DimSum(sum((tuple(p) for p in pieces), ()))
        return tuple(dims), parts
    if mode == "cut":
        a = dict(node.attrs)
        ax = normalize_axis(a["axis"], nd)
        for i in range(nd):
            if i != ax:
                dims[i] = st.dims[a0][i]
        dims[ax] = a["sizes"][o]
        pieces = st.parts[a0][ax]
        cut, width = 0, 0
        while width < len(a["sizes"][0]):
            width += len(pieces[cut])
            cut += 1
        mine = pieces[:cut] if o == 0 else pieces[cut:]
        if len(mine) > 1:
            parts[ax] = tuple(mine)
        return tuple(dims), parts
    for arg, ia, oa in facet(node.op, GEN_CARRIES):
        if arg >= len(node.args):
            continue
        src = node.args[arg]
        snd = st.type[src].ndim
        try:
            ia_n, oa_n = normalize_axis(ia, snd), normalize_axis(oa, nd)
        except GraphError:
            continue
        if not (0 <= ia_n < snd and 0 <= oa_n < nd) or st.type[src].shape[ia_n] != out_type.shape[oa_n]:
            continue
        if snd != nd and (ia >= 0 or oa >= 0):
            continue
        if dims[oa_n] is None:
            dims[oa_n] = st.dims[src][ia_n]
        if oa_n not in parts and ia_n in st.parts[src]:
            parts[oa_n] = st.parts[src][ia_n]
    return tuple(dims), parts


class Enumerator:
    """Depth-first enumeration of canonical graphs of up to `max_ops` operators over `pool` (one family)."""

    def __init__(self, ops: list, pool: list, max_ops: int, seed: int = 0, attrs: Optional[dict] = None):
        self.ops = sorted(ops)
        self.attrs = attrs or {}
        self.pool = pool
        self.max_ops = max_ops
        self.values = input_values(pool, seed)
        self.kind_vars: dict = {}
        for v in pool:
            self.kind_vars.setdefault(v.kind, []).append(v.name)
        self.dim_class = {(v.name, a): dim_class(v, a) for v in pool for a in range(len(v.shape))}
        self.var_index = {v.name: (v.kind, i) for kind in self.kind_vars for i, v in
                          enumerate(x for x in pool if x.kind == kind)}
        # the input shapes are fixed during an enumeration, so attribute normal forms and shape inference depend
        # on the operator, its attributes and its argument types alone
        self.shapes = {v.name: concrete_shape(v) for v in pool}
        self._op_info = {op: (facet(op, GEN_ARITY) or OPS[op].inputs, facet(op, GEN_PARTITION), commutative(op))
                         for op in self.ops}
        self._norm_cache: dict = {}
        self._infer_cache: dict = {}
        self._appl_cache: dict = {}
        self._types_cache: dict = {}

    # ------------------------------------------------------------ candidates
    def _available(self, st: _State, used: dict) -> list:
        refs = [("n", j, o) for j, n in enumerate(st.nodes) for o in range(n.n_outputs)]
        for kind, names in self.kind_vars.items():
            k = used.get(kind, 0)
            refs += [("i", nm) for nm in names[:k + 2]]
        return refs

    def _order_ok(self, args: tuple, used: dict) -> bool:
        """New input variables appear in the order of their numbers (first use)."""
        seen = dict(used)
        for a in args:
            if a[0] == "i":
                kind, i = self.var_index[a[1]]
                k = seen.get(kind, 0)
                if i > k:
                    return False
                if i == k:
                    seen[kind] = k + 1
        return True

    def _operands_ok(self, st: _State, op: str, args: tuple, types: list) -> bool:
        if facet(op, GEN_SAME_SHAPE):
            top = max(t.ndim for t in types)
            if len({t.shape for t in types if t.ndim == top}) > 1:
                return False
        spec = facet(op, GEN_OPERANDS)
        if spec:
            for i, axes in spec.items():
                if i >= len(args):
                    continue
                dims = st.dims[args[i]]
                for ax, classes in axes.items():
                    if not -len(dims) <= ax < len(dims):  # a lower-rank operand (a row, a scalar)
                        return False
                    d = dims[ax]
                    if d is not None and not all(self.dim_class[r] in classes for r in d):
                        return False
        return True

    def candidates(self, st: _State, used: dict) -> Iterator[GNode]:
        by_type: dict = {}  # the available refs grouped by type (types in order of first appearance)
        for a in self._available(st, used):
            by_type.setdefault(st.type[a], []).append(a)
        tkey = tuple(by_type)
        for op in self.ops:
            arity, mode, swap = self._op_info[op]
            # argument types first (few), then the refs of each type: an operator of many arguments (batchnorm's
            # five) would otherwise try every tuple of refs
            for types in self._feasible_types(op, arity, mode, tkey):
                for args in itertools.product(*(by_type[t] for t in types)):
                    if swap and repr(args[0]) > repr(args[1]):  # the matcher tries both orders: enumerate one
                        continue
                    if not self._order_ok(args, used):
                        continue
                    if not self._operands_ok(st, op, args, types):
                        continue
                    if mode == "cut":
                        for ax, pieces in sorted(st.parts[args[0]].items()):
                            for cut in range(1, len(pieces)):
                                sizes = (DimSum(sum((tuple(p) for p in pieces[:cut]), ())),
                                         DimSum(sum((tuple(p) for p in pieces[cut:]), ())))
                                yield GNode(op, (("axis", ax), ("sizes", sizes)), args)
                        continue
                    yield from (GNode(op, norm, args) for norm in self._applicable(op, types))

    def _feasible_types(self, op: str, arity: int, mode: Optional[str], tkey: tuple) -> list:
        """The tuples of argument types, drawn from `tkey`, that the operator accepts with some attributes (every
        tuple for a split, whose attributes come from its argument's parts)."""
        key = (op, tkey)
        hit = self._types_cache.get(key)
        if hit is None:
            hit = [t for t in itertools.product(tkey, repeat=arity) if mode == "cut" or self._applicable(op, t)]
            self._types_cache[key] = hit
        return hit

    def _applicable(self, op: str, types: tuple) -> list:
        """The attribute normal forms with which the operator applies to arguments of these types."""
        key = (op, types)
        hit = self._appl_cache.get(key)
        if hit is None:
            hit = [norm for norm in self._normal_attrs(op, list(types)) if self._infer(op, norm, types)]
            self._appl_cache[key] = hit
        return hit

    def _infer(self, op: str, attrs: tuple, types: tuple):
        """`infer_node`'s (attributes, output types), or False where the node does not apply (cached: the input
        shapes are fixed, so this depends on the operator, its attributes and its argument types alone)."""
        key = (op, attrs, types)
        hit = self._infer_cache.get(key)
        if hit is None:
            try:
                hit = infer_node(GNode(op, attrs, ()), list(types), self.shapes)
            except (GraphError, ValueError, TypeError, IndexError, ZeroDivisionError):
                hit = False
            self._infer_cache[key] = hit
        return hit

    def _normal_attrs(self, op: str, types: list) -> list:
        """The distinct normal forms (the registry's: SAME/VALID become pads at these shapes) of the operator's
        attribute variants for these argument types."""
        key = (op, tuple(types))
        hit = self._norm_cache.get(key)
        if hit is None:
            hit, seen = [], set()
            for attrs in attr_variants(op, types, self.attrs):
                try:
                    norm = tuple(sorted(OPS[op].make_attrs(resolve(attrs, self.shapes, types), types).items()))
                except (GraphError, ValueError, TypeError, IndexError):
                    continue
                if any(isinstance(v, ShapeForm) for _k, v in attrs):  # kept as a form of the argument's shape
                    norm = attrs
                if norm not in seen:
                    seen.add(norm)
                    hit.append(norm)
            self._norm_cache[key] = hit
        return hit

    # ------------------------------------------------------------ search
    def _canonical(self, st: _State, node: GNode, key: str) -> bool:
        if key in st.keys:
            return False
        start = 1 + max((a[1] for a in node.args if a[0] == "n"), default=-1)
        return all(key > k for k in st.keys[start:])

    def _push(self, st: _State, node: GNode) -> bool:
        inferred = self._infer(node.op, node.attrs, tuple(st.type[a] for a in node.args))
        if inferred is False:
            return False
        attrs, types = inferred
        try:
            vals = compute_node(node, attrs, [st.value[a] for a in node.args], types)
        except (GraphError, ValueError, TypeError, IndexError, ZeroDivisionError):
            return False
        j = len(st.nodes)
        st.nodes.append(node)
        st.keys.append(node.key())
        for o, (t, v) in enumerate(zip(types, vals)):
            ref = ("n", j, o)
            st.type[ref], st.value[ref] = t, v
            st.dims[ref], st.parts[ref] = _carry(node, st, t, o)
        return True

    def _pop(self, st: _State) -> None:
        j = len(st.nodes) - 1
        n = st.nodes.pop()
        st.keys.pop()
        for o in range(n.n_outputs):
            ref = ("n", j, o)
            for d in (st.type, st.value, st.dims, st.parts, st.fp):
                d.pop(ref, None)

    def roots(self) -> list:
        """The possible first nodes."""
        st = _State(self.pool, self.values)
        out = []
        for node in self.candidates(st, {}):
            if self._push(st, node):
                out.append(node)
                self._pop(st)
        return out

    def units(self, depth: int) -> list:
        """The enumeration's work units, in depth-first order: `(prefix, whole)` for every canonical graph
        `prefix` of at most `depth` nodes; `whole` (a prefix of `depth` nodes, or of `max_ops`) stands for the
        prefix and every graph that extends it, otherwise the unit is the prefix's graph alone. Together the units
        give every graph once, and in `run`'s order when concatenated."""
        depth = max(1, min(depth, self.max_ops))
        st = _State(self.pool, self.values)
        out: list = []

        def walk() -> None:
            for node in self._children(st, self._used(st)):
                if len(st.nodes) + 1 == depth:
                    out.append((tuple(st.nodes) + (node,), True))
                    continue
                self._push(st, node)
                out.append((tuple(st.nodes), False))
                walk()
                self._pop(st)

        walk()
        return out

    def run_unit(self, prefix: tuple, whole: bool) -> Iterator[Record]:
        """The graphs of one unit (see `units`)."""
        st = _State(self.pool, self.values)
        for node in prefix:
            if not self._push(st, node):
                return
        if whole:
            yield from self._dfs(st, self._used(st))
        else:
            rec = self._record(st)
            if rec is not None:
                yield rec

    def run(self, root: GNode) -> Iterator[Record]:
        """Every canonical graph whose first node is `root`."""
        return self.run_unit((root,), True)

    def _used(self, st: _State) -> dict:
        used: dict = {}
        for n in st.nodes:
            for a in n.args:
                if a[0] == "i":
                    kind, i = self.var_index[a[1]]
                    used[kind] = max(used.get(kind, 0), i + 1)
        return used

    def _children(self, st: _State, used: dict) -> Iterator[GNode]:
        """The nodes that extend the graph canonically and apply (each checked by pushing it, then popped)."""
        for node in list(self.candidates(st, used)):
            if not self._canonical(st, node, node.key()):
                continue
            if not self._push(st, node):
                continue
            self._pop(st)
            yield node

    def _dfs(self, st: _State, used: dict) -> Iterator[Record]:
        rec = self._record(st)
        if rec is not None:
            yield rec
        if len(st.nodes) >= self.max_ops:
            return
        for node in list(self.candidates(st, used)):
            if not self._canonical(st, node, node.key()):
                continue
            if not self._push(st, node):
                continue
            yield from self._dfs(st, self._used(st))
            self._pop(st)

    def _record(self, st: _State) -> Optional[Record]:
        nodes = tuple(st.nodes)
        if not connected(nodes):
            return None
        outs = graph_outputs(nodes)
        fps = []
        for r in outs:
            f = st.fp.get(r)
            if f is None:
                f = st.fp[r] = fingerprint(st.value[r])
            fps.append(f)
        if len(set(fps)) != len(fps):
            return None
        return Record(nodes, tuple(outs), tuple(fps), graph_inputs(nodes))

    def input_fingerprints(self) -> dict:
        """Fingerprint -> input variable name (a graph equal to an input is an identity)."""
        return {fingerprint(self.values[v.name]): v.name for v in self.pool}
