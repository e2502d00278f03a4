"""Never behind onnxsim: what the preparation folds to the same constant at both bindings of the symbolic dims is
written folded.

`prepare` folds each working copy with onnxsim; a tensor that the user's nodes compute, that no node of either
working copy still computes and that is the same constant at both bindings, and at two more that keep no two dims in
their ratio nor their order (`skewed_bindings`: the two scale every dim alike, and FCOS's resize to a fixed short
side gives the same sizes for every square image), depends on no symbolic dim (a position table sliced to a fixed
length, a mask constant, a shape built from static dims). The written model takes it as an initializer, and the
nodes that computed only it go. Everything else stays as the user had it; the driver checks the result at both
bindings and times it like any rewrite.
"""
from __future__ import annotations

import copy
import logging

import numpy as np
import onnx
from onnx import numpy_helper

from .onnx_graph import live_nodes, producers
from .prepare import Prepared, fold_at, skewed_bindings

log = logging.getLogger(__name__)

MAX_FOLDED_BYTES = 64 << 20  # a folded tensor larger than this stays computed (a model should not grow much)


def binding_independent_constants(prep: Prepared) -> dict[str, np.ndarray]:
    """{tensor: value} for the tensors the user's nodes compute that folding turned into the same constant at every
    binding (only those some kept node reads, i.e. the boundaries of what was folded)."""
    prod = producers(prep.model.graph)
    graph_outputs = {o.name for o in prep.model.graph.output}
    out: dict[str, np.ndarray] = {}
    for name, value in prep.first.consts.items():
        p = prod.get(name)
        if p is None or name in graph_outputs or any(p in f.kept for f in prep.folded):
            continue  # an initializer of the user's, an output, or still computed at some binding
        if prep.model.graph.node[p].op_type == "Constant" or value.nbytes > MAX_FOLDED_BYTES:
            continue
        if all(_same(f.consts.get(name), value) for f in prep.folded[1:]):
            out[name] = value
    folded = [f.binding.dims for f in prep.folded]  # (the driver's second binding is the first skew, if any)
    for skew in (b for b in skewed_bindings(prep.first.binding, prep.model) if b.dims not in folded) if out else ():
        f, ok = fold_at(prep.model, skew)  # the bindings scale every dim alike: a value of their ratio is the same
        kept = {k: v for k, v in out.items() if ok and _same(f.consts.get(k), v)}
        if len(kept) < len(out):
            log.info("%d value(s) folded alike at both bindings differ at %s: computed as the model does",
                     len(out) - len(kept), skew.label())
        out = kept
    return out


def _same(a, b: np.ndarray) -> bool:
    return a is not None and a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def fold_into(model: onnx.ModelProto, consts: dict[str, np.ndarray]) -> tuple[onnx.ModelProto, int]:
    """(a copy of `model` with these tensors as initializers where its nodes compute them, and the nodes that then
    feed nothing removed; how many nodes went); `model` itself when nothing applies."""
    g = model.graph
    produced = {o for n in g.node for o in n.output if o}
    use = {k: v for k, v in consts.items() if k in produced}
    if not use:
        return model, 0
    out = copy.deepcopy(model)
    og = out.graph
    prod = producers(og)
    for name, value in use.items():
        node = og.node[prod[name]]
        node.output[list(node.output).index(name)] = ""  # the node no longer defines it
        og.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    live_before = live_nodes(g)
    live_after = live_nodes(og)
    keep = [n for i, n in enumerate(og.node) if i in live_after or (i not in live_before and any(n.output))]
    gone = len(og.node) - len(keep)
    del og.node[:]
    og.node.extend(keep)
    defined = {o for n in og.node for o in n.output if o}
    read = {x for n in og.node for x in n.input} | {o.name for o in og.output}
    inits = [t for t in og.initializer if t.name in read or t.name not in use]
    del og.initializer[:]
    og.initializer.extend(inits)
    vis = [vi for vi in og.value_info if vi.name in defined]
    del og.value_info[:]
    og.value_info.extend(vis)
    log.info("%d tensor(s) folded to constants, %d node(s) removed", len(use), gone)
    return out, gone


__all__ = ["binding_independent_constants", "fold_into"]
