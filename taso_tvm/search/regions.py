"""Split a large graph into regions searched one at a time (MetaFlow's idea), so search time grows about
linearly with model size, then splice each region's best rewrite back.

A region is a run of consecutive operators in topological order. Its inputs produced outside it become
placeholder inputs (weights, and values computed from weights alone, stay as they are, so rules that need a weight
still see one); its outputs are the tensors used after it. A second pass with boundaries shifted by half a region
catches patterns that straddle a cut; a graph that does not repeat and that two regions would cover (one decoder
layer) is searched whole.

A graph that repeats itself (the layers of a transformer) is cut at whole periods, so that its regions repeat too; a
region structurally identical to one searched before (same operators, attributes, types and wiring, same values of
its tiny constants) is not searched again: the earlier result is replayed on its own inputs and weights.
"""
from __future__ import annotations

import copy
import logging
import math
from typing import Callable, Optional

import numpy as np

from ..graph import TensorGraph, weight_array
from .stop import StopReason

log = logging.getLogger(__name__)

PLACEHOLDER = "__region_in"
MIN_PERIOD = 4  # operators: a shorter repeat (an alternating chain) is not a layer
PERIOD_SHARE = 0.6  # a period must match at least this share of the operators it can compare
SMALL_CONSTANT = 64  # elements: constants up to this size are part of a region's identity (rules and costs read them)
WHOLE_REGIONS = 2  # a graph that does not repeat and that at most this many runs would cut is searched whole


def _region_graph(graph: TensorGraph, members: set, context: frozenset = frozenset()
                  ) -> tuple[TensorGraph, dict, list]:
    """(subgraph over placeholders, placeholder ref -> real ref, the region's output refs in the full graph);
    the values of `context` are read as they are (`shared_context`)."""
    store = graph.store
    cons = graph.consumers()
    order = [n for n in graph.topo_order() if n.id in members]
    boundary: dict = {}
    weights = graph.weight_only_ids()  # (cached on the graph)
    for n in order:
        for ref in n.inputs:
            # a weight, or a value computed from weights alone (a scale folded into a projection's weight), comes
            # into the region as it is: rules that need a weight must see one, whichever region computed it; so
            # does shared context (a rotary table: every layer's rules read its form)
            if ref[0] not in members and ref not in boundary and ref[0] not in weights \
                    and ref[0] not in context and store.nodes[ref[0]].op != "weight":
                boundary[ref] = store.input(f"{PLACEHOLDER}{ref[0]}_{ref[1]}", store.type(ref))
    outputs = []
    for n in order:
        for ref in n.outputs:
            users = cons.get(ref, [])
            if any(u < 0 or u not in members for u, _ in users):
                outputs.append(ref)
    if not outputs:
        return graph, {}, []
    sub = TensorGraph(store, outputs).replace(boundary)
    return sub, {v: k for k, v in boundary.items()}, outputs


CONTEXT_OPS = 8  # operators: a value computed by at most this many from the graph's inputs is read as it is


def shared_context(graph: TensorGraph, runs: list[set]) -> frozenset:
    """Ids of the computation nodes whose value at most CONTEXT_OPS operators compute from the graph's inputs and
    weights (themselves included) and that operators of two or more runs read (not one run's output passed to the
    next): a decoder's rotary tables, computed once and read by every layer. Each region reads them as they are,
    with the operators computing them."""
    small = _input_closures(graph)
    if not small:
        return frozenset()
    owner = {i: k for k, run in enumerate(runs) for i in run}
    readers: dict[int, set] = {}
    for n in graph.ops():
        for i, _ in n.inputs:
            if i in small and n.id in owner:
                readers.setdefault(i, set()).add(owner[n.id])
    shared = {i for i, r in readers.items() if len(r) >= 2}
    return frozenset(j for i in shared for j in small[i])


def _input_closures(graph: TensorGraph) -> dict[int, frozenset]:
    """{id: the computation nodes computing it} for the nodes that at most CONTEXT_OPS operators compute from the
    graph's inputs and weights (themselves included)."""
    store = graph.store
    closure: dict[int, Optional[frozenset]] = {}
    for n in graph.topo_order():
        if n.op in ("input", "weight"):
            closure[n.id] = frozenset()
            continue
        acc: Optional[set] = {n.id}
        for i, _ in n.inputs:
            up = closure.get(i, frozenset() if store.nodes[i].op in ("input", "weight") else None)
            if up is None:
                acc = None
                break
            acc |= up
            if len(acc) > CONTEXT_OPS:
                acc = None
                break
        closure[n.id] = None if acc is None else frozenset(acc)
    return {i: c for i, c in closure.items() if c}


