"""Region-by-region search: every operator lies in one region per pass, and the progress count ends at its total."""
from __future__ import annotations

import logging

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.search.regions import regions, search_by_regions


class _Stats:
    cost_before = cost_after = 1.0
    stopped_by = "done"


def _chain(n: int) -> TensorGraph:
    S = NodeStore()
    x = S.input("x", TensorType((2, 3)))
    for i in range(n):
        x = S.add("relu" if i % 2 else "tanh", [x])[0]
    return TensorGraph(S, [x])


def test_each_pass_covers_every_operator_once():
    g = _chain(13)
    ops = {n.id for n in g.ops()}
    for offset in (0, 2):
        parts = regions(g, 4, offset)
        assert set().union(*parts) == ops and sum(map(len, parts)) == len(ops)


def test_progress_ends_at_its_total(caplog):
    g = _chain(12)  # 3 aligned regions, 4 shifted ones: the shifted pass has one more than the first
    seen = []

    def search_one(sub):
        seen.append(sub.num_ops)
        return sub, _Stats()

    with caplog.at_level(logging.INFO, logger="taso_tvm.progress"):
        best, stats = search_by_regions(g, search_one, 4)
    assert best is g and len(stats) == len(seen) == 7 and sum(seen) == 2 * 12
    done = [r.getMessage() for r in caplog.records if "regions in" in r.getMessage()]
    assert done and done[-1].startswith("searching: 7/7 regions"), done
