"""Region-by-region search: every operator lies in one region per pass, the progress count ends at its total, and
a repeating graph is cut at its period and each distinct region searched once, its result replayed on the copies'
own weights."""
from __future__ import annotations

import logging

import numpy as np

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.search.regions import period, regions, search_by_regions


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
    seen: list = []

    def search_one(sub):
        seen.append(sub.num_ops)
        return sub, _Stats()

    with caplog.at_level(logging.INFO, logger="taso_tvm.progress"):
        best, stats = search_by_regions(g, search_one, 4)
    # the chain repeats: one region of 4 operators and one of 2 are searched, the others replayed
    assert best is g and len(stats) == 7 and seen == [4, 2]
    done = [r.getMessage() for r in caplog.records if "regions in" in r.getMessage()]
    assert done and done[-1].startswith("searching: 7/7 regions"), done


class _Rewritten(_Stats):
    def __init__(self):
        self.rules_applied = {"scale_weight": 1}
        self.expanded = 3


def _layers(n: int, scale: float = 2.0) -> tuple[TensorGraph, list]:
    """n layers x -> relu(tanh(x @ W_i)) * s, each with its own weight W_i; s a one-element constant."""
    S = NodeStore()
    rng = np.random.default_rng(0)
    x = S.input("x", TensorType((2, 9)))
    ws = []
    for i in range(n):
        w = S.weight(rng.standard_normal((9, 9)).astype("float32"))  # over SMALL_CONSTANT: values not compared
        s = S.weight(np.full((1,), scale if i != n - 1 else 5.0, "float32"))
        ws.append(w)
        x = S.add("mul", [S.add("relu", [S.add("tanh", [S.add("matmul", [x, w])[0]])[0]])[0], s])[0]
    return TensorGraph(S, [x]), ws


def _double_weights(sub: TensorGraph):
    """A stand-in search: every matmul reads 2 W * 0.5 instead of W (a rewrite whose new weights are operators
    over the region's own weights, as the rules' folded constants are)."""
    S = sub.store
    mapping = {}
    for n in sub.ops():
        if n.op == "matmul" and S.nodes[n.inputs[1][0]].op == "weight":
            w = n.inputs[1]
            two = S.weight(np.full((1,), 2.0, "float32"), key="two")
            half = S.weight(np.full((1,), 0.5, "float32"), key="half")
            mapping[n.outputs[0]] = S.add("matmul", [n.inputs[0], S.add("mul", [S.add("mul", [w, two])[0],
                                                                                half])[0]])[0]
    return (sub.replace(mapping) if mapping else sub), _Rewritten()