def _prologue(graph: TensorGraph) -> set:
    """Ids of the nodes computing the values that a few operators compute from the graph's inputs and small
    constants alone (`_input_closures`; no large weight read, so not an embedding lookup and what follows it) and
    that two or more operators outside such values read: a decoder's rotary tables and its mask, read by every
    layer."""
    small = _input_closures(graph)
    store, cons = graph.store, graph.consumers()

    def light(closure: frozenset) -> bool:
        return all(store.nodes[i].op != "weight" or math.prod(store.type((i, j)).shape) <= SMALL_CONSTANT
                   for n in closure for i, j in store.nodes[n].inputs)

    out: set = set()
    for i, closure in small.items():
        readers = {u for ref in graph.node(i).outputs for u, _ in cons.get(ref, ()) if u >= 0 and u not in small}
        if len(readers) >= 2 and light(closure):
            out |= closure
    return out


def run_order(graph: TensorGraph) -> list[int]:
    """The operators in the order `regions` looks for a repeat in when the graph's own order shows none: the
    prologue (`_prologue`) first, then the others as a depth-first walk from the outputs reaches them (inputs in
    argument order, each node after its inputs). A topological order that depends on the graph's wiring alone, not
    on the order rewrites created its nodes in, so that two identical layers list their operators alike wherever
    the tables both read were computed."""
    ops = [n.id for n in graph.ops()]
    is_op = set(ops)
    first = _prologue(graph)
    order = [i for i in ops if i in first]
    done = set(order)
    for out, _ in graph.outputs:
        stack = [(out, False)]
        while stack:
            nid, expanded = stack.pop()
            if nid in done or nid not in is_op:
                continue
            if expanded:
                done.add(nid)
                order.append(nid)
                continue
            stack.append((nid, True))
            for i, _ in reversed(graph.node(nid).inputs):
                if i not in done and i in is_op:
                    stack.append((i, False))
    order += [i for i in ops if i not in done]  # (none: every operator reaches an output)
    return order


def _op_keys(graph: TensorGraph, ordered: bool = False) -> tuple[list[int], list]:
    """The operator ids in topological order (`ordered`: in `run_order`) and, per operator, a small int naming its
    kind (op, attributes, types): equal ints, equal operators up to their inputs."""
    store = graph.store
    ids, keys, names = [], [], {}
    for nid in run_order(graph) if ordered else (n.id for n in graph.ops()):
        n = graph.node(nid)
        ids.append(n.id)
        keys.append(names.setdefault((n.op, store.attr_items(n), n.types), len(names)))
    return ids, keys


