"""The rule generator: enumeration, fingerprints, pruning, generalization, and end to end at --max-ops 2: TASO's
two-operator identities are found, everything written is verified, the output is deterministic and resumable, and
the rules load, match and apply on a zoo model with equal outputs."""
from __future__ import annotations


import numpy as np
import pytest

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.rules import load_rules, parse_rules
from taso_tvm.rules.generate import generate_rules, make_settings
from taso_tvm.rules.generate.coverage import rewrite_path
from taso_tvm.rules.generate.enumerate import Enumerator
from taso_tvm.rules.generate.generalize import generalize, split_variables
from taso_tvm.rules.generate.graphs import DimSum, GNode, expr_text, fingerprint
from taso_tvm.rules.generate.pairs import Candidate
from taso_tvm.rules.generate.pool import build_pool, families

# TASO's rules of two operators per side use matmul, add and mul (on 2-D tensors) and conv2d with relu; the conv
# run keeps stride 1 (TASO's own rules use stride 1, SAME), as the verifier's conv proofs take seconds each
RUNS = [dict(ops=["add", "matmul", "mul"], kinds=["mat"]),
        dict(ops=["conv2d", "relu"], kinds=["act4", "conv3x3"],
             attrs={"conv2d": {"strides": [(1, 1)], "padding": ["SAME", "VALID"]}})]


# ---------------------------------------------------------------- pieces
def test_fingerprint_exact_for_integers_and_rounded_for_floats():
    a = np.arange(12, dtype=np.float64).reshape(3, 4) * 12345.0
    assert fingerprint(a) == fingerprint(a.copy())
    assert fingerprint(a) != fingerprint(a + 1.0)  # one unit in a large integer is seen
    assert fingerprint(a) != fingerprint(a.reshape(4, 3))  # the shape is part of it
    b = np.exp(np.linspace(0, 1, 5))
    assert fingerprint(b) == fingerprint(b * (1 + 1e-15))  # a last-bit difference of a float is not


def test_enumeration_is_canonical_and_complete_for_one_operator():
    pool = build_pool({"mat"}, 3)
    (_fam, p), = families(pool)
    e = Enumerator(["add", "matmul", "relu"], p, 2)
    graphs = [r for root in e.roots() for r in e.run(root)]
    texts = [tuple(expr_text(r.nodes, o) for o in r.outputs) for r in graphs]
    assert len(texts) == len(set(texts))  # every graph once
    one = sorted(t for t, r in zip(texts, graphs) if len(r.nodes) == 1)
    # commutative add: one argument order; inputs first used in order: x1 before x2
    assert one == sorted([("add{}(x1,x1)",), ("add{}(x1,x2)",), ("matmul{activation='none'}(x1,x1)",),
                          ("matmul{activation='none'}(x1,x2)",), ("relu{}(x1)",)])
    assert all(len(r.nodes) <= 2 for r in graphs)


def _matmul_assoc() -> Candidate:
    src = (GNode("matmul", (("activation", "none"),), (("i", "x1"), ("i", "x2"))),
           GNode("matmul", (("activation", "none"),), (("n", 0, 0), ("i", "x3"))))
    dst = (GNode("matmul", (("activation", "none"),), (("i", "x2"), ("i", "x3"))),
           GNode("matmul", (("activation", "none"),), (("i", "x1"), ("n", 0, 0))))
    return Candidate(src, (("n", 1, 0),), dst, (("n", 1, 0),), ("x1", "x2", "x3"), "test")


def test_generalize_gives_matmul_chain_its_own_dims():
    pool = {v.name: v for v in build_pool({"mat"}, 3)}
    groups = generalize(_matmul_assoc(), pool)
    as_sets = sorted(sorted(g) for g in groups)
    # (x1 rows) (x1 cols = x2 rows) (x2 cols = x3 rows) (x3 cols)
    assert as_sets == [[("x1", 0)], [("x1", 1), ("x2", 0)], [("x2", 1), ("x3", 0)], [("x3", 1)]]


