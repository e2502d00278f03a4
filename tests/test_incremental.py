"""Incremental costing and hashing agree with computing from scratch, on the candidates of real rewrites.

A rewrite's result derives its node set from the change alone (`TensorGraph.replace`), and the partitioner
fuses component by component with a content-keyed memo (`cost/fusion.py`). Both are checked against the
from-scratch computation on every candidate two rewrite steps deep from three zoo models.
"""
from __future__ import annotations

import pytest

from taso_tvm import load_onnx, zoo
from taso_tvm.cost import Partitioner
from taso_tvm.graph import TensorGraph
from taso_tvm.relay_pass.lift import lift_function
from taso_tvm.rules import load_rules


def _candidates(name: str, depth: int = 2, width: int = 2, most: int = 250):
    """(parent, candidate) pairs: every rewrite of the model, then of the first `width` results, `depth` deep
    (at most `most` pairs, taken evenly)."""
    rules = load_rules()
    g = lift_function(load_onnx(zoo.get_model(name))["main"])[0].graph
    frontier, pairs = [g], []
    for _ in range(depth):
        nxt = []
        for h in frontier[:width]:
            h.weight_only_ids()  # as the search does: a rewrite then derives its flags from the parent's
            for rule, m in rules.matches(h):
                new = rules.apply(h, rule, m)
                if new is not None:
                    pairs.append((h, new))
                    nxt.append(new)
        frontier = nxt
    return g, pairs[::max(1, len(pairs) // most)]


@pytest.fixture(scope="module", params=["seed_example", "squeezenet", "nasrnn"])
def rewrites(request):
    return _candidates(request.param)


def test_rewrite_node_set_equals_traversal(rewrites):
    _, pairs = rewrites
    assert len(pairs) > 10
    for parent, new in pairs:
        fresh = TensorGraph(new.store, new.outputs)
        assert new.node_ids == fresh.node_ids
        assert new.weight_only_ids() == fresh.weight_only_ids()
        assert [n.id for n in new.topo_order()] == [n.id for n in fresh.topo_order()]
        assert hash(new) == hash(fresh) and new == fresh


def test_component_partition_equals_whole_graph_fuseops(rewrites):
    _, pairs = rewrites
    split, whole = Partitioner(), Partitioner(split_components=False)
    for _, new in pairs:
        a = [(k.sig, k.nodes, k.root) for k in split.kernels(new)]
        b = [(k.sig, k.nodes, k.root) for k in whole.kernels(new)]
        assert a == b


def test_rewrites_reuse_the_parents_components(rewrites):
    """Costing a rewrite fuses only the components it changed: the rest are memo hits, also downstream of the
    rewrite where nodes are re-created with new ids."""
    g, pairs = rewrites
    p = Partitioner()
    p.kernels(g)
    first = p.component_misses
    for _, new in pairs:
        p.kernels(new)
    per_candidate = (p.component_misses - first) / len(pairs)
    assert per_candidate < 2.0, per_candidate
    whole = Partitioner(split_components=False)
    whole.kernels(g)
    assert whole.component_misses == 1 and first > 1  # the model splits into many components
