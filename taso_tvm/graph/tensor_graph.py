"""TensorGraph: an immutable DAG of hash-consed operator nodes, cheap to copy-on-write.

Nodes live in a `NodeStore` shared by a graph and every graph derived from it. A node is identified by its content
(operator, attributes, input tensors), interned with full equality, so the same computation is always the same node
id: two graphs with the same nodes and outputs are equal whatever order they were built in, and a graph's structural
hash is the hash of its node-id set. A graph is just its outputs; its nodes are what the outputs reach.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from .ops import get_op
from .ops.base import OpDef
from .types import GraphError, TensorType, freeze

TensorRef = tuple  # (node id, output index)
SOURCE_OPS = frozenset({"input", "weight"})


class CycleError(GraphError):
    """A rewrite would make a tensor depend on itself."""


class Node:
    """One operator application. Immutable by convention; `value` holds a weight's data or an opaque expression."""

    __slots__ = ("id", "op", "attrs", "inputs", "types", "value")

    def __init__(self, id: int, op: str, attrs: dict, inputs: tuple, types: tuple, value: Any = None):
        self.id, self.op, self.attrs, self.inputs, self.types, self.value = id, op, attrs, inputs, types, value

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def outputs(self) -> list[TensorRef]:
        return [(self.id, i) for i in range(len(self.types))]

    def __repr__(self) -> str:
        a = ", ".join(f"{k}={v}" for k, v in self.attrs.items() if self.op not in ("weight", "opaque"))
        ins = ", ".join(f"%{i}.{j}" if j else f"%{i}" for i, j in self.inputs)
        return f"%{self.id} = {self.op}({ins}{', ' if a and ins else ''}{a}) -> {', '.join(map(str, self.types))}"


class NodeStore:
    """Interning table for nodes. Every graph derived from one lift or builder shares one store."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._intern: dict[tuple, int] = {}
        self._attr_items: dict[int, tuple] = {}  # id(attrs of a stored node) -> its sorted items
        self._serial = 0

    def type(self, ref: TensorRef) -> TensorType:
        return self.nodes[ref[0]].types[ref[1]]

    def _new(self, key: tuple, op: str, attrs: dict, inputs: tuple, types: tuple, value: Any = None) -> Node:
        nid = self._intern.get(key)
        if nid is not None:
            return self.nodes[nid]
        node = Node(len(self.nodes), op, attrs, inputs, types, value)
        self.nodes.append(node)
        self._intern[key] = node.id
        return node

    def fresh_key(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}{self._serial}"

    def input(self, name: str, ty: TensorType) -> TensorRef:
        key = ("input", name)
        if key in self._intern:
            node = self.nodes[self._intern[key]]
            if node.types[0] != ty:
                raise GraphError(f"input '{name}' declared twice with types {node.types[0]} and {ty}")
        return self._new(key, "input", {"name": name}, (), (ty,)).outputs[0]

    def weight(self, value: Any, ty: Optional[TensorType] = None, key: Optional[str] = None) -> TensorRef:
        """A constant tensor. `value` is a NumPy array or a Relax constant (kept as-is for lowering)."""
        if ty is None:
            arr = np.asarray(value)
            ty = TensorType(tuple(int(d) for d in arr.shape), str(arr.dtype))
        key = key or self.fresh_key("w")
        return self._new(("weight", key), "weight", {"key": key}, (), (ty,), value).outputs[0]

    def opaque(self, expr: Any, inputs: Sequence[TensorRef], types: Sequence[TensorType], key: str) -> Node:
        return self._new(("opaque", key), "opaque", {"key": key}, tuple(inputs), tuple(types), expr)

    def add(self, op: str, inputs: Sequence[TensorRef], **attrs: Any) -> list[TensorRef]:
        """Apply a registry operator; returns its output tensors. Raises GraphError if the inputs do not fit."""
        return self.make(op, inputs, attrs).outputs

    def make(self, op: str, inputs: Sequence[TensorRef], attrs: Mapping[str, Any]) -> Node:
        opdef = get_op(op)
        if op in SOURCE_OPS or op == "opaque":
            raise GraphError(f"use NodeStore.{op}() to create {op} nodes")
        inputs = tuple((int(i), int(j)) for i, j in inputs)
        opdef.check_arity(len(inputs))
        in_types = [self.type(r) for r in inputs]
        full = opdef.make_attrs(dict(attrs), in_types)
        key = (op, tuple(sorted(full.items())), inputs)
        nid = self._intern.get(key)
        if nid is not None:
            return self.nodes[nid]
        types = tuple(opdef.infer(in_types, full))
        return self._new(key, op, full, inputs, types)

    def attr_items(self, node: Node) -> tuple:
        """The node's attributes as sorted (name, value) pairs, computed once per attributes dict (remade
        nodes share their original's)."""
        items = self._attr_items.get(id(node.attrs))
        if items is None:
            items = self._attr_items[id(node.attrs)] = tuple(sorted(node.attrs.items()))
        return items

    def remake(self, node: Node, inputs: tuple) -> Node:
        """`node` with other inputs of the same types (attributes are already canonical)."""
        if node.op == "opaque":
            return self._new(("opaque", node.attrs["key"], inputs), "opaque", node.attrs, inputs, node.types,
                             node.value)
        key = (node.op, self.attr_items(node), inputs)
        nid = self._intern.get(key)
        if nid is not None:
            return self.nodes[nid]
        in_types = [self.type(r) for r in inputs]
        same = all(t == self.type(r) for t, r in zip(in_types, node.inputs))
        types = node.types if same else tuple(node.opdef.infer(in_types, node.attrs))
        return self._new(key, node.op, node.attrs, inputs, types)


