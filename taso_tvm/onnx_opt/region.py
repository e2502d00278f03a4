"""One region of a user's ONNX graph as a model of its own: built from the prepared working copy, searched through
Relax, exported at the model's opset, and accepted only if it computes what the original nodes computed at every
binding of the symbolic dims."""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph.ops.decompose import composite_attrs
from ..onnx_io import weights
from ..onnx_io.export import below_opset, fused_opset
from ..quiet import quiet
from ..rules.ruleset import RuleSet, without_ops
from .onnx_graph import default_opset, live_nodes, node_reads
from .partition import Region, runtime_inputs
from .prepare import Prepared

log = logging.getLogger(__name__)


@dataclass
class RegionModel:
    """A region as an ONNX model whose inputs and outputs carry the user's tensor names."""

    region: Region
    model: onnx.ModelProto
    inputs: list[str]
    outputs: list[str]
    symbolic: bool = False  # the user's model has symbolic dims: reshapes are written relative to their input
    broadcast_inputs: tuple = ()  # inputs with a dim of 1 at every binding (a position table beside a batch)
    opset_ceiling: int = 0  # the newest opset the user's model may be raised to (0: its own)


@dataclass
class RegionResult:
    region: Region
    accepted: Optional[onnx.ModelProto] = None  # the optimized region, shape-free at its boundary
    rules_applied: dict = field(default_factory=dict)
    note: str = ""
    cost_before: float = 0.0
    cost_after: float = 0.0
    ops_before: int = 0
    ops_after: int = 0
    expanded: int = 0
    stopped_by: str = ""
    seconds: float = 0.0


def region_model(prep: Prepared, region: Region) -> Optional[RegionModel]:
    """The region's nodes (as folded at the first binding) with their data inputs (and the values folded from a
    symbolic dim that they read as data) as graph inputs, their other constants as initializers and, as outputs,
    the tensors read outside the region or by the graph's outputs."""
    f = prep.first
    graph = prep.model.graph
    members = set(region.nodes)
    nodes = [copy.deepcopy(f.kept[i]) for i in region.nodes]
    produced = [o for n in nodes for o in n.output if o]
    produced_set = set(produced)
    read_outside = {o.name for o in graph.output}
    # a reader outside the region counts if it stays live once the region is replaced (the rewrite reads the
    # region's data inputs, not the constants folded into it), or was dead already (the splice keeps the user's
    # dead nodes); shape chains that only fed the region's nodes are dropped with them
    runtime = {x for i in region.nodes for x in runtime_inputs(prep, i)}  # dim-dependent values read as data
    data_in = {x for n in nodes for x in n.input
               if x and x not in produced_set and (x not in f.consts or x in runtime)}
    live_before, live_after = live_nodes(graph), live_nodes(graph, members, data_in)
    for i, n in enumerate(graph.node):
        if i not in members and (i in live_after or i not in live_before):
            read_outside.update(node_reads(n))
    outputs = [o for o in produced if o in read_outside]
    if not outputs:
        return None
    producer = {o: n for n in graph.node for o in n.output if o}
    for x in sorted(runtime):
        chain = position_table(prep, x, producer)
        if chain is not None:  # the table's own nodes join the region (their outputs stay internal to it)
            table_nodes, frontier = chain
            nodes = table_nodes + nodes
            produced_set.update(o for n in table_nodes for o in n.output)
            runtime.add(frontier)
    for x in sorted(data_in - runtime):  # a table computed at run time (gathered by position): the first step of
        chain = _pairs_axis(prep, x, producer)  # its repeat in place, if the partition left it out
        if chain is not None and all(n.op_type == "Expand" for n in nodes if x in n.input):
            nodes = chain[0] + nodes
            produced_set.update(o for n in chain[0] for o in n.output)
    inputs, inits, seen = [], [], set()
    refs = {t.name: t for t in weights.references(prep.model)}  # weights kept out of the model stay so in the region
    for n in nodes:
        for x in n.input:
            if not x or x in seen or x in produced_set:
                continue
            seen.add(x)
            if x in f.consts and x not in runtime:
                inits.append(numpy_helper.from_array(np.asarray(f.consts[x]), x))
            elif x in refs:
                inits.append(refs[x])
            else:
                inputs.append(x)
    g = helper.make_graph(nodes, f"region{region.index}", [helper.make_value_info(x, f.types[x]) for x in inputs],
                          [helper.make_value_info(o, f.types[o]) for o in outputs], inits)
    model = helper.make_model(g, opset_imports=list(prep.model.opset_import), ir_version=prep.model.ir_version)
    return RegionModel(region, model, inputs, outputs, prep.symbolic, _fixed_ones(prep, inputs), prep.opset_ceiling)


