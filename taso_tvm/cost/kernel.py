"""Kernel signatures: the canonical, hashable description of one fused kernel.

A signature lists the kernel's operators in a canonical local order (depth-first from the kernel's root through
its inputs), each as (operator, sorted attributes, input references), the kernel's external inputs as
(shape, dtype, is_weight) in first-use order, and the tensors it writes. An input reference is
`(local node index, output index)`, or `(-1 - k, 0)` for external input k. Two kernels with equal signatures
compute the same thing on the same shapes, so they cost the same; signatures are interned so that equal ones
are one object with a precomputed hash.
"""
from __future__ import annotations

import hashlib
from typing import Optional

from ..graph.ops import facet
from ..graph.tensor_graph import NodeStore
from ..graph.types import TensorType

NodeSpec = tuple  # (op, attrs items, input refs)
InputSpec = tuple  # (shape, dtype, is_weight)


class KernelSig:
    """Interned kernel signature. Build with `KernelSig.make`; compare and hash like a tuple."""

    __slots__ = ("nodes", "inputs", "outputs", "_hash", "_key", "_label", "__weakref__")
    _interned: dict = {}

    def __init__(self, nodes: tuple, inputs: tuple, outputs: tuple):
        self.nodes, self.inputs, self.outputs = nodes, inputs, outputs
        self._hash = hash((nodes, inputs, outputs))
        self._key: Optional[str] = None
        self._label: Optional[str] = None

    @classmethod
    def make(cls, nodes: tuple, inputs: tuple, outputs: tuple) -> "KernelSig":
        t = (nodes, inputs, outputs)
        sig = cls._interned.get(t)
        if sig is None:
            sig = cls._interned[t] = cls(nodes, inputs, outputs)
        return sig

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, KernelSig) and self._hash == other._hash and
                                 (self.nodes, self.inputs, self.outputs) == (other.nodes, other.inputs,
                                                                             other.outputs))

    def __reduce__(self):
        return (KernelSig.make, (self.nodes, self.inputs, self.outputs))

    @property
    def key(self) -> str:
        """Stable text key (SHA-256 of the canonical text), the same in every process and Python version."""
        if self._key is None:
            self._key = hashlib.sha256(self.text.encode()).hexdigest()
        return self._key

    @property
    def text(self) -> str:
        return repr((self.nodes, self.inputs, self.outputs))

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n[0] for n in self.nodes)

    def input_types(self) -> list[TensorType]:
        return [TensorType(tuple(s), d) for s, d, _ in self.inputs]

    @property
    def is_view_only(self) -> bool:
        """A lone reshape (operators whose `cost.view` facet is set): TVM turns it into a view
        (RewriteDataflowReshape), no kernel launch."""
        return all(facet(n[0], "cost.view") for n in self.nodes)

    def label(self) -> str:
        """Short human-readable name: operators, data inputs and output shape, e.g.
        `conv2d+add+relu f32[1,64,56,56]->[1,128,28,28]` (weights are left out)."""
        if self._label is None:
            data = [i for i in self.inputs if not i[2]] or list(self.inputs[:1])
            dt = str(data[0][1]).replace("float", "f").replace("int", "i") if data else ""
            ins = ",".join(f"[{','.join(str(d) for d in s)}]" for s, _, _ in data)
            out = ""
            if "opaque" not in self.ops:
                try:
                    _, _, nodes = rebuild(self)
                    i, j = self.outputs[0]
                    shape = nodes[i].types[j].shape
                    out = f"->[{','.join(str(d) for d in shape)}]"
                except Exception:  # noqa: BLE001  (a label must never fail)
                    out = ""
            ops = [op + (f"+{a['activation']}" if a.get("activation", "none") != "none" else "")
                   for op, a in ((n[0], dict(n[1])) for n in self.nodes)]
            self._label = f"{'+'.join(ops)} {dt}{ins}{out}"
        return self._label

    def __repr__(self) -> str:
        return f"KernelSig({self.label()})"


class Kernel:
    """One kernel of a partitioned graph: its signature and the TensorGraph node ids it covers."""

    __slots__ = ("sig", "nodes", "root")

    def __init__(self, sig: KernelSig, nodes: tuple, root: int):
        self.sig, self.nodes, self.root = sig, nodes, root

    def __repr__(self) -> str:
        return f"Kernel({self.sig.label()}, nodes={list(self.nodes)})"


def rebuild(sig: KernelSig) -> tuple[NodeStore, list, list]:
    """Re-create the kernel's nodes in a fresh store: (store, input refs, nodes in signature order)."""
    store = NodeStore()
    ins = [store.input(f"p{i}", TensorType(tuple(s), d)) for i, (s, d, _) in enumerate(sig.inputs)]
    nodes = []
    for op, attrs, refs in sig.nodes:
        args = [ins[-1 - i] if i < 0 else nodes[i].outputs[j] for i, j in refs]
        nodes.append(store.make(op, args, dict(attrs)))
    return store, ins, nodes
