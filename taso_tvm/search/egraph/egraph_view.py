"""The saturated e-graph as plain Python data for costing and extraction: classes, e-nodes, roots."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine import LEAF_CTORS, TensorEGraph


@dataclass(frozen=True)
class ENode:
    """One e-node: `kind` is 'input', 'weight' (payload: the node id in the graph's store), 'get' (payload: the
    output index; its one child is a Tup class) or 'op' (payload: the attribute id)."""

    cls: int
    kind: str
    op: str
    ctor: str
    payload: int
    children: tuple  # class indices


class EGraphView:
    """Classes (dense indices) and e-nodes of one frozen e-graph."""

    def __init__(self, teg: TensorEGraph):
        snap = teg.snapshot()
        self.teg = teg
        v2i = snap.v2i
        self.class_index: dict[Any, int] = {}
        self.class_k: list[int] = []
        for value, k in snap.canon.items():
            self.class_index[value] = len(self.class_k)
            self.class_k.append(k)
        self.wo = [v in snap.wo for v in snap.canon]
        self.types = [teg.types[k] for k in self.class_k]
        ctor_by_name = {c.name: c for c in teg.ctors.values()}
        self.enodes: list[ENode] = []
        ci = self.class_index
        for name, f in snap.frozen.functions.items():
            if name in LEAF_CTORS:
                kind = "input" if name == "Input" else "weight"
                for row in f.rows:
                    self.enodes.append(ENode(ci[row.output], kind, kind, name, v2i(row.inputs[0]), ()))
            elif name == "Get":
                for row in f.rows:
                    self.enodes.append(ENode(ci[row.output], "get", "get", name, v2i(row.inputs[1]),
                                             (ci[row.inputs[0]],)))
            elif name in ctor_by_name:
                c = ctor_by_name[name]
                for row in f.rows:
                    ins = row.inputs
                    self.enodes.append(ENode(ci[row.output], "op", c.op, name, v2i(ins[-1]),
                                             tuple(ci[v] for v in ins[:-1])))
        self.unique_children = [tuple(dict.fromkeys(n.children)) for n in self.enodes]
        self.nodes_of: list[list[int]] = [[] for _ in self.class_k]
        for i, n in enumerate(self.enodes):
            self.nodes_of[n.cls].append(i)
        self.roots = [ci[snap.cls_of[k]] for k in teg.root_ks]
        self.snap = snap
        self.built_memo: dict = {}  # extract.materialize's memo

    @property
    def num_classes(self) -> int:
        return len(self.class_k)

    def origin(self, n: ENode) -> Any:
        """(rule, application number) that first made this e-node (None for the graph's own nodes)."""
        return self._origins().get((n.ctor, tuple(self.class_k[c] for c in n.children), n.payload))

    def _origins(self) -> dict:
        o = getattr(self, "_origin_map", None)
        if o is None:
            snap = self.snap
            o = {}
            for (ctor, ks, payload), rule in self.teg.origin.items():
                o.setdefault((ctor, tuple(snap.k(k) for k in ks), payload), rule)
            self._origin_map = o
        return o