def test_split_variables_generalizes_a_repeated_input():
    relu = lambda a: GNode("relu", (), (a,))  # noqa: E731
    src = (relu(("i", "x1")), GNode("concat", (("axis", 0),), (("n", 0, 0), ("n", 0, 0))))
    dst = (GNode("concat", (("axis", 0),), (("i", "x1"), ("i", "x1"))), relu(("n", 0, 0)))
    c = Candidate(src, (("n", 1, 0),), dst, (("n", 1, 0),), ("x1",), "test")
    pool = {v.name: v for v in build_pool({"mat"}, 3)}
    g = split_variables(c, pool)
    assert len(g.inputs) == 2
    assert expr_text(g.src, g.src_outputs[0]) == "concat{axis=0}(relu{}(x1),relu{}(x2))"


def test_settings_reject_unknown_operators_and_kinds():
    with pytest.raises(ValueError, match="softmax2"):
        make_settings(2, ops=["softmax2"])
    with pytest.raises(ValueError, match="tensor5d"):
        make_settings(2, ops=["relu"], kinds=["tensor5d"])


# ---------------------------------------------------------------- end to end at --max-ops 2
@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """[(result, file)] of the runs at --max-ops 2."""
    d = tmp_path_factory.mktemp("gen")
    return [(generate_rules(2, jobs=2, out=str(d / f"run{i}.yaml"), **kw), d / f"run{i}.yaml")
            for i, kw in enumerate(RUNS)]


def _taso_two_op_identities():
    """TASO's rules of two operators per side, as graphs: matmul, add and mul associativity (add and mul in both
    of the forms TASO lists) and conv + relu fused."""
    out = []
    for op, k in (("matmul", {"activation": "none"}), ("add", {}), ("mul", {}), ("add", {}), ("mul", {})):
        s = NodeStore()
        x, y, z = (s.input(n, TensorType((4, 4))) for n in "xyz")
        (a,) = s.add(op, [x, y], **k)
        (src,) = s.add(op, [z, a] if op != "matmul" else [a, z], **k)
        if op == "matmul":
            (b,) = s.add(op, [y, z], **k)
            (dst,) = s.add(op, [x, b], **k)
        elif len(out) < 3:  # (x + y) + z -> (x + z) + y
            (b,) = s.add(op, [x, z], **k)
            (dst,) = s.add(op, [y, b], **k)
        else:  # (x + y) + z -> (y + z) + x
            (b,) = s.add(op, [y, z], **k)
            (dst,) = s.add(op, [x, b], **k)
        out.append((f"{op} associativity", TensorGraph(s, [src]), TensorGraph(s, [dst])))
    s = NodeStore()
    x, w = s.input("x", TensorType((1, 4, 6, 6))), s.input("w", TensorType((4, 4, 3, 3)))
    (c,) = s.add("conv2d", [x, w], padding="SAME")
    (r,) = s.add("relu", [c])
    (f,) = s.add("conv2d", [x, w], padding="SAME", activation="relu")
    out.append(("conv2d + relu fused", TensorGraph(s, [r]), TensorGraph(s, [f])))
    return out


def test_max_ops_2_finds_tasos_two_operator_rules(generated):
    rules = [r for res, _out in generated for r in res.rules]
    for what, src, dst in _taso_two_op_identities():
        path = rewrite_path(rules, src, dst, max_steps=1)
        assert path is not None and len(path) == 1, f"{what} not found"


@pytest.mark.parametrize("run", range(len(RUNS)))
def test_max_ops_2_writes_only_verified_rules(generated, run):
    res, out = generated[run]
    assert res.counts["verified"] == len(res.rules) >= 2
    written = {r.name for r in parse_rules(out.read_text())}
    assert written == {r.name for r in res.rules}
    assert all(res.verdicts[n] == "verified" for n in written)
    loaded = load_rules(str(out))  # the verifier's own verdict, through the cache
    assert set(loaded.names) == written
    for r in res.rules:
        assert "proof bounded" in r.doc and "fingerprint" in r.doc and "max_ops=2" in r.doc


