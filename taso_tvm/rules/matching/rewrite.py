"""Apply a match: build the rule's target pattern in the graph (equal constants shared as one weight node) and replace
the matched source tensors with it; None when the target does not build, would create a cycle, or a tensor the match
removes is used outside it.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any, Optional

import numpy as np

from ...graph import CycleError, GraphError, TensorGraph, TensorRef
from ..language import expr as E
from ..language.rule import ArgRef, Rule
from .matcher import GraphIndex, Match, MatchEnv, _compiled, _removable, graph_index

log = logging.getLogger(__name__)


class TypeMismatch(GraphError):
    """The target builds but a replacement tensor's type differs from the tensor it replaces."""


# ---------------------------------------------------------------- apply
_SHARED_CONSTS: dict = {}  # (id, dtype) of a read-only array -> (array, converted array, key)


def _const_weight(store, value: Any, dtype: str):
    shared = isinstance(value, np.ndarray) and not value.flags.writeable  # e.g. a cached identity_kernel()
    hit = _SHARED_CONSTS.get((id(value), dtype)) if shared else None
    if hit is not None and hit[0] is value:
        return store.weight(hit[1], key=hit[2])
    arr = np.ascontiguousarray(value, dtype=dtype)
    digest = hashlib.blake2b(arr.tobytes(), digest_size=20).hexdigest()  # equal constants share one node
    key = f"const:{arr.dtype}:{arr.shape}:{digest}"
    if shared:
        arr.flags.writeable = False
        if len(_SHARED_CONSTS) > 256:
            _SHARED_CONSTS.clear()
        _SHARED_CONSTS[(id(value), dtype)] = (value, arr, key)  # holding `value` keeps its id unique
    return store.weight(arr, key=key)


def build_target(rule: Rule, graph: TensorGraph, match: Match, index: Optional[GraphIndex] = None) -> dict:
    """Create the target's nodes; return {replaced source tensor: new tensor}. Raises GraphError if not applicable."""
    store = graph.store
    index = index or graph_index(graph)
    built: dict[int, list] = {}
    names: dict[str, TensorRef] = {}
    env = MatchEnv(match, index, names)

    def ref_of(a: ArgRef) -> TensorRef:
        if a.kind == "node":
            return built[a.node][a.out]
        return match.tensors[a.name]

    for p in rule.target:
        args = [ref_of(a) for a in p.args]
        try:
            if p.op == "const":
                dtype = store.type(args[0]).dtype if args else "float32"
                outs = [_const_weight(store, E.evaluate(p.attrs["value"].value, env), dtype)]
            else:
                attrs = dict(match.splats.get(p.splat, {})) if p.splat else {}
                for k, spec in p.attrs.items():
                    attrs[k] = spec.value if spec.kind == "const" else E.evaluate(
                        spec.value if spec.kind == "expr" else E.Name(spec.value), env)
                outs = store.add(p.op, args, **attrs)
        except E.ExprError as err:
            raise GraphError(f"rule {rule.name}: {err}") from None
        if len(outs) != p.n_outputs:
            raise GraphError(f"rule {rule.name}: {p.op} gave {len(outs)} outputs, pattern names {p.n_outputs}")
        built[p.index] = outs
        for k, n in enumerate(p.names):
            if n is not None:
                names[n] = outs[k]
    mapping = {}
    for o in rule.outputs:
        old = match.tensors[o]
        new = ref_of(rule.tgt_outputs[o])
        if store.type(old) != store.type(new):
            raise TypeMismatch(f"rule {rule.name}: output {o} would change type {store.type(old)} -> "
                             f"{store.type(new)}")
        if old != new:
            mapping[old] = new
    return mapping


def apply_match(rule: Rule, graph: TensorGraph, match: Match) -> Optional[TensorGraph]:
    """The graph with the match rewritten, or None when the target does not build or would create a cycle."""
    try:
        index = graph_index(graph)
        if any(nid >= len(index.nodes) or index.nodes[nid].op != rule.source[i].op for i, nid in match.nodes.items()):
            raise GraphError("the match is not a match of this rule")
        if not _removable(_compiled(rule), match, index):
            log.debug("rule %s not applied: a tensor it removes is used outside the match", rule.name)
            return None
        mapping = build_target(rule, graph, match, index)
        return graph.replace(mapping)
    except CycleError as err:
        log.debug("rule %s not applied: %s", rule.name, err)
        return None
    except GraphError as err:
        log.debug("rule %s not applicable: %s", rule.name, err)
        return None