def test_identical_layers_searched_once_each_with_its_own_weights():
    g, _ = _layers(8)
    assert period([n.op for n in g.ops()], 8) == (4, 0)
    searched = []

    def search_one(sub):
        searched.append(sub.num_ops)
        return _double_weights(sub)

    best, stats = search_by_regions(g, search_one, 8)
    # the first pass cuts 4 regions of 2 layers: the first 3 are alike (one search), the last layer's scale differs
    assert len(searched) <= len(stats) - 2
    assert sum(s.expanded for s in stats) == 3 * len(searched)
    assert sum(s.rules_applied["scale_weight"] for s in stats) == len(stats)
    x = np.random.default_rng(1).standard_normal((2, 9)).astype("float32")
    want, got = g.evaluate({"x": x})[0], best.evaluate({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # each copy kept its own W_i
    assert sum(n.op == "matmul" for n in best.ops()) == 8


def test_a_different_small_constant_is_searched_again():
    g, _ = _layers(2, scale=2.0)  # layer 2 multiplies by 5, layer 1 by 2
    searched = []

    def search_one(sub):
        searched.append(sub)
        return sub, _Stats()

    search_by_regions(g, search_one, 4)
    assert len(searched) >= 2


def test_a_weight_expression_from_another_region_stays_a_weight():
    """A projection whose weight was scaled in an earlier run of operators (the attention scale folded into it)
    reads, in its own region, that weight expression, not a placeholder input: `weight(w)` in a rule holds there."""
    from taso_tvm.search.regions import PLACEHOLDER, _region_graph

    S = NodeStore()
    x = S.input("x", TensorType((2, 4)))
    w = S.weight(np.ones((4, 4), np.float32))
    scaled = S.add("mul", [w, S.weight(np.full((), 0.5, np.float32))])[0]  # computed in the first region
    y = S.add("relu", [S.add("tanh", [x])[0]])[0]
    z = S.add("matmul", [y, scaled])[0]
    g = TensorGraph(S, [z])
    matmul = next(n.id for n in g.ops() if n.op == "matmul")
    sub, placeholders, _ = _region_graph(g, {matmul})
    names = [n.attrs.get("name", "") for n in sub.inputs()]
    assert [x for x in names if x.startswith(PLACEHOLDER)] == [f"{PLACEHOLDER}{y[0]}_0"]  # y only
    assert sub.is_weight_only(next(n for n in sub.topo_order() if n.op == "matmul").inputs[1])


def test_every_layer_fuses_when_the_graph_is_cut_into_runs():
    """A 4-layer encoder searched in runs of about one layer, with a budget of one expansion: the normal form folds
    the attention scale into each layer's projection weights (values of weights alone, which the topological order
    puts among the first layer's operators), yet the repeat is found on the run-time operators, the runs are cut
    where only the residual stream crosses, and the fusing phase fuses every layer's attention."""
    from collections import Counter

    from taso_tvm import load_onnx, zoo
    from taso_tvm.cost import CostModel, load_cost_config
    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.rules import load_rules
    from taso_tvm.search import SearchConfig, optimize_graph

    model = zoo.get_model("bert", layers=4, seq_len=16, hidden=32, heads=4, ffn=64)
    graph = lift_function(load_onnx(model)["main"])[0].graph
    cost = CostModel(load_cost_config(backend="analytic", cache=""))
    best, stats = optimize_graph(graph, load_rules(), cost, SearchConfig(budget=1, region_size=32))
    ops = Counter(n.op for n in best.topo_order())
    assert ops["attention"] + ops["mha"] == 4 and ops["softmax"] == 0, ops


def test_a_table_every_run_reads_comes_into_each_region_with_its_operators():
    """A decoder's rotary table: a few operators compute it from an input once, every layer reads it. Each region
    reads it with the operators computing it (the rules see its form), not as a placeholder; a value that one run
    reads from another (the layers' chain) stays a placeholder."""
    from taso_tvm.search.regions import PLACEHOLDER, _region_graph, shared_context

    S = NodeStore()
    x = S.input("x", TensorType((2, 4)))
    freqs = S.input("freqs", TensorType((1, 2)))
    c = S.add("cos", [freqs])[0]
    table = S.add("concat", [c, c], axis=-1)[0]
    for _ in range(3):
        x = S.add("mul", [S.add("relu", [x])[0], table])[0]
    g = TensorGraph(S, [x])
    muls = [n.id for n in g.topo_order() if n.op == "mul"]
    runs = [{n.id for n in g.ops() if n.id not in muls[1:]}, {muls[1]}, {muls[2]}]
    runs[1] |= {n.inputs[0][0] for n in g.ops() if n.id == muls[1]}  # each later run: its relu and its mul
    runs[2] |= {n.inputs[0][0] for n in g.ops() if n.id == muls[2]}
    runs[0] -= runs[1] | runs[2]
    context = shared_context(g, runs)
    assert {S.nodes[i].op for i in context} == {"cos", "concat"}
    sub, _, _ = _region_graph(g, runs[2], context)
    assert {n.op for n in sub.ops()} == {"relu", "mul", "cos", "concat"}
    assert [n.attrs.get("name", "") for n in sub.inputs() if n.attrs.get("name", "").startswith(PLACEHOLDER)] == \
        [f"{PLACEHOLDER}{next(n.inputs[0][0] for n in g.ops() if n.op == 'relu' and n.id in runs[2])}_0"]
    assert shared_context(g, [set().union(*runs)]) == frozenset()  # one run: nothing is shared


def test_layers_reading_a_table_computed_inside_the_first_are_cut_whole():
    """Two identical layers read a table that the first layer's operators surround in the graph's own order (a
    decoder's rotary tables): that order shows no repeat; `run_order` (the table first, then the wiring's order)
    does, and each layer is one run (cut by size alone, one layer would be cut in two)."""
    S = NodeStore()
    h = S.input("x", TensorType((2, 3)))
    t = S.input("t", TensorType((2, 3)))
    for op in ("exp", "erf", "neg", "tanh", "exp", "erf", "neg", "tanh", "exp"):  # an embedding's depth: the
        h = S.add(op, [h])[0]  # layers are not values a few operators compute from the inputs
    layers = []
    for i in range(2):
        a = S.add("relu", [h])[0]
        if i == 0:
            table = S.add("tanh", [t])[0]
        b = S.add("mul", [a, table])[0]
        c = S.add("add", [b, h])[0]
        h = S.add("sigmoid", [c])[0]
        layers.append({a[0], b[0], c[0], h[0]})
    g = TensorGraph(S, [h])
    keys = [n.op for n in g.ops()][9:]
    assert period(keys, 4) == (0, 0)  # the graph's own order: relu tanh mul add sigmoid relu mul add sigmoid
    parts = regions(g, 4)
    assert layers[0] in parts and layers[1] in parts, parts


def _distinct(n: int, seed: int = 0) -> TensorGraph:
    """A chain of n operators drawn at random from six kinds: no repeat (`period`) to cut it at."""
    S = NodeStore()
    x = S.input("x", TensorType((2, 3)))
    for op in np.random.default_rng(seed).choice(["exp", "erf", "neg", "tanh", "relu", "sigmoid"], n):
        x = S.add(str(op), [x])[0]
    return TensorGraph(S, [x])


def test_a_graph_that_does_not_repeat_is_searched_whole_up_to_two_regions():
    """One decoder layer (Cohere's, Mistral's one-layer exports) has no period; cut at a region's size, the cut
    parts its query's projection and rotary from its key's, and the region holding one half rewrites it into a form
    the other half's rules no longer match. Up to two regions' size it is one run; beyond, cut by size."""
    for n, whole in ((9, True), (16, True), (17, False)):
        g = _distinct(n)
        assert period([op.op for op in g.ops()], 8) == (0, 0)
        seen: list = []

        def search_one(sub):
            seen.append(sub.num_ops)
            return sub, _Stats()

        parts = regions(g, 8)
        search_by_regions(g, search_one, 8)
        if whole:
            assert parts == [{op.id for op in g.ops()}] and seen == [n]
        else:
            assert [len(p) for p in parts] == [8, 8, 1] and seen[:3] == [8, 8, 1], seen


def test_a_replay_reads_a_weight_both_regions_share_where_the_copy_reads_it():
    """Two adjacent regions may share a leaf that each reads at another place (here W2: the first region's second
    weight, the second region's first). The replay substitutes every leaf at once: a chain (W1 -> W2 -> W3) would
    make the copy read W3 twice."""
    from taso_tvm.search.regions import replay, shape_key

    S = NodeStore()
    rng = np.random.default_rng(0)
    w1, w2, w3 = (S.weight(rng.standard_normal((9, 9)).astype(np.float32)) for _ in range(3))  # over SMALL_CONSTANT
    x, y = S.input("x", TensorType((2, 9))), S.input("y", TensorType((2, 9)))
    like = TensorGraph(S, [S.add("matmul", [S.add("matmul", [x, w1])[0], w2])[0]])
    sub = TensorGraph(S, [S.add("matmul", [S.add("matmul", [y, w2])[0], w3])[0]])
    assert shape_key(like) == shape_key(sub)
    best = TensorGraph(S, [S.add("matmul", [x, S.add("matmul", [w1, w2])[0]])[0]])  # the product folded first
    feeds = {"x": rng.standard_normal((2, 9)).astype(np.float32), "y": rng.standard_normal((2, 9)).astype(np.float32)}
    got, = replay(sub, like, best).evaluate(feeds)
    want, = sub.evaluate(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_every_phase_of_the_cut_is_judged_on_as_many_periods():
    """Three layers h -> sigmoid(neg(exp(h)) * h) and one operator after them. Cut between layers, only h crosses,
    read by both of the next layer's first operator and its product; cut before a sigmoid, its product crosses, read
    once (a chain a fusion may want whole). Judged on the cuts a phase has within the graph, the later phase had two
    and the layer boundary three, and the smaller sum of two cut the layers before their sigmoids (Qwen2's decode
    step was cut inside its attention so)."""
    S = NodeStore()
    h = S.input("x", TensorType((2, 3)))
    layers = []
    for _ in range(3):
        e = S.add("exp", [h])[0]
        n = S.add("neg", [e])[0]
        m = S.add("mul", [n, h])[0]
        h = S.add("sigmoid", [m])[0]
        layers.append({e[0], n[0], m[0], h[0]})
    g = TensorGraph(S, [S.add("tanh", [h])[0]])
    parts = regions(g, 4)
    assert all(layer in parts for layer in layers), [sorted(S.nodes[i].op for i in p) for p in parts]


def test_a_graph_the_first_pass_brought_to_two_regions_is_searched_whole_next():
    """32 operators in runs of 8, each run rewritten to 3: the 12 left are searched whole in the second pass (cut
    again, a shifted cut parts what the first pass's cut parted: a residual sum from the next layer's norm)."""
    S = NodeStore()
    x = S.input("x", TensorType((2, 3)))
    for i in range(32):
        x = S.add("relu" if i % 2 else "tanh", [x])[0]
    g = TensorGraph(S, [x])
    seen: list = []

    def search_one(sub):
        seen.append(sub.num_ops)
        if sub.num_ops != 8:
            return sub, _Stats()
        y = next(n for n in sub.inputs())
        out = (y.id, 0)
        for op in ("exp", "neg", "erf"):
            out = S.add(op, [out])[0]
        return TensorGraph(S, [out]), _Stats()

    best, _ = search_by_regions(g, search_one, 8)
    assert best.num_ops == 12 and seen == [8, 12], seen
