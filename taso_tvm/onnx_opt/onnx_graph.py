"""Small facts about an ONNX graph: what each node reads (subgraphs' outer-scope names included), who produces
and who consumes each tensor, a stable topological order, and liveness."""
from __future__ import annotations

from typing import Iterable, Sequence

import onnx

CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})
DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes (used but not defined inside it)."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.name for i in graph.sparse_initializer}
    used: set[str] = set()
    for n in graph.node:
        used.update(x for x in n.input if x)
        for g in _subgraphs(n):
            used |= _outer_names(g)
        defined.update(n.output)
    used.update(o.name for o in graph.output)
    return used - defined


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor name a node depends on: its inputs, then names its subgraphs take from the outer scope."""
    names = [x for x in node.input if x]
    for g in _subgraphs(node):
        names.extend(sorted(_outer_names(g) - set(names)))
    return names


def has_subgraph(node: onnx.NodeProto) -> bool:
    return bool(_subgraphs(node))


def producers(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor name -> index of the node that writes it."""
    return {o: i for i, n in enumerate(graph.node) for o in n.output if o}


def topo_order(nodes: Sequence[onnx.NodeProto], available: Iterable[str]) -> list[int]:
    """Positions of `nodes` in an order where each comes after its producers, otherwise keeping the given order
    (Kahn's algorithm, smallest position first). Raises ValueError on a cycle or a read of an unknown name."""
    import heapq

    have = set(available)
    prod = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [set() for _ in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for x in node_reads(n):
            if x in prod and prod[x] != i:
                deps[i].add(prod[x])
            elif x not in have and x not in prod:
                raise ValueError(f"node '{n.name or n.op_type}' reads '{x}', which nothing defines")
        for d in deps[i]:
            users[d].append(i)
    ready = [i for i, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            deps[u].discard(i)
            if not deps[u]:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise ValueError("the graph has a cycle")
    return order


def live_nodes(graph: onnx.GraphProto, barrier: Iterable[int] = (), roots: Iterable[str] = ()) -> set[int]:
    """Indices of the nodes that graph outputs (and the tensors `roots`) depend on; with `barrier`, the dependence
    is not followed through those nodes (what stays live once they are replaced by nodes that read `roots`)."""
    prod = producers(graph)
    stop = set(barrier)
    live: set[int] = set()
    stack = [o.name for o in graph.output] + list(roots)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        i = prod.get(name)
        if i is None or i in live or i in stop:
            continue
        live.add(i)
        stack.extend(node_reads(graph.node[i]))
    return live


def used_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name that some node reads or that is a graph output."""
    used = {o.name for o in graph.output}
    for n in graph.node:
        used.update(node_reads(n))
    return used


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return int(o.version)
    return 1


RAISABLE_FROM = 18  # the oldest opset raised to a newer one (before 18 the reductions, Split and Pad took as
# attributes what they take as inputs since)
MEANING_CHANGED = frozenset({"GroupNormalization",  # 21: per-channel scale and bias
                             "DFT",  # 20: its axis an input
                             "GridSample"})  # 20: its modes renamed (bilinear -> linear, bicubic -> cubic)
# 19-23 otherwise add types, or attributes and modes whose defaults keep the meaning (Cast's saturate, Pad's wrap,
# AveragePool's dilations, the quantizers' blocks)


def can_raise_opset(model: onnx.ModelProto, to: int) -> bool:
    """Whether the model's default-domain nodes compute the same at opset `to` as at its own: its opset is at
    least RAISABLE_FROM and no node (subgraphs included) is an operator whose meaning changed since."""
    have = default_opset(model)
    if have >= to:
        return True
    if have < RAISABLE_FROM:
        return False

    def ok(graph: onnx.GraphProto) -> bool:
        for n in graph.node:
            if n.domain in DEFAULT_DOMAINS and n.op_type in MEANING_CHANGED:
                return False
            if any(not ok(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH) or any(
                    not ok(g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs):
                return False
        return True

    return ok(model.graph)
