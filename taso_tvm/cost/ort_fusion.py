"""Group a graph's operators into the units ONNX Runtime's session will run, as ONNX Runtime itself groups them.

ONNX Runtime rewrites a graph when a session is created (Add + LayerNormalization -> SkipLayerNormalization, erf
GELU -> Gelu, Add + Gelu -> BiasGelu, MatMul + scale -> FusedMatMul, Conv + Relu -> FusedConv, ...). The grouping
is learned from ONNX Runtime, not from a list: a *window* of the graph is written as ONNX (`kernel_module` with
named tensors, the exporter's converters), a session is created with `optimized_model_filepath`, and each node of
the optimized graph is traced back to the original nodes it covers (ONNX Runtime keeps the output names of the
nodes it fuses: an optimized node covers the original nodes between the tensors it reads and those it writes).
Nodes one optimized node covers are one unit; a unit is measured as one kernel.

Windows. ONNX Runtime's fusions are local, and FuseOps' kernels (`fusion.Partitioner`) already hold most of them;
the ones that are not inside a kernel join two adjacent kernels (the residual Add of a MatMul's epilogue and the
LayerNormalization after it). So the windows are the pairs of FuseOps kernels joined by an edge, and each kernel
with no such edge; a tensor a window writes that is read outside it (or is a graph output) stays a window output,
so ONNX Runtime fuses across it no more than it would in the whole graph. The units are the union of what the
windows fuse. A window's grouping is keyed by its signature (the structural hash kernels are cached by) and kept
in memory and in the cost cache, so a rewrite costs a session per new window only.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Optional, Sequence

import onnx

from ..graph.tensor_graph import TensorGraph
from .cache import CostCache, Scope
from .fusion import Partitioner
from .graph_partitioner import find_root
from .kernel import Kernel, KernelSig
from .onnx_kernel import UnsupportedOp, bind_weights
from .relax_kernel import kernel_module, node_of_name

log = logging.getLogger(__name__)

GROUPING_FORM = "ort-groups-v2"  # how a window's grouping is learned; in the cache scope, so a change re-learns
Groups = tuple  # tuple of tuples of signature node indices, each one unit of two or more nodes
# (a window ONNX Runtime cannot be asked about, with no ONNX form or an opaque node, has groups None)


def window_onnx(sig: KernelSig) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The window as ONNX (as `kernel_onnx` writes a kernel) with its tensors named after the signature nodes, and
    tensor name -> signature node index for the tensors the exporter kept the names of (the graph outputs too)."""
    from ..onnx_io.export import ExportError, export_relax

    mod = bind_weights(kernel_module(sig, names=True), sig)
    try:
        model = export_relax(mod)
    except ExportError as e:
        raise UnsupportedOp(str(e)) from None
    owner = {}
    for n in model.graph.node:
        for t in n.output:
            k = node_of_name(t)
            if k is not None:
                owner[t] = k
    outs = [o.name for o in model.graph.output]
    for (i, _), name in zip(sig.outputs, outs):
        owner[name] = i
    return model, owner