class TensorGraph:
    """An immutable graph: a node store and the output tensors. Derived data is computed once, lazily."""

    __slots__ = ("store", "outputs", "_order", "_consumers", "_ids", "_hash", "_weight_only")

    def __init__(self, store: NodeStore, outputs: Iterable[TensorRef]):
        self.store = store
        self.outputs: tuple = tuple((int(i), int(j)) for i, j in outputs)
        self._order: Optional[list[Node]] = None
        self._consumers: Optional[dict] = None
        self._ids: Optional[frozenset] = None
        self._hash: Optional[int] = None
        self._weight_only: Optional[frozenset] = None

    # ---------------------------------------------------------------- structure
    def node(self, nid: int) -> Node:
        return self.store.nodes[nid]

    def type(self, ref: TensorRef) -> TensorType:
        return self.store.type(ref)

    def topo_order(self) -> list[Node]:
        """Nodes reachable from the outputs in creation order, which is topological: a node is always
        created after its inputs. A lifted, unchanged graph so comes back in its original binding order."""
        if self._order is None and self._ids is not None:  # a rewrite's result knows its node set
            nodes = self.store.nodes
            self._order = [nodes[i] for i in sorted(self._ids)]
        if self._order is None:
            nodes = self.store.nodes
            seen: set[int] = set()
            stack = [i for i, _ in self.outputs]
            while stack:
                nid = stack.pop()
                if nid not in seen:
                    seen.add(nid)
                    stack.extend(i for i, _ in nodes[nid].inputs)
            self._ids = frozenset(seen)
            self._order = [nodes[i] for i in sorted(seen)]
        return self._order

    @property
    def node_ids(self) -> frozenset:
        if self._ids is None:
            self._ids = frozenset(n.id for n in self.topo_order())
        return self._ids

    def consumers(self) -> dict[TensorRef, list[tuple[int, int]]]:
        """tensor -> [(consumer node id, input position)]; graph outputs appear as (-1, output position)."""
        if self._consumers is None:
            cons: dict[TensorRef, list[tuple[int, int]]] = {}
            for n in self.topo_order():
                for pos, ref in enumerate(n.inputs):
                    cons.setdefault(ref, []).append((n.id, pos))
            for pos, ref in enumerate(self.outputs):
                cons.setdefault(ref, []).append((-1, pos))
            self._consumers = cons
        return self._consumers

    def inputs(self) -> list[Node]:
        return [n for n in self.topo_order() if n.op == "input"]

    def ops(self) -> list[Node]:
        """Computation nodes (not inputs or weights)."""
        return [n for n in self.topo_order() if n.op not in SOURCE_OPS]

    @property
    def num_ops(self) -> int:
        return len(self.ops())

    def weight_only_ids(self) -> frozenset:
        """Ids of the computation nodes whose inputs are all weights (folded to constants when lowered)."""
        if self._weight_only is not None:  # computed once: the search asks for every candidate
            return self._weight_only
        wo: set[int] = set()
        for n in self.topo_order():
            if from_weights(n, wo.__contains__):
                wo.add(n.id)
        self._weight_only = frozenset(i for i in wo if self.store.nodes[i].op != "weight")
        return self._weight_only

    @property
    def num_runtime_ops(self) -> int:
        """Operators that run on activations: computation nodes that are not weight-only."""
        return self.num_ops - len(self.weight_only_ids())

    def structural_hash(self) -> int:
        if self._hash is None:
            self._hash = hash((self.node_ids, self.outputs))
        return self._hash

    __hash__ = structural_hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TensorGraph) and other.store is self.store and self.outputs == other.outputs
                and self.node_ids == other.node_ids)

    def __repr__(self) -> str:
        lines = [repr(n) for n in self.topo_order()]
        lines.append("return " + ", ".join(f"%{i}.{j}" if j else f"%{i}" for i, j in self.outputs))
        return "\n".join(lines)

    def is_weight_only(self, ref: TensorRef, _memo: Optional[dict] = None) -> bool:
        """True if the tensor is computed from weights alone (no graph input, no opaque node)."""
        memo = {} if _memo is None else _memo
        stack = [ref[0]]
        order = []
        while stack:
            nid = stack.pop()
            if nid in memo:
                continue
            node = self.store.nodes[nid]
            pending = [i for i, _ in node.inputs if i not in memo]
            if pending:
                if nid in order:
                    raise CycleError("cycle")
                order.append(nid)
                stack.append(nid)
                stack.extend(pending)
                continue
            memo[nid] = from_weights(node, memo.__getitem__)
        return memo[ref[0]]

    # ---------------------------------------------------------------- edits
    def replace(self, mapping: Mapping[TensorRef, TensorRef]) -> "TensorGraph":
        """A new graph where every use of each key tensor reads the mapped tensor instead.

        Consumers downstream of a replaced tensor are re-created (re-interned); untouched nodes are shared.
        Raises CycleError if a replacement depends on the tensor it replaces.
        """
        ids = self.node_ids
        affected = self._downstream_of(mapping)
        outs, added = _rebuild(self.store, mapping, self.outputs, lambda nid: nid in ids and nid not in affected)
        result = TensorGraph(self.store, outs)
        result._ids = self._derived_ids(affected, added, outs, {ref[0] for ref in mapping if ref[0] in ids})
        if self._weight_only is not None:
            result._weight_only = self._derived_weight_only(result._ids, added)
        return result

    def _downstream_of(self, mapping: Mapping[TensorRef, TensorRef]) -> set[int]:
        """Ids of this graph's nodes that read a replaced tensor, directly or through other nodes: the only ones a
        rewrite re-creates (the rest is shared)."""
        nodes = self.store.nodes
        ids = self.node_ids
        cons = self.consumers()
        affected: set[int] = set()
        stack = [ref for ref in mapping if ref[0] in ids]
        while stack:
            for c, _ in cons.get(stack.pop(), ()):
                if c >= 0 and c not in affected:
                    affected.add(c)
                    stack.extend(nodes[c].outputs)
        return affected

    def _derived_weight_only(self, result_ids: frozenset, added: set) -> frozenset:
        """The weight-only ids of a rewrite of this graph: kept nodes keep their inputs, so their flags hold; the
        `added` nodes are judged afresh, producers first (ids increase along the edges)."""
        nodes = self.store.nodes
        wo = set(self._weight_only.intersection(result_ids))
        for a in sorted(added):
            n = nodes[a]
            if n.op != "weight" and from_weights(n, lambda i: i in wo or nodes[i].op == "weight"):
                wo.add(a)
            else:
                wo.discard(a)
        return frozenset(wo)

    def _derived_ids(self, removed: set, added: set, outs: list, replaced: set) -> frozenset:
        """The node set of a rewrite of this graph, from the change alone: drop `removed` (the re-created
        downstream nodes), add `added` (the nodes the rewrite built), and drop the nodes left without a use,
        found by walking up from the replaced nodes and the removed nodes' inputs in decreasing id order (consumers
        before producers)."""
        nodes = self.store.nodes
        ids = self.node_ids
        cons = self.consumers()
        used = {i for a in added for i, _ in nodes[a].inputs}
        used.update(i for i, _ in outs)
        dead: set[int] = set()
        starts = replaced | {i for r in removed for i, _ in nodes[r].inputs}
        heap = [-i for i in starts if i not in removed and i not in added]
        heapq.heapify(heap)
        queued = set(heap)
        while heap:
            x = -heapq.heappop(heap)
            if x in used:
                continue
            alive = False
            for ref in nodes[x].outputs:
                for c, _ in cons.get(ref, ()):
                    if c >= 0 and c not in removed and c not in dead:
                        alive = True
                        break
                if alive:
                    break
            if alive:
                continue
            dead.add(x)
            for i, _ in nodes[x].inputs:
                if -i not in queued and i not in added:
                    queued.add(-i)
                    heapq.heappush(heap, -i)
        return (ids - removed - dead) | added

    def with_outputs(self, outputs: Sequence[TensorRef]) -> "TensorGraph":
        return TensorGraph(self.store, outputs)

    # ---------------------------------------------------------------- reference semantics
    def evaluate(self, feeds: Mapping[str, np.ndarray], refs: Optional[Sequence[TensorRef]] = None) -> list:
        """Run the graph with each operator's NumPy semantics (the reference the rules are tested against)."""
        values: dict[int, list] = {}
        for node in self.topo_order() if refs is None else TensorGraph(self.store, refs).topo_order():
            if node.op == "input":
                name = node.attrs["name"]
                if name not in feeds:
                    raise GraphError(f"no value fed for input '{name}'")
                values[node.id] = [np.asarray(feeds[name])]
            elif node.op == "weight":
                values[node.id] = [weight_array(node)]
            elif node.op == "opaque":
                raise GraphError(f"cannot evaluate opaque node %{node.id} in NumPy")
            else:
                args = [values[i][j] for i, j in node.inputs]
                values[node.id] = list(node.opdef.numpy(args, node.attrs))
        return [values[i][j] for i, j in (self.outputs if refs is None else refs)]