def test_output_is_deterministic_and_resumes(generated, tmp_path):
    res, out = generated[0]
    again = generate_rules(2, jobs=1, out=str(tmp_path / "again.yaml"), **RUNS[0])
    assert again.text == res.text  # one process or two, same settings: same file
    # interrupt the enumeration after a few units, then resume from the checkpoint
    calls = {"n": 0}

    class Stop(Exception):
        pass

    class Bar:
        def __init__(self, total, desc):
            self.desc = desc

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1, note=""):
            calls["n"] += 1
            if self.desc == "enumerating" and calls["n"] == 6:
                raise Stop

    target = tmp_path / "resumed.yaml"
    with pytest.raises(Stop):
        generate_rules(2, jobs=1, out=str(target), progress=Bar, **RUNS[0])
    assert not target.exists() and (tmp_path / "resumed.yaml.ckpt").exists()
    resumed = generate_rules(2, jobs=1, out=str(target), **RUNS[0])
    assert resumed.counts["units_resumed"] > 0
    assert resumed.text == res.text and target.read_text() == res.text
    assert not (tmp_path / "resumed.yaml.ckpt").exists()


@pytest.mark.parametrize("model", ["seed_example", "nasnet_a"])
def test_generated_rules_match_and_apply_on_a_zoo_model(generated, model):
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.rules import apply_match, find_matches

    rules = [r for res, _out in generated for r in res.rules]
    onnx_model = zoo.get_model(model)
    (block,) = lift_function(load_onnx(onnx_model)["main"])
    g = block.graph
    feeds = zoo.random_inputs(onnx_model)
    ref = g.evaluate(feeds)[0]
    applied = 0
    for r in rules:
        for m in find_matches(r, g)[:2]:
            g2 = apply_match(r, g, m)
            if g2 is None:
                continue
            np.testing.assert_allclose(g2.evaluate(feeds)[0], ref, rtol=1e-4, atol=1e-4, err_msg=r.name)
            applied += 1
    assert applied >= 1


def test_cli_generate_writes_a_rule_file(tmp_path, capsys):
    from taso_tvm.cli.rules import main

    out = tmp_path / "g.yaml"
    assert main(["generate", "--max-ops", "2", "--ops", "relu,concat", "--kinds", "mat", "-o", str(out),
                 "--jobs", "1"]) == 0
    rules = parse_rules(out.read_text())
    assert rules and all(r.family == "generated" for r in rules)
    assert "verified rules" in capsys.readouterr().out
    assert main(["generate", "--max-ops", "2", "--ops", "nosuchop"]) == 2


# ---------------------------------------------------------------- --max-ops 3 (slow)
def _merge_relu_split_graphs():
    """(what, source, target): two matmuls sharing an input merged (the shared input on either side); relu moved
    through a concat; concat + split cancelled."""
    out = []
    for side in ("left", "right"):
        s = NodeStore()
        x, w1, w2 = (s.input(n, TensorType((4, 4))) for n in ("x", "w1", "w2"))
        ax = 1 if side == "left" else 0
        mm = (lambda w: s.add("matmul", [x, w])[0]) if side == "left" else (lambda w: s.add("matmul", [w, x])[0])
        a, b = mm(w1), mm(w2)
        (y,) = s.add("matmul", [x, s.add("concat", [w1, w2], axis=ax)[0]] if side == "left" else
                     [s.add("concat", [w1, w2], axis=ax)[0], x])
        p, q = s.add("split", [y], axis=ax, sizes=[4, 4])
        out.append((f"merge matmuls sharing their {side} input", TensorGraph(s, [a, b]), TensorGraph(s, [p, q])))
    s = NodeStore()
    u, v = (s.input(n, TensorType((4, 4))) for n in "uv")
    (c1,) = s.add("concat", [s.add("relu", [u])[0], s.add("relu", [v])[0]], axis=0)
    (c2,) = s.add("relu", [s.add("concat", [u, v], axis=0)[0]])
    out.append(("relu and concat commute", TensorGraph(s, [c2]), TensorGraph(s, [c1])))
    s = NodeStore()
    u, v = (s.input(n, TensorType((4, 4))) for n in "uv")
    p, q = s.add("split", [s.add("concat", [u, v], axis=1)[0]], axis=1, sizes=[4, 4])
    out.append(("concat / split cancel", TensorGraph(s, [p, q]), TensorGraph(s, [u, v])))
    return out


