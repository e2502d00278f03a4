"""Split a user's ONNX graph into convex regions that TVM can import.

A node is *searchable* when it survives folding, is in the default domain, has no subgraph, reads no constant
that depends on a symbolic dim, TVM's ONNX frontend imports it alone at the bound shapes and the exporter writes
it back (tried once per distinct signature), and, in a model with symbolic dims, what is written back is the same
at both bindings (TVM resolves Flatten, Reshape's -1 or Slice ends to numbers: those nodes would bake the dim in).
In a model with symbolic dims, reshapes are written relative to their input (the leading dims they keep as 0, the
first other as -1), so a Reshape whose target shape is computed from a symbolic dim (attention heads split off
[batch, sequence, hidden]) is searchable when that form is the same at both bindings; an Expand likewise (the dims
it keeps written as 1: transformers' repeat_kv expands [B, Hk, 1, T, D] by [1, 1, R, 1, 1]).
Every other node stays in the output as it is.

Convexity comes from levels: a node's level is the largest number of unsearchable nodes on any path that reaches
it. Two searchable nodes on one level can have no unsearchable node between them, so any set of same-level nodes
is convex; a region is a connected group (edges and shared inputs) of searchable nodes on one level.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..progress import Progress
from ..quiet import quiet
from .onnx_graph import CONTROL_FLOW, DEFAULT_DOMAINS, default_opset, has_subgraph, node_reads, producers
from .prepare import Prepared

log = logging.getLogger(__name__)


@dataclass
class Region:
    """A convex set of searchable nodes (indices into the user's graph, in graph order)."""

    index: int
    nodes: list[int]
    level: int


@dataclass
class Partition:
    regions: list[Region]
    searchable: set[int]
    reasons: dict[int, str]  # node index -> why it stays out of the search
    speculative: set[int] = field(default_factory=set)  # searchable only if the search removes them

    @property
    def num_searchable(self) -> int:
        return len(self.searchable)


def _static_tensor_type(t: Optional[onnx.TypeProto]) -> bool:
    if t is None or not t.HasField("tensor_type"):
        return False
    tt = t.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return False
    return all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim)


class _Probe:
    """What TVM makes of one node alone at given input types: None when it cannot be imported and exported back,
    else a canonical form of the export (op types, attributes and constants, names left out). Memoized."""

    def __init__(self, opset: int, opset_imports, relative_reshape: bool = False):
        self.opset = opset
        self.opset_imports = list(opset_imports)
        self.relative_reshape = relative_reshape
        self.memo: dict[str, tuple[Optional[str], Optional[bytes]]] = {}

    def _model(self, node: onnx.NodeProto, types: dict, consts: dict) -> onnx.ModelProto:
        inputs, inits = [], []
        for x in dict.fromkeys(i for i in node.input if i):
            if x in consts:
                inits.append(numpy_helper.from_array(np.asarray(consts[x]), x))
            else:
                inputs.append(helper.make_value_info(x, types[x]))
        outputs = [helper.make_value_info(o, types[o]) for o in node.output if o]
        g = helper.make_graph([node], "probe", inputs, outputs, inits)
        return helper.make_model(g, opset_imports=self.opset_imports)

    def __call__(self, node: onnx.NodeProto, types: dict, consts: dict) -> tuple[Optional[str], Optional[bytes]]:
        """(reason it cannot be searched or None, canonical export or None)."""
        sig = hashlib.sha1()
        sig.update(node.op_type.encode())
        for a in sorted(node.attribute, key=lambda a: a.name):
            sig.update(a.SerializeToString())
        for x in node.input:
            if x in consts:
                arr = np.asarray(consts[x])
                sig.update(b"c" + str(arr.dtype).encode() + str(arr.shape).encode() + arr.tobytes())
            elif x:
                sig.update(b"t" + types[x].SerializeToString())
            else:
                sig.update(b"-")
        sig.update(str(len(node.output)).encode())
        key = sig.hexdigest()
        if key not in self.memo:
            self.memo[key] = self._try(node, types, consts)
        return self.memo[key]

    def _try(self, node: onnx.NodeProto, types: dict, consts: dict) -> tuple[Optional[str], Optional[bytes]]:
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        from ..onnx_io.export import export_relax

        why = _empty_inputs_fit_schema(node, self.opset)
        if why:
            return why, None
        model = self._model(node, types, consts)
        try:
            with quiet():
                mod = from_onnx(model, opset=self.opset)
        except Exception as e:  # the frontend raises many types
            return f"TVM does not import {node.op_type} here ({_last_line(e)})", None
        main = mod["main"]
        if not isinstance(main.body, relax.SeqExpr) or not all(
                isinstance(b, relax.DataflowBlock) for b in main.body.blocks):
            return "TVM imports it as control flow", None
        try:
            with quiet():
                out = export_relax(mod, opset=self.opset, relative_reshape=self.relative_reshape)
        except Exception as e:  # ExportError, or a converter's failure on an odd form
            return f"the exporter cannot write {node.op_type} back ({_last_line(e)})", None
        ops = [n.op_type for n in out.graph.node]
        if len(ops) != 1:  # a rewritten region would write it as several nodes where the user had one
            return f"TVM decomposes {node.op_type} (written back as {' + '.join(ops) or 'nothing'})", None
        return None, canonical(out)


