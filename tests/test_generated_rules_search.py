"""Generated rules in the search: the rule set's operator index finds exactly what trying every rule finds, and
rules written by `taso-tvm rules generate` load, match and apply on zoo models with the outputs unchanged."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taso_tvm.rules import RuleSet, apply_match, graph_index, library_files, load_rules
from taso_tvm.rules.matching import matcher
from taso_tvm.rules.matching.matcher import every_match
from taso_tvm.rules.language.compile import read_rule_files
from taso_tvm.rules.ruleset import LIBRARY_ENTRY, required_ops

# written by `taso-tvm rules generate --max-ops 2 --ops concat,relu --kinds act4` (its header says so); the slow
# test below regenerates it and checks it is still what the generator writes
FIXTURE = Path(__file__).parent / "data" / "generated_rules" / "concat_relu_act4.yaml"
FIXTURE_ARGS = dict(max_ops=2, ops=["concat", "relu"], kinds=["act4"])


@pytest.fixture(scope="module")
def generated_mat(tmp_path_factory) -> Path:
    """A rule file the generator writes now: two-operator rules over add, matmul and mul on 2-D tensors."""
    from taso_tvm.rules.generate import generate_rules

    out = tmp_path_factory.mktemp("generated") / "mat.yaml"
    res = generate_rules(2, ops=["add", "matmul", "mul"], jobs=1, out=str(out))
    assert len(res.rules) >= 10 and out.is_file()
    return out


@pytest.fixture(scope="module")
def both(generated_mat) -> RuleSet:
    """The library plus both generated files, loaded the way settings name them (`library` first)."""
    rs = load_rules([LIBRARY_ENTRY, str(generated_mat), str(FIXTURE)])
    n_gen = len(read_rule_files([generated_mat, FIXTURE]))
    assert len(rs) == len(read_rule_files(library_files())) + n_gen  # every generated rule verified and loaded
    return rs


def _zoo_graph(name: str, **kw):
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function

    (block,) = lift_function(load_onnx(zoo.get_model(name, **kw))["main"])
    return block.graph


SMALL = {
    "squeezenet": dict(image_size=64),
    "nasrnn": dict(steps=2, hidden=64),
    "bert": dict(layers=1, seq_len=16, hidden=64, heads=4, ffn=128),
    "inception_v3": dict(image_size=75),
    "seed_example": dict(channels=16, size=14),
}


@pytest.fixture(scope="module")
def graphs() -> dict:
    return {name: _zoo_graph(name, **kw) for name, kw in SMALL.items()}


def _key(pairs: list) -> list:
    return [(r.name, tuple(sorted(m.nodes.items())), tuple(sorted(m.tensors.items())), tuple(sorted(m.attrs.items())))
            for r, m in pairs]


def _mat_graph():
    """A 2-D graph the generated matmul/add/mul rules match: (x @ w1) @ w2 + (x * y) * z."""
    from taso_tvm.graph import NodeStore, TensorGraph, TensorType

    s = NodeStore()
    t = TensorType((8, 8), "float32")
    x, y, z = (s.input(n, t) for n in "xyz")
    rng = np.random.default_rng(0)
    w1, w2 = (s.weight(rng.standard_normal((8, 8)).astype(np.float32)) for _ in range(2))
    (a,) = s.add("matmul", [s.add("matmul", [x, w1])[0], w2])
    (b,) = s.add("mul", [s.add("mul", [x, y])[0], z])
    (out,) = s.add("add", [a, b])
    return TensorGraph(s, [out])


def test_index_finds_the_same_matches_as_every_rule(both, graphs):
    """RuleSet.matches (rules whose operators occur in the graph, inputs refused early by rank) == every rule
    tried to the end, in the same order."""
    assert all(matcher._compiled(r).ranks for r in both if r.family == "generated")
    skipped = 0
    for name, g in [*graphs.items(), ("mat", _mat_graph())]:
        index = graph_index(g)
        every = every_match(both.rules, g, index)
        assert _key(both.matches(g)) == _key(every), name
        counts = {op: len(ids) for op, ids in index.by_op.items()}
        tried = both.candidates(counts)
        assert all(counts.get(op, 0) >= n for r in tried for op, n in required_ops(r).items())
        skipped += len(both) - len(tried)
    assert skipped > 0  # the index leaves rules out (e.g. every conv rule on the 2-D graphs)


def test_candidates_keep_rule_order_and_need_every_operator(both):
    counts = {"input": 2, "weight": 1, "matmul": 1, "add": 3}
    tried = both.candidates(counts)
    assert tried and all(counts.get(op, 0) >= n for r in tried for op, n in required_ops(r).items())
    order = {r.name: i for i, r in enumerate(both.rules)}
    assert [order[r.name] for r in tried] == sorted(order[r.name] for r in tried)
    assert any(r.family == "generated" for r in tried)
    names = {r.name for r in tried}
    two_matmuls = [r for r in both if r.family == "generated" and required_ops(r).get("matmul", 0) == 2
                   and set(required_ops(r)) <= set(counts)]
    assert two_matmuls and not names & {r.name for r in two_matmuls}  # one matmul in the graph: never tried
    assert {r.name for r in both.candidates(dict(counts, matmul=2))} >= {r.name for r in two_matmuls}
    assert both.candidates({}) == ()
    assert both.candidates(counts) is both.candidates(dict(counts, matmul=1, relu=0))  # cached by signature


def _feeds(g, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n.attrs["name"]: rng.standard_normal(n.types[0].shape).astype(n.types[0].dtype) for n in g.inputs()}


def _outputs_equal(g0, g1, seed: int = 0, ref: list = None) -> None:
    feeds = _feeds(g0, seed)
    for a, b in zip(ref if ref is not None else g0.evaluate(feeds), g1.evaluate(feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


def test_generated_rules_match_and_apply_on_zoo_models(both, graphs):
    """Matches of generated rules on the zoo graphs (and the 2-D graph) apply, and the outputs stay equal (the
    first two matches of each rule on each graph are evaluated; every match must apply)."""
    applied = set()
    for name, g in [*graphs.items(), ("mat", _mat_graph())]:
        ref = None
        checked: dict = {}
        for r, m in both.matches(g):
            if r.family != "generated":
                continue
            g2 = apply_match(r, g, m)
            assert g2 is not None, (name, r.name)
            if checked.get(r.name, 0) < 2:
                ref = ref if ref is not None else g.evaluate(_feeds(g))
                _outputs_equal(g, g2, ref=ref)
                checked[r.name] = checked.get(r.name, 0) + 1
            applied.add((name, r.name.rsplit("_", 1)[0]))
    models = {m for m, _ in applied}
    assert {"squeezenet", "inception_v3", "mat"} <= models, applied  # concat/relu rules on the CNNs
    assert {"gen_matmul", "gen_mul"} <= {k for m, k in applied if m == "mat"}


def test_search_with_generated_rules_keeps_outputs(both, graphs):
    """The search with the library + generated rules, and with the generated rules alone (so that they are the
    ones applied), returns graphs computing the same outputs."""
    from taso_tvm.cost import CostModel, load_cost_config
    from taso_tvm.search import SearchConfig, optimize_graph

    gen_only = RuleSet([r for r in both if r.family == "generated"])
    used = set()
    with CostModel(load_cost_config(backend="analytic")) as cm:
        for name in ("squeezenet", "seed_example", "nasrnn"):
            g = graphs[name]
            for rules in (both, gen_only):
                best, st = optimize_graph(g, rules, cm, SearchConfig(budget=4))
                assert st.cost_after <= st.cost_before
                _outputs_equal(g, best, seed=1)
                used |= {k for k in st.rules_applied if k.startswith("gen_")}
    assert used  # generated rules were applied along a best path


def test_optimize_onnx_with_generated_rules_file(generated_mat):
    """The ONNX optimizer with `rules: [library, generated files]`: the result runs in ONNX Runtime with the
    original's outputs."""
    from taso_tvm import zoo
    from taso_tvm.runtime.check import check_onnx, random_feeds
    from taso_tvm.onnx_opt import optimize_onnx

    model = zoo.get_model("squeezenet", image_size=64)
    out, rep = optimize_onnx(model, {"rules": [LIBRARY_ENTRY, str(generated_mat), str(FIXTURE)],
                                     "cost": "analytic", "budget": 4}, check=True, strict=True, time_check=False)
    assert rep.rules_applied  # something was rewritten
    diffs = check_onnx(model, out, [random_feeds(model, seed=s) for s in (3, 4)])
    assert all(d <= 1e-3 for d in diffs.values())