@pytest.fixture(scope="module")
def generated3(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen3") / "g3.yaml"
    return generate_rules(3, ops=["concat", "matmul", "relu", "split"], kinds=["mat"], jobs=2, out=str(out)), out


@pytest.mark.slow
def test_max_ops_3_writes_only_verified_rules(generated3):
    res, out = generated3
    written = {r.name for r in parse_rules(out.read_text())}
    assert written and written == {r.name for r in res.rules}
    assert res.counts["forward_derivable"] > 0  # the derivability pruning did drop candidates
    assert set(load_rules(str(out)).names) == written  # the verifier's own verdict on every written rule


@pytest.mark.slow
@pytest.mark.parametrize("case", [0, 1, 2, 3])  # merge sharing the left input, the right one, relu/concat, split/concat
def test_max_ops_3_implies_merges_commutes_and_cancellations(generated3, case):
    """The written rules rewrite the source into the target (applied source to target, up to 3 steps), or failing
    that both into one graph (the rules as equalities)."""
    from taso_tvm.rules.generate.derive import Deriver

    res, _out = generated3
    what, src, dst = _merge_relu_split_graphs()[case]
    path = rewrite_path(res.rules, src, dst, max_steps=3)
    if path is None:
        d = Deriver(src_steps=2, dst_steps=2, max_states=400)
        for r in res.rules:
            d.add(r)
        path = d.derive(src, dst)
    assert path is not None, f"{what}: not implied by the {len(res.rules)} generated rules"


# ---------------------------------------------------------------- pruning by derivation from kept rules
def _node(op, args, **attrs):
    return GNode(op, tuple(sorted(attrs.items())), tuple(args))


def _x(i):
    return ("i", f"x{i}")


def _n(j, o=0):
    return ("n", j, o)


def _halves():
    return (DimSum((("x1", 0),)), DimSum((("x2", 0),)))


def _relu_concat() -> Candidate:
    """relu(concat(x1, x2)) -> concat(relu(x1), relu(x2))."""
    src = (_node("concat", [_x(1), _x(2)], axis=0), _node("relu", [_n(0)]))
    dst = (_node("relu", [_x(1)]), _node("relu", [_x(2)]), _node("concat", [_n(0), _n(1)], axis=0))
    return Candidate(src, (_n(1),), dst, (_n(2),), ("x1", "x2"), "test")


def _split_concat() -> Candidate:
    """split(concat(x1, x2)) -> x1, x2."""
    src = (_node("concat", [_x(1), _x(2)], axis=0), _node("split", [_n(0)], axis=0, sizes=_halves()))
    return Candidate(src, (_n(1, 0), _n(1, 1)), (), (_x(1), _x(2)), ("x1", "x2"), "test")


def _split_relu_concat() -> Candidate:
    """split(relu(concat(x1, x2))) -> relu(x1), relu(x2): the two rules above, one after the other."""
    src = (_node("concat", [_x(1), _x(2)], axis=0), _node("relu", [_n(0)]),
           _node("split", [_n(1)], axis=0, sizes=_halves()))
    dst = (_node("relu", [_x(1)]), _node("relu", [_x(2)]))
    return Candidate(src, (_n(2, 0), _n(2, 1)), dst, (_n(0), _n(1)), ("x1", "x2"), "test")


def _relu_concat_columns() -> Candidate:
    """relu(concat(x1, x2, axis=1)) -> concat(relu(x1), relu(x2), axis=1): the kept rules are about axis 0."""
    src = (_node("concat", [_x(1), _x(2)], axis=1), _node("relu", [_n(0)]))
    dst = (_node("relu", [_x(1)]), _node("relu", [_x(2)]), _node("concat", [_n(0), _n(1)], axis=1))
    return Candidate(src, (_n(1),), dst, (_n(2),), ("x1", "x2"), "test")


def _kept_rules(pool):
    from taso_tvm.rules.generate.keep import Item, _compile, prepare

    rules = []
    for c in (_relu_concat(), _split_concat()):
        it = Item(c)
        prepare(it, pool)
        rules.append(_compile(it.entry))
    return rules


def test_derivation_joins_two_kept_rules_and_not_more():
    from taso_tvm.rules.generate.derive import Deriver, candidate_graphs

    pool = {v.name: v for v in build_pool({"mat"}, 3)}
    d = Deriver()
    for r in _kept_rules(pool):
        d.add(r)
    path = d.derive(*candidate_graphs(_split_relu_concat(), pool))
    assert path is not None and len(path) == 2  # relu moved through the concat, then the split cancelled
    assert d.derive(*candidate_graphs(_relu_concat_columns(), pool)) is None  # no kept rule is about axis 1
    one = Deriver(src_steps=1, dst_steps=0)  # one step cannot join them
    for r in _kept_rules(pool):
        one.add(r)
    assert one.derive(*candidate_graphs(_split_relu_concat(), pool)) is None


def test_keeper_drops_the_implied_candidate_and_verifies_the_other():
    """The implied candidate is never sent to the verifier; the other one is, and its verified rule is kept."""
    from taso_tvm.rules.generate.derive import Deriver
    from taso_tvm.rules.generate.keep import Item, Keeper, _Inline

    pool = {v.name: v for v in build_pool({"mat"}, 3)}
    d = Deriver()
    for r in _kept_rules(pool):
        d.add(r)

    class Recording(_Inline):
        sent: list = []

        def submit(self, fn, *args):
            self.sent.append(args[0])  # the candidate sent to be generalized and verified
            return super().submit(fn, *args)

    implied, other = Item(_split_relu_concat()), Item(_relu_concat_columns())
    counts: dict = {}
    ex = Recording()
    from taso_tvm.rules.generate.driver import _no_progress
    Keeper([other, implied], pool, 1, True, counts, _no_progress, reverse=False, deriver=d, executor=ex).run()
    assert implied.status == "derivable" and len(implied.path) == 2 and implied.entry is None
    assert other.status == "verified" and ex.sent == [other.cand]
    assert counts["forward_derivable"] == 1 and counts["forward_verified"] == 1


def test_every_generatable_operator_enumerates_over_the_default_pool():
    """The default settings (every generatable operator) enumerate one-operator graphs without an error: an
    operand spec's negative axis on a lower-rank input (a row, a scalar) is a mismatch, not an IndexError."""
    from taso_tvm.rules.generate.driver import _enumerators

    s = make_settings(1)
    roots = {fam: e.roots() for fam, e in _enumerators(s).items()}
    assert sum(map(len, roots.values())) > 0
    ops = {n.op for rs in roots.values() for n in rs}
    assert {"matmul", "layernorm", "softmax"} <= ops, ops


# ---------------------------------------------------------------- units, checkpoint, time budget
def _bucket_texts(buckets) -> dict:
    return {k: sorted(repr((r.nodes, r.outputs, r.fps, r.inputs)) for r in v) for k, v in buckets.by_key.items()}


def test_units_give_every_graph_once_in_run_order():
    """Units of two-node prefixes, concatenated, give exactly the graphs of a depth-first run from each first node,
    in the same order."""
    s = make_settings(3, ops=["concat", "matmul", "relu"], kinds=["mat"])
    from taso_tvm.rules.generate.driver import _enumerators

    (e,) = _enumerators(s).values()
    units = e.units(2)
    assert len(units) > 3 * len(e.roots())  # finer than one unit per first node
    by_units = [r.nodes for u in units for r in e.run_unit(*u)]
    by_roots = [r.nodes for root in e.roots() for r in e.run(root)]
    assert by_units == by_roots and len(set(by_units)) == len(by_units)


def test_checkpoint_appends_units_and_resumes_exactly(tmp_path):
    """The checkpoint grows by appending each finished unit (every earlier state of the file is a prefix of the
    next); interrupted and resumed, or resumed from a file cut off inside a unit, the buckets are exactly those of an
    uninterrupted run, in one process or two."""
    from pathlib import Path

    from taso_tvm.rules.generate.checkpoint import Checkpoint, parse_unit_line
    from taso_tvm.rules.generate.driver import _no_progress, enumerate_all, pair_all

    def _Checkpoint(path, settings):
        return Checkpoint(path, settings.digest())

    s = make_settings(3, ops=["concat", "relu"], kinds=["mat"])
    whole = enumerate_all(s, 1, _Checkpoint(None, s), _no_progress)
    assert whole.units_total > 50 and whole.units_left == 0
    ref = _bucket_texts(whole)
    path = tmp_path / "g.ckpt"
    snapshots: list = []

    class Stop(Exception):
        pass

    class Bar:
        def __init__(self, total, desc):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1, note=""):
            snapshots.append(path.read_bytes())
            if len(snapshots) == 31:  # the first update counts resumed units: 30 units are done
                raise Stop

    with pytest.raises(Stop):
        enumerate_all(s, 1, _Checkpoint(path, s), Bar)
    from taso_tvm.rules.generate.driver import _enumerators

    (e,) = _enumerators(s).values()
    units = e.units(2)
    for i, (a, b) in enumerate(zip(snapshots, snapshots[1:])):
        assert b[:len(a)] == a  # appended, never rewritten: each write is the one unit just finished
        line = b[len(a):].decode()
        assert line.count("\n") == 1 and line.endswith("\n")  # one JSON line per unit
        unit, recs = parse_unit_line(line)
        assert unit == ("2d", i)
        assert [r.nodes for r in recs] == [r.nodes for r in e.run_unit(*units[i])]
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(path.read_bytes()[:-5])  # interrupted while writing the 30th unit

    ck = _Checkpoint(path, s)
    resumed = enumerate_all(s, 1, ck, _no_progress)
    assert ck.resumed == 30 and _bucket_texts(resumed) == ref and resumed.graphs == whole.graphs
    ck = _Checkpoint(Path(cut), s)
    again = enumerate_all(s, 2, ck, _no_progress)  # the rest in two worker processes
    assert ck.resumed == 29 and _bucket_texts(again) == ref
    ck = _Checkpoint(Path(cut), s)
    assert len(ck.load()) == whole.units_total
    ck.close()
    ck = _Checkpoint(Path(cut), make_settings(3, ops=["concat", "relu"], kinds=["mat"], seed=1))
    assert ck.load() == []  # other settings: start afresh
    ck.close()
    c1, c2 = {}, {}
    assert [x.canonical() for x in pair_all(s, whole, c1)] == [x.canonical() for x in pair_all(s, again, c2)]
    assert c1 == c2