def _follow(mapping: Mapping[TensorRef, TensorRef], ref: TensorRef) -> TensorRef:
    """The tensor that `ref` reads after the replacements (chains followed); CycleError if they loop."""
    seen = 0
    while ref in mapping:
        ref = mapping[ref]
        seen += 1
        if seen > len(mapping):
            raise CycleError("replacement mapping loops")
    return ref


def _rebuild(store: NodeStore, mapping: Mapping[TensorRef, TensorRef], outputs: Sequence[TensorRef],
             kept: Callable[[int], bool]) -> tuple[list[TensorRef], set[int]]:
    """Re-intern what the (replaced) outputs reach with every input read through `mapping`, producers first;
    a node for which `kept` holds is shared as is. Returns the new outputs and the ids of the nodes built or
    reached that were not kept. Raises CycleError if a node comes to depend on itself."""
    nodes = store.nodes
    new_id: dict[int, int] = {}
    state: dict[int, int] = {}  # 1 = in progress, 2 = done

    def build(root: int) -> None:
        stack = [root]
        while stack:
            nid = stack[-1]
            if state.get(nid) == 2:
                stack.pop()
                continue
            if kept(nid):
                new_id[nid] = nid
                state[nid] = 2
                stack.pop()
                continue
            node = nodes[nid]
            refs = [_follow(mapping, r) for r in node.inputs]
            pending = [r[0] for r in refs if state.get(r[0]) != 2]
            if pending:
                if state.get(nid) == 1:
                    raise CycleError(f"rewrite creates a cycle through {node.op} %{nid}")
                state[nid] = 1
                for p in pending:
                    if state.get(p) == 1:
                        raise CycleError(f"rewrite creates a cycle through {nodes[p].op} %{p}")
                    stack.append(p)
                continue
            new_inputs = tuple((new_id[i], j) for i, j in refs)
            new_id[nid] = nid if new_inputs == node.inputs else store.remake(node, new_inputs).id
            state[nid] = 2
            stack.pop()

    outs = []
    for ref in outputs:
        ref = _follow(mapping, ref)
        build(ref[0])
        outs.append((new_id[ref[0]], ref[1]))
    return outs, {new_id[v] for v in state if not kept(v)}