TABLE_STEPS = ("Unsqueeze", "Cos", "Sin", "Mul")  # from a rotary table back to cat(freqs, freqs) or its interleave


def _same_at_every_binding(prep: Prepared, name: str) -> bool:
    """Whether `name` folds to one value at every binding (a constant of the model, not of a symbolic dim)."""
    values = [f.consts.get(name) for f in prep.folded]
    return all(v is not None for v in values) and all(
        np.shape(v) == np.shape(values[0]) and np.array_equal(v, values[0]) for v in values[1:])


def position_table(prep: Prepared, name: str, producer: dict[str, onnx.NodeProto]
                   ) -> Optional[tuple[list[onnx.NodeProto], str]]:
    """(the nodes computing `name` from cat(t, t) on the last axis, or from t's entries each repeated twice in place
    (`_interleave`), t) where `name` is a table of a symbolic dim (a rotary embedding's cos or sin:
    Unsqueeze(Cos(Concat(freqs, freqs))), maybe scaled by a constant; or the interleave of any table, such as
    GPT-J's halves gathered from its sin/cos cache by position), else None. A region reading the table reads t
    instead and computes the rest itself, so that the rules see the two equal halves the fused rotary takes (the
    table itself folds to a different constant at each binding and is never a region's node). `producer`: the
    user's graph's tensor -> the node writing it."""
    chain: list[onnx.NodeProto] = []
    node = producer.get(name)
    while node is not None and node.op_type in TABLE_STEPS and len(chain) < 6:
        if node.op_type == "Mul":
            rest = [x for x in node.input if not _same_at_every_binding(prep, x)]
            if len(rest) != 1 or any(np.size(prep.first.consts[x]) != 1 for x in node.input if x not in rest):
                return None
            nxt = rest[0]
        else:
            nxt = node.input[0]
            if any(not _same_at_every_binding(prep, x) for x in node.input[1:] if x):
                return None
        chain.append(copy.deepcopy(node))
        node = producer.get(nxt)
    table = prep.first.types.get(name)
    if node is None or table is None or not table.HasField("tensor_type"):
        return None
    dims = [d.dim_value for d in table.tensor_type.shape.dim]
    for step in chain:  # the frontier's shape, read back from the table's: each Unsqueeze's axes dropped
        if step.op_type == "Unsqueeze":
            listed = prep.first.consts[step.input[1]] if len(step.input) > 1 else \
                next((list(a.ints) for a in step.attribute if a.name == "axes"), [])  # an attribute before opset 13
            axes = {int(a) % len(dims) for a in np.asarray(listed).reshape(-1)}
            dims = [d for k, d in enumerate(dims) if k not in axes]
    if not dims or 0 in dims or dims[-1] % 2:
        return None
    frontier = onnx.helper.make_tensor_type_proto(table.tensor_type.elem_type, dims[:-1] + [dims[-1] // 2])
    interleaved = _interleave(prep, node, producer, dims)
    if interleaved is not None:  # an interleaved rotary's table: repeat_interleave(freqs, 2) (Cohere, GPT-J)
        steps, freqs, added = interleaved  # (the axes the repeat's Unsqueeze adds besides its own: GPT-J's heads)
        half = [d for k, d in enumerate(dims[:-1]) if k not in added] + [dims[-1] // 2]
        known = prep.first.types.get(freqs)
        if known is not None and known.HasField("tensor_type") and \
                [d.dim_value for d in known.tensor_type.shape.dim] != half:
            return None  # the reshape merged more than the repeat's two axes
        prep.first.types.setdefault(freqs, onnx.helper.make_tensor_type_proto(table.tensor_type.elem_type, half))
        return steps + chain[::-1], freqs
    axis = next((a.i for a in node.attribute if a.name == "axis"), None)
    if node.op_type != "Concat" or len(node.input) != 2 or node.input[0] != node.input[1] \
            or axis not in (-1, len(dims) - 1) or not any(o.op_type in ("Cos", "Sin") for o in chain):
        return None
    prep.first.types.setdefault(node.input[0], frontier)
    return [copy.deepcopy(node)] + chain[::-1], node.input[0]


def _pairs_axis(prep: Prepared, name: str, producer: dict[str, onnx.NodeProto]
                ) -> Optional[tuple[list[onnx.NodeProto], str]]:
    """([Unsqueeze], t) where `name` is Unsqueeze(t, axes) adding a last axis of 1 (and maybe others): the first step
    of a table's repeat in place (`_interleave`) when the partition left that Unsqueeze out of the region (TVM
    writes an Unsqueeze of several axes back as several nodes) and the region computes the rest of the repeat
    (`region_model` checks that an Expand reads it); the region reads t, so that the rules see the half table;
    else None."""
    unsq = producer.get(name)
    out, half = prep.first.types.get(name), prep.first.types.get(unsq.input[0]) if unsq is not None else None
    if unsq is None or unsq.op_type != "Unsqueeze" or len(unsq.input) < 2 or out is None or half is None \
            or not out.HasField("tensor_type") or not half.HasField("tensor_type"):
        return None
    axes, dims = _model_const(prep, unsq.input[1]), [d.dim_value for d in out.tensor_type.shape.dim]
    if axes is None or len(dims) < 3 or dims[-1] != 1:
        return None
    rank = len(dims)
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if not all(-rank <= a < rank for a in axes) or rank - 1 not in {a % rank for a in axes}:
        return None
    return [copy.deepcopy(unsq)], unsq.input[0]


def _model_const(prep: Prepared, name: str) -> Optional[np.ndarray]:
    """A constant of the user's model (an initializer or a Constant node's value) that the folding at the first
    binding may have dropped (the nodes reading it folded away), put back among that binding's constants."""
    if name in prep.first.consts:
        return prep.first.consts[name]
    if any(name in f.consts for f in prep.folded):
        return None  # folded at another binding only: a value of a symbolic dim
    g = prep.model.graph
    value = next((numpy_helper.to_array(t) for t in g.initializer if t.name == name and not weights.is_reference(t)),
                 None)
    for n in g.node:
        if value is None and n.op_type == "Constant" and list(n.output) == [name] and n.attribute \
                and n.attribute[0].name == "value":
            value = numpy_helper.to_array(n.attribute[0].t)
    if value is not None:
        prep.first.consts[name] = value
    return value


def _interleave(prep: Prepared, node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], dims: list[int]
                ) -> Optional[tuple[list[onnx.NodeProto], str, set]]:
    """([Unsqueeze, Expand, Reshape], t, the axes of `dims` the Unsqueeze adds besides the last) where `node` (of
    shape `dims`) is Reshape(Expand(Unsqueeze(t, [-1] or [k, .., -1]), [1, ..., 1, 2])) merging the last two axes:
    t's every entry repeated twice in place (torch's repeat_interleave(t, 2, -1)), the table of an interleaved
    rotary embedding (GPT-J's unsqueezes its heads axis in the same node: `repeat_interleave(sin[:, :, None, :],
    2, 3)`); else None."""
    if node.op_type != "Reshape":
        return None
    expand = producer.get(node.input[0])
    if expand is None or expand.op_type != "Expand":
        return None
    unsq = producer.get(expand.input[0])
    if unsq is None or unsq.op_type != "Unsqueeze" or len(unsq.input) < 2:
        return None
    shape, axes = _model_const(prep, expand.input[1]), _model_const(prep, unsq.input[1])
    if shape is None or axes is None:
        return None
    shape = [int(v) for v in np.asarray(shape).reshape(-1)]
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = len(dims) + 1  # the Unsqueeze's output: the table's axes and the repeat's
    added = {a % rank for a in axes} if all(-rank <= a < rank for a in axes) else set()
    if len(dims) < 2 or shape[-1:] != [2] or any(v != 1 for v in shape[:-1]) or len(shape) > rank \
            or len(added) != len(axes) or rank - 1 not in added:
        return None
    merge = copy.deepcopy(node)  # its shape as at this binding (the region's shapes are; the export writes them
    merge.input[1] = f"{node.output[0]}__shape"  # relative to the symbolic dims)
    prep.first.consts.setdefault(merge.input[1], np.asarray(dims, np.int64))
    return [copy.deepcopy(unsq), copy.deepcopy(expand), merge], unsq.input[0], added - {rank - 1}


def _fixed_ones(prep: Prepared, names: list[str]) -> tuple:
    """The names among `names` with an axis of 1 at every binding of a symbolic model (they may broadcast
    against tensors whose dim there is symbolic, whatever one binding's equal shapes say)."""
    if not prep.symbolic:
        return ()
    out = []
    for x in names:
        shapes = [[d.dim_value for d in f.types[x].tensor_type.shape.dim] if x in f.types else None
                  for f in prep.folded]
        if all(s is not None for s in shapes) and len({len(s) for s in shapes}) == 1 and \
                any(all(s[a] == 1 for s in shapes) for a in range(len(shapes[0]))):
            out.append(x)
    return tuple(out)


def relax_boundary(model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> onnx.ModelProto:
    """A copy whose graph inputs and outputs take the user's (possibly symbolic) types and that carries no
    value_info, so that it runs at any binding of the symbolic dims."""
    m = copy.deepcopy(model)
    del m.graph.value_info[:]
    for vi in list(m.graph.input) + list(m.graph.output):
        t = types.get(vi.name)
        if t is not None and t.HasField("tensor_type"):
            vi.type.CopyFrom(t)
        else:
            vi.type.tensor_type.ClearField("shape")
    return m


def _fused_calls(mod: Any) -> set[str]:
    """The fused operators the Relax module calls (its functions lowered from them)."""
    return {found[0] for _, func in mod.functions.items() if (found := composite_attrs(func)) is not None}


def _ops_and_weights(model: onnx.ModelProto) -> tuple:
    """The operators and constants a model uses, as multisets (constants by type, shape and digest): equal for a
    rewrite that ONNX cannot tell from the original (keeping the original then is always right)."""
    import hashlib

    ops = sorted(f"{n.domain}/{n.op_type}" for n in model.graph.node)
    consts = []
    for t in model.graph.initializer:
        arr = np.ascontiguousarray(weights.array(t))
        consts.append((str(arr.dtype), arr.shape, hashlib.sha1(memoryview(arr.reshape(-1)).cast("B")).digest()))
    return ops, sorted(consts)


def search_region(rm: RegionModel, settings: dict[str, Any]) -> tuple[Optional[onnx.ModelProto], Any]:
    """Import the region into Relax, run the TASO pass on it (costed for ONNX Runtime unless told otherwise) and
    export the result at the model's opset; (None, report) when the search applied no rule."""
    from ..onnx_io import load_onnx
    from ..onnx_io.export import export_relax
    from ..memory import trim
    from ..relay_pass.taso_pass import TasoOptimize

    with quiet():
        mod = load_onnx(rm.model, fold_constants=False)
    rules, reachable = settings.get("rules"), max(rm.opset_ceiling, default_opset(rm.model))
    if isinstance(rules, RuleSet) and below_opset(reachable):
        # fused operators that would be written as their decomposition (ONNX 23's Attention): no candidate to offer
        settings = dict(settings, rules=without_ops(rules, below_opset(reachable)))
    standard_ops = bool(settings.pop("standard_ops", False))
    p = TasoOptimize(runtime="onnx", standard_ops=standard_ops, **settings)
    new_mod = p(mod)
    tot = p.report.total
    if tot is None or not tot.rules_applied:
        del mod, new_mod
        trim()
        return None, p.report
    opset = default_opset(rm.model)
    need = fused_opset(_fused_calls(new_mod), standard_ops)
    if opset < need <= rm.opset_ceiling:
        opset = need  # ONNX 23's Attention: the model is written at that opset (`splice` raises it)
    # a model whose weights are kept out of it (`weights`): so are the exports', the weights the rewrite left as
    # they were referred to where they are, the others copied once (from the Relax constants, into the store)
    keep = weights.keep_out(rm.model) if weights.has_references(rm.model) else None
    with quiet():
        out = export_relax(new_mod, opset=opset, input_names=rm.inputs, output_names=rm.outputs,
                           standard_ops=standard_ops, relative_reshape="trailing" if rm.symbolic else False, initializer=keep,
                           broadcast_inputs=rm.broadcast_inputs)
        del new_mod
        same = export_relax(mod, opset=opset, input_names=rm.inputs, output_names=rm.outputs,
                            relative_reshape="trailing" if rm.symbolic else False, initializer=keep, broadcast_inputs=rm.broadcast_inputs)
    del mod
    report = p.report
    del p
    trim()  # the Relax modules' constants (a copy of the region's weights, and more) go now, not at some later gc
    unchanged = _ops_and_weights(out) == _ops_and_weights(same)  # e.g. conv+relu fused, written as Conv + Relu
    weights.forget(same)
    if unchanged:
        weights.forget(out)
        return None, report
    return out, report