def optimized_graph(model: onnx.ModelProto, session_options: Any, providers: Sequence[str]) -> onnx.GraphProto:
    """The graph an ONNX Runtime session runs for `model` (`session_options` sets the optimization level)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="taso_ort_opt_") as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        session_options.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), session_options, providers=list(providers))
        return onnx.load(path, load_external_data=False).graph


def covered_nodes(original: onnx.GraphProto, optimized: onnx.GraphProto) -> list[set[int]]:
    """For each node of `optimized`, the indices of the nodes of `original` it runs: the original producers of
    the tensors it writes, walked back through tensors the optimized graph no longer has."""
    producer = {t: i for i, n in enumerate(original.node) for t in n.output}
    present = {x.name for x in list(optimized.input) + list(optimized.initializer)}
    present.update(t for n in optimized.node for t in n.output)
    out = []
    for n in optimized.node:
        seen: set[int] = set()
        stack = [producer[t] for t in n.output if t in producer]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for t in original.node[i].input:
                if t and t not in present and t in producer:
                    stack.append(producer[t])
        out.append(seen)
    return out


def learn_groups(sig: KernelSig, session_options: Any, providers: Sequence[str]) -> Groups:
    """The units ONNX Runtime makes of the window `sig`: groups (two or more signature node indices) that one
    optimized node runs. A node the exporter wrote as several ONNX nodes belongs to the signature node that
    consumes their result."""
    model, owner = window_onnx(sig)
    g = model.graph
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(g.node):
        for t in n.input:
            consumers.setdefault(t, []).append(i)
    node_owner: dict[int, int] = {}
    for i in reversed(range(len(g.node))):  # an unnamed helper node belongs to the node that reads it
        n = g.node[i]
        o = next((owner[t] for t in n.output if t in owner), None)
        if o is None:
            o = next((node_owner[c] for t in n.output for c in consumers.get(t, ()) if c in node_owner), None)
        if o is not None:
            node_owner[i] = o
    uf: dict[int, int] = {}
    for cover in covered_nodes(g, optimized_graph(model, session_options, providers)):
        owners = sorted({node_owner[i] for i in cover if i in node_owner})
        for o in owners:
            uf.setdefault(o, o)
        for o in owners[1:]:
            a, b = find_root(uf, owners[0]), find_root(uf, o)
            if a != b:
                uf[b] = a
    groups: dict[int, list[int]] = {}
    for o in uf:
        groups.setdefault(find_root(uf, o), []).append(o)
    return tuple(sorted(tuple(sorted(m)) for m in groups.values() if len(m) > 1))


class OrtGrouping:
    """`kernels(graph)`: the graph's units as ONNX Runtime's session groups them (see the module docstring), each a
    `Kernel` the backend measures. Memoized per graph, per window in memory, and per window in `cache`."""

    def __init__(self, partitioner: Partitioner, session_options: Any, providers: Sequence[str],
                 cache: Optional[CostCache] = None, scope: Optional[Scope] = None, graph_memo_size: int = 8192):
        self.partitioner = partitioner
        self.session_options, self.providers = session_options, list(providers)
        self.cache = cache
        self.scope = (("ort_grouping",) + tuple(scope[1:3]) + (f"{scope[3]} {GROUPING_FORM}",)) if scope else None
        self._windows: dict[KernelSig, Optional[Groups]] = {}
        self._graphs: dict = {}
        self.graph_memo_size = graph_memo_size
        self.sessions = 0  # windows learned from a session (not from memory or the cache)

    def kernels(self, graph: TensorGraph) -> tuple[Kernel, ...]:
        gkey = (graph.store, graph.node_ids, graph.outputs)
        hit = self._graphs.get(gkey)
        if hit is None:
            hit = self._graphs[gkey] = self._units(graph)
            if len(self._graphs) > self.graph_memo_size:
                self._graphs.pop(next(iter(self._graphs)))
        return hit

    def windows(self, graph: TensorGraph) -> list[tuple[KernelSig, list[int], Groups]]:
        """The graph's windows: (signature, graph node id of each signature node, the window's FuseOps kernels in
        signature node indices: the grouping where ONNX Runtime cannot be asked)."""
        base = self.partitioner.kernels(graph)
        users = self._users(graph)
        kof = {nid: k for k, kern in enumerate(base) for nid in kern.nodes}
        pairs: set = set()
        for c, kern in enumerate(base):
            for nid in kern.nodes:
                for ref in graph.node(nid).inputs:
                    p = kof.get(ref[0])
                    if p is not None and p != c:
                        pairs.add((p, c))
        joined = {k for pair in pairs for k in pair}
        sets = [(p, c) for p, c in sorted(pairs)] + [(k,) for k in range(len(base)) if k not in joined]
        rank = {n.id: i for i, n in enumerate(graph.topo_order())}
        out = []
        for ks in sets:
            ids = sorted((nid for k in ks for nid in base[k].nodes), key=rank.__getitem__)
            sig, order = self.partitioner.signature(graph, ids, users)
            local = {nid: i for i, nid in enumerate(order)}
            fuseops = tuple(tuple(sorted(local[nid] for nid in base[k].nodes)) for k in ks)
            out.append((sig, order, fuseops))
        return out

    def _users(self, graph: TensorGraph) -> dict:
        users: dict = {}
        for nid in graph.node_ids:
            for ref in graph.node(nid).inputs:
                users.setdefault(ref, set()).add(nid)
        return users

    def _units(self, graph: TensorGraph) -> tuple[Kernel, ...]:
        wins = self.windows(graph)
        groups = self.groups([sig for sig, _, _ in wins])
        uf: dict[int, int] = {}
        for sig, ids, fuseops in wins:
            for nid in ids:
                uf.setdefault(nid, nid)
            learned = groups[sig]
            for grp in (fuseops if learned is None else learned):
                if len(grp) < 2:
                    continue
                a = find_root(uf, ids[grp[0]])
                for k in grp[1:]:
                    b = find_root(uf, ids[k])
                    if a != b:
                        uf[b] = a
        members: dict[int, list[int]] = {}
        for n in graph.topo_order():
            if n.id in uf:
                members.setdefault(find_root(uf, n.id), []).append(n.id)
        users = self._users(graph)
        out = []
        for ids in members.values():
            sig, _ = self.partitioner.signature(graph, ids, users)
            out.append(Kernel(sig, tuple(ids), ids[-1]))
        out.sort(key=lambda k: k.nodes[-1])
        return tuple(out)

    def groups(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Optional[Groups]]:
        """Each window's groups: from memory, the cache, or a session (new ones are stored in both)."""
        todo = [s for s in dict.fromkeys(sigs) if s not in self._windows]
        if todo and self.cache is not None and self.scope is not None:
            for key, text in self.cache.get_details(self.scope, [s.key for s in todo]).items():
                for s in todo:
                    if s.key == key:
                        data = json.loads(text)
                        self._windows[s] = None if data is None else tuple(tuple(g) for g in data)
            todo = [s for s in todo if s not in self._windows]
        rows = []
        for s in todo:
            self._windows[s] = self._learn(s)
            rows.append((s.key, s.label(), 0.0, "ok", json.dumps(self._windows[s])))
        if rows and self.cache is not None and self.scope is not None:
            self.cache.put_many(self.scope, rows)
        return {s: self._windows[s] for s in sigs}

    def _learn(self, sig: KernelSig) -> Optional[Groups]:
        if any(op == "opaque" for op in sig.ops):
            return None
        try:
            self.sessions += 1
            return learn_groups(sig, self.session_options, self.providers)
        except UnsupportedOp as e:
            log.info("window %s has no ONNX form (%s): its nodes are grouped as FuseOps groups them", sig.label(), e)
        except Exception as e:  # noqa: BLE001  (ONNX Runtime refuses the window: it fuses nothing we can see)
            log.info("window %s: ONNX Runtime's optimized graph is not available (%s)", sig.label(),
                     str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None


__all__ = ["OrtGrouping", "learn_groups", "covered_nodes", "optimized_graph", "window_onnx", "GROUPING_FORM"]