def _empty_inputs_fit_schema(node: onnx.NodeProto, opset: int) -> Optional[str]:
    """Why the node's inputs do not fit its schema (an empty name where the input is not optional, which crashes
    TVM's importer outright), or None."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:  # an op ONNX does not know at this opset
        return f"{node.op_type} is not an ONNX operator at opset {opset}"
    formal = list(schema.inputs)
    for pos, name in enumerate(node.input):
        if name:
            continue
        p = formal[min(pos, len(formal) - 1)] if formal else None
        if p is None or p.option != onnx.defs.OpSchema.FormalParameterOption.Optional:
            return f"{node.op_type} has an empty name for a required input"
    return None


def _last_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[-1][:200] if msg else type(e).__name__


def canonical(model: onnx.ModelProto) -> bytes:
    """The computation a model writes down, names left out: op types, attributes and constant values."""
    h = hashlib.sha1()
    for n in model.graph.node:
        h.update(n.domain.encode() + b"/" + n.op_type.encode())
        for a in sorted(n.attribute, key=lambda a: a.name):
            h.update(a.SerializeToString())
    for t in model.graph.initializer:
        arr = numpy_helper.to_array(t)
        h.update(str(arr.dtype).encode() + str(arr.shape).encode() + arr.tobytes())
    return h.digest()


# operators none of whose inputs is a shape, an axis or a count: a tensor folded to a value that depends on a symbolic
# dim (a causal mask sliced to the sequence length) is data to them, which the region reads as a run-time input
DATA_INPUT_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "MatMul", "Equal", "Less",
                            "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"})


# operators whose shape input the exporter writes relative to the data input's shape (the dims kept as they are),
# so that a shape computed from a symbolic dim is no obstacle where the written form is the same at both bindings
RELATIVE_SHAPE_OPS = frozenset({"Reshape", "Expand"})


def runtime_inputs(prep: Prepared, index: int) -> set[str]:
    """The inputs of kept node `index` that fold to a value depending on a symbolic dim and that the node reads as
    data: a region holding the node reads them as run-time inputs, computed by the user's nodes as they are."""
    node = prep.first.kept.get(index)
    if node is None or node.op_type not in DATA_INPUT_OPS:
        return set()
    dep = prep.dim_dependent_inputs(index)
    return set() if -1 in dep else {node.input[p] for p in dep}