def from_weights(node: Node, is_weight_only: Callable[[int], bool]) -> bool:
    """The weight-only rule: a weight, or an operator (not an input or opaque node) whose inputs, of which it has
    at least one, are all weight-only (`is_weight_only` answers for an input's node id)."""
    return node.op == "weight" or (node.op not in ("input", "opaque") and bool(node.inputs) and
                                   all(is_weight_only(i) for i, _ in node.inputs))


def weight_array(node: Node) -> np.ndarray:
    """The data of a weight node as a NumPy array (Relax constants are converted on demand)."""
    v = node.value
    if isinstance(v, np.ndarray):
        return v
    data = getattr(v, "value", v)  # tvm.ir.GenericConst keeps its tensor in .value
    arr = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
    return arr


def new_graph_store() -> NodeStore:
    return NodeStore()


__all__ = ["Node", "NodeStore", "TensorGraph", "TensorRef", "CycleError", "from_weights", "weight_array", "freeze"]


def weight_value(graph: TensorGraph, ref: TensorRef) -> np.ndarray:
    """The value of a weight-only tensor (a weight, or an expression of weights: div_by_constant's 1 / c),
    evaluated with the operators' NumPy semantics."""
    node = graph.store.nodes[ref[0]]
    if node.op == "weight":
        return np.asarray(weight_array(node))
    args = [weight_value(graph, r) for r in node.inputs]
    return np.asarray(node.opdef.numpy(args, node.attrs)[ref[1]])


def fold_weights(graph: TensorGraph) -> TensorGraph:
    """The graph with every weight-only computation evaluated with NumPy into a weight (what Relax's FoldConstant
    does, without building a kernel per expression), so that rules asking for weights see them."""
    wo = graph.weight_only_ids()
    if not wo:
        return graph
    store = graph.store
    arrays: dict[int, list] = {}
    mapping: dict[TensorRef, TensorRef] = {}
    users = graph.consumers()
    outputs = set(graph.outputs)
    for node in graph.topo_order():
        if node.id not in wo:
            continue
        args = [arrays[i][j] if i in arrays else weight_array(store.nodes[i]) for i, j in node.inputs]
        outs = node.opdef.numpy(args, node.attrs)
        arrays[node.id] = [np.ascontiguousarray(a, dtype=t.dtype).reshape(t.shape) if np.size(a) == t.size else
                           np.ascontiguousarray(a, dtype=t.dtype) for a, t in zip(outs, node.types)]
        for k, ref in enumerate(node.outputs):
            frontier = ref in outputs or any(c < 0 or c not in wo for c, _ in users.get(ref, ()))
            if frontier:
                mapping[ref] = store.weight(arrays[node.id][k], node.types[k])
    return graph.replace(mapping) if mapping else graph
