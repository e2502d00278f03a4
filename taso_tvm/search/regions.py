"""Split a large graph into regions searched one at a time (MetaFlow's idea), so search time grows about
linearly with model size, then splice each region's best rewrite back.

A region is a run of consecutive operators in topological order. Its inputs produced outside it become
placeholder inputs (weights stay weights, so rules that need a weight still see one); its outputs are the tensors
used after it. A second pass with boundaries shifted by half a region catches patterns that straddle a cut.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from ..graph import TensorGraph
from .stop import StopReason

log = logging.getLogger(__name__)

PLACEHOLDER = "__region_in"


def _region_graph(graph: TensorGraph, members: set) -> tuple[TensorGraph, dict, list]:
    """(subgraph over placeholders, placeholder ref -> real ref, the region's output refs in the full graph)."""
    store = graph.store
    cons = graph.consumers()
    order = [n for n in graph.topo_order() if n.id in members]
    boundary: dict = {}
    for n in order:
        for ref in n.inputs:
            if ref[0] not in members and store.nodes[ref[0]].op != "weight" and ref not in boundary:
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


def regions(graph: TensorGraph, size: int, offset: int = 0) -> list[set]:
    """Consecutive runs of `size` operators (the first run `offset` shorter when offset > 0)."""
    ops = [n.id for n in graph.ops()]
    cuts = list(range(offset if offset else size, len(ops), size))
    bounds = [0] + cuts + [len(ops)]
    return [set(ops[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def search_by_regions(graph: TensorGraph, search_one: Callable[[TensorGraph], tuple], size: int,
                      out_of_time: Optional[Callable[[], bool]] = None) -> tuple[TensorGraph, list]:
    """Search each region of `size` operators, twice (aligned cuts, then cuts shifted by half a region, or the
    whole graph where the first pass brought it down to `size` operators).

    Regions of one pass are disjoint, so each is searched against the same graph and all their rewrites are
    spliced in at once (one `replace`, which chains a region's new inputs to its upstream region's new outputs).
    Small graphs are searched whole. Returns the graph and the per-region statistics.
    """
    from ..progress import Progress

    if graph.num_ops <= size:
        best, stats = search_one(graph)
        return best, [stats]
    all_stats = []
    first = regions(graph, size, 0)
    bar = Progress(2 * len(first), "searching", unit="regions")
    bar.__enter__()
    for offset in (0, size // 2):
        mapping: dict = {}
        stop = False
        if offset == 0:
            runs = first
        else:  # a first pass that shrank the graph to one region's size leaves one run: the whole graph
            runs = regions(graph, size, offset) if graph.num_ops > size else [{n.id for n in graph.ops()}]
        if offset:  # the shifted pass cuts the graph the first pass left, into one run more or fewer
            bar.total = bar.done + len(runs)
        for members in runs:
            if out_of_time is not None and out_of_time():
                stop = True
                break
            sub, back, outs = _region_graph(graph, members)
            if not outs:
                bar.update(note="region has no outputs")
                continue
            best, stats = search_one(sub)
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