def node_status(prep: Prepared, index: int, probe: _Probe) -> Optional[str]:
    """None when node `index` can be searched, else the reason it stays as it is."""
    node = prep.model.graph.node[index]
    f = prep.first
    if index not in f.kept:
        return "folded into a constant"
    if node.domain not in DEFAULT_DOMAINS:
        return f"custom domain '{node.domain}'"
    if node.op_type in CONTROL_FLOW or has_subgraph(node):
        return "control flow"
    dep = prep.dim_dependent_inputs(index)
    data = runtime_inputs(prep, index)
    if dep and not (node.op_type in RELATIVE_SHAPE_OPS and dep == {1}) and not data:  # written relative
        return "reads a shape computed from a symbolic dim"
    forms = []
    for fb in prep.folded:
        work = fb.kept[index]
        consts = {x: fb.consts[x] for x in work.input if x in fb.consts and x not in data}
        for x in list(work.input) + list(work.output):
            if x and x not in consts and not _static_tensor_type(fb.types.get(x)):
                return "a tensor with no static shape at the bound shapes (data-dependent or unknown)"
        why, form = probe(work, fb.types, consts)
        if why is not None:
            return why
        forms.append(form)
    if len(set(forms)) > 1:
        return "TVM bakes the value of a symbolic dim into it"
    return None


def _constant(prep: Prepared, index: int) -> bool:
    """Whether every output of kept node `index` is a constant of the working copy (a kept Constant node)."""
    return all(o in prep.first.consts for o in prep.first.kept[index].output if o)


def _consumers(graph: onnx.GraphProto) -> dict[int, set[int]]:
    prod = producers(graph)
    out: dict[int, set[int]] = {}
    for i, n in enumerate(graph.node):
        for x in node_reads(n):
            p = prod.get(x)
            if p is not None and p != i:
                out.setdefault(p, set()).add(i)
    return out


def _between(members: set[int], cons: dict[int, set[int]], prods: dict[int, set[int]],
             folded: frozenset = frozenset()) -> set[int]:
    """The nodes outside `members` on a path that leaves the set and comes back (over every edge of the user's
    graph, folded nodes included: they stay in the written model), except through the `folded` nodes that
    members read (a shape chain whose value the region takes as a constant). Empty: the set is convex."""
    def reach(edges: dict[int, set[int]], skip: frozenset = frozenset()) -> set[int]:
        stack = [c for m in members for c in edges.get(m, ()) if c not in members and c not in skip]
        seen: set[int] = set()
        while stack:
            i = stack.pop()
            if i not in seen and i not in members:
                seen.add(i)
                stack.extend(edges.get(i, ()))
        return seen

    return reach(cons) & reach(prods, folded)


def merge_convex(graph: onnx.GraphProto, groups: list[set[int]], folded: frozenset = frozenset()) -> list[set[int]]:
    """Merge groups joined by an edge where the union, closed over the groups of the nodes between them, stays
    convex (groups on different levels often are: the level rule is conservative; an attention block whose mask
    is computed on the side from the inputs, a residual add between two blocks)."""
    cons = _consumers(graph)
    prods: dict[int, set[int]] = {}
    for p, cs in cons.items():
        for c in cs:
            prods.setdefault(c, set()).add(p)
    groups = [set(g) for g in groups if g]
    owner = {i: k for k, g in enumerate(groups) for i in g}
    alive = [True] * len(groups)
    for k in range(len(groups)):
        tried: set[int] = set()
        while alive[k]:
            near = sorted({owner[c] for m in groups[k] for c in cons.get(m, ()) if c in owner} - {k} - tried)
            if not near:
                break
            tried.add(near[0])
            take, union = {near[0]}, groups[k] | groups[near[0]]
            while True:
                mid = _between(union, cons, prods, folded)
                if not mid:
                    break
                if any(i not in owner for i in mid):
                    union = set()  # an unsearchable node in between: these groups stay apart
                    break
                more = {owner[i] for i in mid} - take - {k}
                take |= more
                for j in more:
                    union |= groups[j]
            if not union:
                continue
            groups[k] = union
            for j in take:
                for i in groups[j]:
                    owner[i] = k
                alive[j], groups[j] = False, set()
            tried.clear()
    return [g for g, a in zip(groups, alive) if a]


SPECULATIVE_REASONS = ("TVM bakes the value of a symbolic dim into it", "reads a shape computed from a symbolic dim")