def period(keys: list, size: int) -> tuple[int, int]:
    """(p, start): the shortest repeat p (MIN_PERIOD <= p <= size) of the operator kinds, matching at least
    PERIOD_SHARE of the positions it compares, and the first position from which it repeats a whole period;
    (0, 0) when the sequence does not repeat."""
    n = len(keys)
    for p in range(MIN_PERIOD, min(size, n // 2) + 1):
        same = [keys[i] == keys[i + p] for i in range(n - p)]
        if sum(same) < PERIOD_SHARE * (n - p):
            continue
        run = 0
        for i, s in enumerate(same):
            run = run + 1 if s else 0
            if run == p:
                return p, i - p + 1
    return 0, 0


def _narrowest_cut(graph: TensorGraph, ops: list, start: int, p: int) -> int:
    """The phase in [start, start + p) whose cuts (before that operator, and whole periods after it) are crossed by
    the fewest tensors computed at run time (weights and values of weights alone cost nothing): between two layers
    of a transformer only the residual stream (and a mask read by every layer) crosses, while a cut inside a layer
    also cuts its attention's projections from their product, a pattern no region then holds whole."""
    pos = {nid: i for i, nid in enumerate(ops)}
    weights = graph.weight_only_ids()
    reads: dict = {}  # a run-time tensor -> (its producer's position, its first and last readers', its readers)
    for i, nid in enumerate(ops):
        for ref in graph.node(nid).inputs:
            j = pos.get(ref[0])
            if j is not None and ref[0] not in weights:
                _, first, last, n = reads.get(ref, (j, i, i, 0))
                reads[ref] = (j, min(i, first), max(i, last), n + 1)
    def cut_key(c: int) -> tuple:
        crossing = [(f, n) for j, f, k, n in reads.values() if j < c <= k]
        # fewest tensors whose readers the cut parts (matmuls sharing an input, which a merge needs together), then
        # fewest tensors, then fewest read once (a tensor with one reader is inside a chain: an add and its layer
        # norm, a fusion's pattern; one read by several is where a layer hands over: the residual stream)
        return sum(1 for f, _ in crossing if f < c), len(crossing), sum(1 for _, n in crossing if n == 1)

    best, best_key = start, None
    end = min(start + p, len(ops))
    # each phase judged a few periods in, where every layer looks alike (near the graph's inputs fewer tensors cross
    # anywhere), and every phase on as many periods: a sum over fewer cuts (a late phase's third falling past the
    # graph's end) is not a narrower cut (Qwen2's decode step was cut inside its attention for that)
    reach = min(3, (len(ops) - end) // p)
    for c in range(start, end):
        at = [c + m * p for m in range(1, reach + 1)] or [c]
        key = tuple(map(sum, zip(*(cut_key(q) for q in at))))
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best


def regions(graph: TensorGraph, size: int, offset: int = 0) -> list[set]:
    """Consecutive runs of `size` operators (the first run `offset` shorter when offset > 0); one run, the whole
    graph, where at most WHOLE_REGIONS would cut it. A repeating graph (`period`, in the graph's topological order,
    else in `run_order`) is cut at whole periods instead: runs of as many periods as fit in `size`, cut where the
    fewest tensors cross within the first period (`_narrowest_cut`: between layers; `offset` > 0: shifted by half
    a run)."""
    weights = graph.weight_only_ids()
    for ordered in (False, True):
        ops, keys = _op_keys(graph, ordered)
        live = [i for i, nid in enumerate(ops) if nid not in weights]  # the repeat is in what runs: values of
        p, start = period([keys[i] for i in live], size)  # weights alone (a scale folded into each layer's weight)
        if p:  # are ordered wherever the topological order puts them, often all in the first layer
            run = p * max(1, size // p)
            phase = (_narrowest_cut(graph, [ops[i] for i in live], start, p) + (run // 2 if offset else 0)) % run
            cuts = [live[c] for c in range(phase, len(live), run) if c > 0]
            break
    else:  # no layers: a graph of a few runs' size (one decoder layer) is one run, for its cuts would part
        ops, _ = _op_keys(graph)  # patterns no run then holds whole (its q and k projections from their rotary)
        cuts = [] if len(ops) <= WHOLE_REGIONS * size else list(range(offset if offset else size, len(ops), size))
    bounds = [0] + cuts + [len(ops)]
    return [set(ops[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def shape_key(graph: TensorGraph) -> Optional[tuple]:
    """The graph's structure with its nodes numbered in topological order and its leaves in the order the
    operators first read them: operators, attributes, types and wiring; inputs and weights by type (a weight of up
    to SMALL_CONSTANT elements also by value). Two graphs with equal keys differ only in their inputs' names and
    their larger weights' values. None for a graph with an opaque node (its expression is not compared)."""
    return _canonical(graph)[0]


def _canonical(graph: TensorGraph) -> tuple[Optional[tuple], list]:
    """(`shape_key`, the leaves as refs in the key's order)."""
    store = graph.store
    index: dict[int, int] = {}
    items: list = []
    leaves: list = []

    def number(nid: int) -> int:
        if nid not in index:  # a leaf: numbered where it is first read
            n = store.nodes[nid]
            index[nid] = len(index)
            leaves.append(n.outputs[0])
            items.append(("input", n.types) if n.op == "input" else ("weight", n.types, _small_value(n)))
        return index[nid]

    for n in graph.topo_order():
        if n.op == "opaque":
            return None, []
        if n.op in ("input", "weight"):
            continue
        ins = tuple((number(i), j) for i, j in n.inputs)
        index[n.id] = len(index)
        items.append((n.op, store.attr_items(n), ins, n.types))
    outs = tuple((number(i), j) for i, j in graph.outputs)
    return (tuple(items), outs), leaves


def _small_value(node) -> Optional[bytes]:
    """A weight's dtype and bytes if it has at most SMALL_CONSTANT elements (None for a larger one)."""
    if math.prod(node.types[0].shape) > SMALL_CONSTANT:
        return None
    arr = np.ascontiguousarray(weight_array(node))
    return arr.dtype.str.encode() + arr.tobytes()


def replay(sub: TensorGraph, like: TensorGraph, best: TensorGraph) -> TensorGraph:
    """`best` (a rewrite of `like`) rewritten for `sub`, which has the same `shape_key` as `like`: every input and
    weight of `like` read as the matching one of `sub` (a rewrite's new weights are operators over the weights
    they came from, so they are remade from `sub`'s)."""
    if best == like:
        return sub
    mapping = {a: b for a, b in zip(_canonical(like)[1], _canonical(sub)[1]) if a != b}
    if any(b in mapping for b in mapping.values()):
        # a leaf of both graphs read at another place in each (a weight two adjacent layers' regions share): the
        # substitution is simultaneous, not a chain (`replace` follows chains, which would read a third leaf)
        store = best.store
        via = {a: store.input(store.fresh_key(f"{PLACEHOLDER}replay"), store.type(a)) for a in mapping}
        best, mapping = best.replace(via), {via[a]: b for a, b in mapping.items()}
    return best.replace(mapping) if mapping else best


def _reused(stats):
    """A region's statistics for a replayed search: its rules applied, no graph expanded, no time."""
    out = copy.copy(stats)
    for name in ("expanded", "candidates", "seconds"):
        if hasattr(out, name):
            setattr(out, name, 0)
    if hasattr(out, "rules_applied"):
        out.rules_applied = copy.copy(out.rules_applied)
    return out


def search_by_regions(graph: TensorGraph, search_one: Callable[[TensorGraph], tuple], size: int,
                      out_of_time: Optional[Callable[[], bool]] = None) -> tuple[TensorGraph, list]:
    """Search each region of `size` operators, twice (aligned cuts, then cuts shifted by half a region, or the
    whole graph where the first pass brought it down to WHOLE_REGIONS regions' size).

    Regions of one pass are disjoint, so each is searched against the same graph and all their rewrites are
    spliced in at once (one `replace`, which chains a region's new inputs to its upstream region's new outputs).
    Small graphs are searched whole, and so are those that do not repeat and that at most WHOLE_REGIONS regions
    would cut. A region with the `shape_key` of one searched before takes its result
    (`replay`). Returns the graph and the per-region statistics.
    """
    from ..progress import Progress

    first = regions(graph, size, 0) if graph.num_ops > size else []
    if len(first) <= 1:  # small, or a graph that does not repeat and is cut whole (`regions`)
        best, stats = search_one(graph)
        return best, [stats]
    all_stats = []
    done: dict = {}  # shape_key -> (the region searched, its best graph, its statistics)
    bar = Progress(2 * len(first), "searching", unit="regions")
    bar.__enter__()
    for offset in (0, size // 2):
        mapping: dict = {}
        stop = False
        if offset == 0:
            runs = first
        else:  # a first pass that shrank the graph to WHOLE_REGIONS regions' size leaves one run: the whole graph
            # (its cuts would part again what the first pass's cut parted: a residual sum from the next layer's norm)
            runs = regions(graph, size, offset) if graph.num_ops > WHOLE_REGIONS * size \
                else [{n.id for n in graph.ops()}]
        if offset:  # the shifted pass cuts the graph the first pass left, into one run more or fewer
            bar.total = bar.done + len(runs)
        context = shared_context(graph, runs)
        for members in runs:
            if out_of_time is not None and out_of_time():
                stop = True
                break
            sub, back, outs = _region_graph(graph, members, context)
            if not outs:
                bar.update(note="region has no outputs")
                continue
            key = shape_key(sub)
            if key is not None and key in done:
                like, like_best, like_stats = done[key]
                best, stats = replay(sub, like, like_best), _reused(like_stats)
            else:
                best, stats = search_one(sub)
                if key is not None and stats.stopped_by != StopReason.INTERRUPT:
                    done[key] = (sub, best, stats)
            all_stats.append(stats)
            bar.update(note=f"region cost {stats.cost_before:.4g} -> {stats.cost_after:.4g}")
            if best != sub:  # the search only moves to a cheaper graph, or an equally cheap one with fewer ops
                real = best.replace(back) if back else best
                mapping.update((o, n) for o, n in zip(outs, real.outputs) if o != n)
            if stats.stopped_by == StopReason.INTERRUPT:
                stop = True
                break
        if mapping:
            graph = graph.replace(mapping)
        if stop:
            break
    bar.__exit__(None, None, None)
    return graph, all_stats