def test_settings_rules_library_entry_adds_files(tmp_path):
    from taso_tvm.relay_pass.settings import read_settings

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"rules: [library, {FIXTURE}]\n")
    rules = read_settings(str(cfg))["rules"]
    names = set(rules.names)
    assert {r.name for r in read_rule_files([FIXTURE])} <= names
    assert {r.name for r in read_rule_files(library_files())} <= names
    cfg.write_text(f"rules: [{FIXTURE}]\n")  # without `library` a list replaces the library
    assert len(read_settings(str(cfg))["rules"]) == len(read_rule_files([FIXTURE]))


@pytest.mark.slow
def test_fixture_is_what_the_generator_writes(tmp_path):
    from taso_tvm.rules.generate import generate_rules

    res = generate_rules(**FIXTURE_ARGS, jobs=1, out=str(tmp_path / "g.yaml"))
    assert sorted(r.digest for r in res.rules) == sorted(r.digest for r in read_rule_files([FIXTURE]))


def test_cli_rules_flag_adds_a_generated_file(tmp_path, capsys):
    """`taso-tvm optimize --rules FILE` searches with the library plus FILE (checked against the original); a
    missing file is one line and exit 2."""
    import json

    from reliability_util import FAST, assert_one_line, pair_model, run_main, save

    save(pair_model(), tmp_path / "m.onnx")
    argv = ["optimize", tmp_path / "m.onnx", "-o", tmp_path / "out.onnx", "--report", tmp_path / "r.json"] + FAST
    rc, err, _ = run_main(argv + ["--rules", FIXTURE], capsys)
    assert rc == 0, err
    assert (tmp_path / "out.onnx").is_file() and json.loads((tmp_path / "r.json").read_text())["rules_applied"]
    rc, err, _ = run_main(argv + ["--rules", tmp_path / "missing.yaml"], capsys)
    assert rc == 2
    assert_one_line(err, "missing.yaml", "does not exist")
