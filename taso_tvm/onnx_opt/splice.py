"""Put optimized regions back into the user's model: every node, initializer, input, output, opset import and
metadata entry outside the regions is copied as it was; each region's nodes give way to its optimized nodes
(their internal names prefixed so they cannot collide); nodes and initializers that only fed the replaced nodes
are dropped."""
from __future__ import annotations

import copy
from typing import Sequence

import onnx

from .onnx_graph import DEFAULT_DOMAINS, live_nodes, topo_order, used_names

PREFIX = "taso_r{}_"


def _renamed(region: onnx.ModelProto, prefix: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The region's nodes and initializers with every name not on its boundary prefixed."""
    g = region.graph
    boundary = {i.name for i in g.input} | {o.name for o in g.output}
    inits = {i.name for i in g.initializer}
    boundary -= inits

    def name(x: str) -> str:
        return x if (not x or x in boundary) else prefix + x

    nodes = []
    for k, n in enumerate(g.node):
        m = copy.deepcopy(n)
        m.name = f"{prefix}{n.name or n.op_type + str(k)}"
        m.input[:] = [name(x) for x in n.input]
        m.output[:] = [name(x) for x in n.output]
        nodes.append(m)
    tensors = []
    for t in g.initializer:
        c = copy.deepcopy(t)
        c.name = name(t.name)
        tensors.append(c)
    return nodes, tensors


def splice(model: onnx.ModelProto, replacements: Sequence[tuple[Sequence[int], onnx.ModelProto, str]]
           ) -> onnx.ModelProto:
    """`model` with, for each (node indices, optimized region, prefix), those nodes replaced by the region's."""
    out = copy.deepcopy(model)
    g = out.graph
    live_before = live_nodes(model.graph)
    used_before = used_names(model.graph)
    gone = {i for idx, _, _ in replacements for i in idx}
    anchor = {max(idx): k for k, (idx, _, _) in enumerate(replacements)}
    parts = [_renamed(region, prefix) for _, region, prefix in replacements]
    nodes: list[onnx.NodeProto] = []
    origin: list[int] = []  # the user's node index, or -1 for a region's node
    new_inits: list[onnx.TensorProto] = []
    for i, n in enumerate(model.graph.node):
        if i not in gone:
            nodes.append(n)
            origin.append(i)
        if i in anchor:
            r_nodes, r_inits = parts[anchor[i]]
            nodes.extend(r_nodes)
            origin.extend([-1] * len(r_nodes))
            new_inits.extend(r_inits)
    # drop what only the replaced nodes needed (what was dead before stays, as the user had it), then order
    del g.node[:]
    g.node.extend(nodes)
    live_after = live_nodes(g)
    keep = [k for k in range(len(nodes)) if k in live_after or (origin[k] >= 0 and origin[k] not in live_before)]
    nodes, origin = [nodes[k] for k in keep], [origin[k] for k in keep]
    available = [i.name for i in g.input] + [i.name for i in g.initializer] + [t.name for t in new_inits]
    order = topo_order(nodes, available)
    del g.node[:]
    g.node.extend(nodes[k] for k in order)
    g.initializer.extend(new_inits)
    used_after = used_names(g)
    kept_inits = [t for t in g.initializer if t.name in used_after or t.name not in used_before]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    have = {o.domain: o for o in out.opset_import}
    for _, region, _ in replacements:  # a region may use the runtime's fused operators (com.microsoft)
        for o in region.opset_import:
            if o.domain not in have and any(n.domain == o.domain for n in g.node):
                out.opset_import.append(copy.deepcopy(o))
                have[o.domain] = out.opset_import[-1]
            elif o.domain in DEFAULT_DOMAINS and o.domain in have and o.version > have[o.domain].version:
                have[o.domain].version = o.version  # written at a newer opset (ONNX's Attention): the region's
                # exporter was allowed it (`onnx_graph.can_raise_opset`)
    init_names = {t.name for t in g.initializer}
    dropped = {t.name for t in model.graph.initializer} - init_names
    for vi in [vi for vi in g.input if vi.name in dropped]:
        g.input.remove(vi)
    defined = {o for n in g.node for o in n.output} | {i.name for i in g.input} | init_names
    vis = [vi for vi in g.value_info if vi.name in defined]
    del g.value_info[:]
    g.value_info.extend(vis)
    return out
