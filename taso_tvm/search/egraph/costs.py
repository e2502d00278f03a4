"""Per-e-node costs from the search's cost function (the same measured kernels the backtracking search uses).

An e-node is costed as a tiny graph: the node itself over placeholder inputs of its children classes' types (a
weight placeholder where the class holds a weight-only term, so the cost model folds what lowering folds). Its
cost is `cost(tiny graph)`: one kernel, measured (or looked up) like any kernel of a real graph.

Fused groups. The cost model partitions a graph into the kernels TVM's FuseOps makes (conv2d + bias add + relu is
one kernel), so a sum of per-node kernels over-counts what fuses. With `fusion_costs`, each e-node n is also costed
against each producer m of each of its input classes: the tiny graph m -> n (m's other outputs kept), whose cost
minus the two solo costs is the *pair discount* d(m, n) (negative when the cost model fuses them; zero when it
does not, so no operator kinds are hard-coded here: the cost model's partitioner decides). A discount counts
only when m and n are both extracted with n reading m (the ILP has a variable per pair for that; the greedy
extraction applies it against the producers already chosen), and each node fuses with at most one partner on
either side. What this misses: groups of three or more nodes are costed pair by pair (conv2d -> add -> relu as
two discounts), and a producer whose output is also read elsewhere still gets its discount. `EGraphReport`
gives the sum the extraction predicted next to the cost model's cost of the extracted graph.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from ...graph import TensorGraph
from .egraph_view import EGraphView, ENode


class ENodeCosts:
    """`solo[i]`: e-node i as a kernel of its own (0 for weight-only, input, weight and Get e-nodes);
    `pairs[i]`: [(child class h, producer e-node m, the e-node of h that reads m's output: m itself or a Get,
    discount d < 0)] for the producers i fuses with."""

    def __init__(self, solo: list, pairs: list):
        self.solo, self.pairs = solo, pairs

    def producer(self, view: EGraphView, choice: dict, h: int) -> Optional[int]:
        """The operator e-node that computes class h under `choice` (through a Get for a tuple output)."""
        i = choice.get(h)
        if i is None:
            return None
        n = view.enodes[i]
        if n.kind == "get":
            return choice.get(n.children[0])
        return i if n.kind == "op" else None

    def effective(self, view: EGraphView, choice: dict, i: int) -> float:
        """Solo cost of e-node i plus its best discount against the producers `choice` gives its inputs."""
        d = 0.0
        for h, m, via, disc in self.pairs[i]:
            if disc < d and choice.get(h) == via and (via == m or self.producer(view, choice, h) == m):
                d = disc
        return self.solo[i] + d

    def total(self, view: EGraphView, choice: dict) -> float:
        """The predicted cost of the graph `choice` forms: solo costs plus the discounts of chosen pairs, each e-node
        in at most one pair as producer and one as consumer (the largest discounts first)."""
        cands = []
        for c, i in choice.items():
            for h, m, via, disc in self.pairs[i]:
                if choice.get(h) == via and (via == m or self.producer(view, choice, h) == m):
                    cands.append((disc, m, i))
        cands.sort()
        as_producer, as_consumer = set(), set()
        total = math.fsum(self.solo[i] for i in choice.values())
        for disc, m, i in cands:
            if m not in as_producer and i not in as_consumer:
                as_producer.add(m)
                as_consumer.add(i)
                total += disc
        return total


class ENodeCoster:
    """Costs of a view's e-nodes under `cost` (graph -> ms); `prefetch(graphs)` measures new kernels in a batch."""

    def __init__(self, view: EGraphView, cost: Callable, prefetch: Optional[Callable] = None, fusion: bool = True):
        self.view, self.cost, self.prefetch, self.fusion = view, cost, prefetch, fusion
        self.teg = view.teg
        self._solo: dict = {}  # content key -> graph, then cost
        self._pair: dict = {}

    def _inputs(self, classes: tuple) -> list:
        v = self.view
        return [self.teg.placeholder(v.class_k[c], v.wo[c]) for c in classes]

    def _make(self, n: ENode, inputs: list):
        op, attrs, opaque = self.teg.attr_table[n.payload]
        store = self.teg.scratch
        if op == "opaque":
            return store.remake(opaque, tuple(inputs))
        return store.make(op, inputs, attrs)

    def _desc(self, classes: tuple) -> tuple:
        """What a tiny graph's content depends on: the children's types, weight-only flags and which are equal."""
        v = self.view
        first: dict = {}
        return tuple((v.types[c], v.wo[c], first.setdefault(c, len(first))) for c in classes)

    def _solo_key(self, n: ENode) -> tuple:
        return (n.ctor, n.payload, self._desc(n.children))

    def _solo_graph(self, key: tuple, n: ENode, todo: dict) -> None:
        if key not in self._solo:
            node = self._make(n, self._inputs(n.children))
            self._solo[key] = todo[key] = TensorGraph(self.teg.scratch, node.outputs)

    def costs(self) -> ENodeCosts:
        """The solo costs (ms) and pair discounts of every e-node, in `view.enodes` order."""
        v = self.view
        todo: dict = {}
        solo_keys: list = []
        for n in v.enodes:
            if n.kind != "op" or v.wo[n.cls]:
                solo_keys.append(None)
                continue
            key = self._solo_key(n)
            solo_keys.append(key)
            self._solo_graph(key, n, todo)
        found: list = [[] for _ in v.enodes]  # per e-node: (h, m index, via index, pair key)
        if self.fusion:
            index = {id(n): i for i, n in enumerate(v.enodes)}
            for i, n in enumerate(v.enodes):
                if solo_keys[i] is None:
                    continue
                for c in dict.fromkeys(n.children):
                    if v.wo[c]:
                        continue
                    for m, out, via in self._producers(c):
                        if n.cls in m.children:  # m reads n: they cannot be one kernel (T(T(a)) in a's class)
                            continue
                        key = self._pair_key(m, out, n, c)
                        if key not in self._pair:
                            self._pair[key] = todo[key] = self._pair_graph(m, out, n, c)
                        self._solo_graph(self._solo_key(m), m, todo)
                        found[i].append((c, index[id(m)], via, key))
        if todo and self.prefetch is not None:
            self.prefetch(list(todo.values()))
        for key, g in todo.items():
            value = float(self.cost(g))
            if key in self._solo and self._solo[key] is g:
                self._solo[key] = value
            else:
                self._pair[key] = value
        solo = [0.0 if key is None else self._solo[key] for key in solo_keys]
        pairs: list = [[] for _ in v.enodes]
        for i, lst in enumerate(found):
            for c, m, via, key in lst:
                disc = self._pair[key] - solo[m] - solo[i]
                if math.isfinite(disc) and disc < -1e-12 * max(solo[m] + solo[i], 1e-30):
                    pairs[i].append((c, m, via, max(disc, -solo[i] - solo[m])))
        return ENodeCosts(solo, pairs)

    def _producers(self, c: int) -> list:
        """(e-node, output index, the e-node of class c that reads it) for the operators that compute class c
        (through a Get for a tuple output)."""
        v = self.view
        out = []
        for j in v.nodes_of[c]:
            m = v.enodes[j]
            if m.kind == "op" and not v.wo[m.cls]:
                out.append((m, 0, j))
            elif m.kind == "get":
                out.extend((v.enodes[t], m.payload, j) for t in v.nodes_of[m.children[0]]
                           if v.enodes[t].kind == "op")
        return out

    def _pair_key(self, m: ENode, out: int, n: ENode, c: int) -> tuple:
        others = tuple(x for x in n.children if x != c)
        desc = self._desc(m.children + others)
        return (m.ctor, m.payload, out, n.ctor, n.payload, tuple(x == c for x in n.children), desc)

    def _pair_graph(self, m: ENode, out: int, n: ENode, c: int) -> TensorGraph:
        mnode = self._make(m, self._inputs(m.children))
        ins = [mnode.outputs[out] if x == c else self.teg.placeholder(self.view.class_k[x], self.view.wo[x])
               for x in n.children]
        node = self._make(n, ins)
        # m's other outputs stay outputs: a split's kernel writes them all, with or without n
        return TensorGraph(self.teg.scratch, node.outputs + [r for j, r in enumerate(mnode.outputs) if j != out])