def partition(prep: Prepared, speculative: bool = False, index_base: int = 0) -> Partition:
    """The searchable nodes in convex regions (numbered from `index_base`). With `speculative`, a Reshape whose
    written form depends on a symbolic dim is searched too, on the chance that the search removes it (a kᵀ built by
    reshape-transpose-reshape becomes one transpose): the region is checked at both bindings, and where that fails
    the caller searches it again without them (`Partition.speculative`).

    Nodes searchable only because they read a dim-dependent value as data (`runtime_inputs`) can also cut a block
    apart (their shape read by an unsearchable chain that feeds the block back): the partition without them is
    kept where its largest region is larger."""
    graph = prep.model.graph
    probe = _Probe(default_opset(prep.model), prep.model.opset_import, relative_reshape=prep.symbolic)
    reasons: dict[int, str] = {}
    searchable: set[int] = set()
    spec: set[int] = set()
    data_only: set[int] = set()
    with Progress(len(graph.node), "trying nodes in TVM", unit="nodes") as bar:
        for i in range(len(graph.node)):
            why = node_status(prep, i, probe)
            if why is None:
                searchable.add(i)
                if runtime_inputs(prep, i):
                    data_only.add(i)
            elif speculative and graph.node[i].op_type == "Reshape" and why in SPECULATIVE_REASONS \
                    and i in prep.first.kept and _probe_first(prep, i, probe):
                searchable.add(i)
                spec.add(i)
            else:
                reasons[i] = why
            bar.update()
    merged, level = _convex_groups(prep, searchable)
    if data_only:
        without, level_without = _convex_groups(prep, searchable - data_only)
        if max(map(len, without), default=0) > max(map(len, merged), default=0):
            merged, level, searchable = without, level_without, searchable - data_only
            reasons.update((i, "reads a shape computed from a symbolic dim") for i in data_only)
    regions = [Region(index_base + k, nodes, level[nodes[0]])
               for k, nodes in enumerate(sorted(sorted(m) for m in merged))]
    log.info("partition: %d of %d nodes searchable, in %d region(s)", len(searchable), len(graph.node),
             len(regions))
    return Partition(regions, searchable, reasons, spec & searchable)


def _convex_groups(prep: Prepared, searchable: set[int]) -> tuple[list[set[int]], dict[int, int]]:
    """The searchable nodes grouped into convex regions, and each node's level: the largest number of unsearchable
    nodes on a path that reaches it."""
    graph = prep.model.graph
    prod = producers(graph)
    level: dict[int, int] = {}
    for i, n in enumerate(graph.node):  # the graph is topologically sorted (the checker requires it)
        lv = 0
        for x in node_reads(n):
            p = prod.get(x)
            if p is None or p not in level or p not in prep.first.kept or _constant(prep, p):
                continue  # graph inputs, initializers and constants cost no level
            lv = max(lv, level[p] + (0 if p in searchable else 1))
        level[i] = lv
    parent = {i: i for i in searchable}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    inputs = {vi.name for vi in graph.input} - {i.name for i in graph.initializer}
    first_reader: dict[tuple[str, int], int] = {}
    for i in sorted(searchable):
        for x in node_reads(graph.node[i]):
            p = prod.get(x)
            if p in searchable and level[p] == level[i]:
                parent[root(i)] = root(p)
            if not (x in inputs or (p is not None and p in prep.first.kept)):
                continue  # sharing a constant does not tie nodes together
            other = first_reader.setdefault((x, level[i]), i)
            if other != i:
                parent[root(i)] = root(other)
    groups: dict[int, list[int]] = {}
    for i in sorted(searchable):
        groups.setdefault(root(i), []).append(i)
    folded = frozenset(i for i in range(len(graph.node)) if i not in prep.first.kept or _constant(prep, i))
    return merge_convex(graph, [set(v) for v in groups.values()], folded), level


def _probe_first(prep: Prepared, index: int, probe: _Probe) -> bool:
    """Whether TVM imports node `index` and the exporter writes it back at the first binding."""
    fb = prep.first
    work = fb.kept[index]
    if any(x and x not in fb.consts and not _static_tensor_type(fb.types.get(x))
           for x in list(work.input) + list(work.output)):
        return False
    return probe(work, fb.types, fb.consts)[0] is None