def test_cli_default_budget_and_what_is_left_unverified(tmp_path, capsys):
    """The command line's default time budget is printed; a budget spent while enumerating writes nothing and
    keeps the checkpoint; a budget spent while verifying reports the candidates left unverified."""
    from taso_tvm.cli.rules import main
    from taso_tvm.rules.generate.driver import DEFAULT_TIME_BUDGET_S

    args = ["generate", "--max-ops", "2", "--ops", "relu,concat", "--kinds", "mat", "--jobs", "1"]
    out = tmp_path / "g.yaml"
    assert main(args + ["-o", str(out), "--time-budget", "1e-9"]) == 1
    err = capsys.readouterr().err
    assert "ended the enumeration" in err and "nothing verified or written" in err and "g.yaml.ckpt" in err
    assert not out.exists() and (tmp_path / "g.yaml.ckpt").exists()

    class Stop(Exception):
        pass

    class Bar:  # stops the run once the enumeration is done
        def __init__(self, total, desc):
            self.desc = desc

        def __enter__(self):
            if self.desc == "verifying":
                raise Stop
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1, note=""):
            pass

    with pytest.raises(Stop):
        generate_rules(2, ops=["relu", "concat"], kinds=["mat"], jobs=1, out=str(out), progress=Bar)
    assert main(args + ["-o", str(out), "--time-budget", "1e-9"]) == 0  # enumerated: the checkpoint has it all
    text = capsys.readouterr().out
    assert "0 verified rules" in text and "stopped the verification" in text
    left = int(text.split(" left unverified")[0].rsplit(" ", 1)[1])
    assert left > 0 and out.exists() and not parse_rules(out.read_text())
    assert main(args + ["-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"within the time budget of {DEFAULT_TIME_BUDGET_S:g} s (the default)" in text
    assert " 0 left unverified" in text and parse_rules(out.read_text())
