"""The rule generator on attention heads: reshapes that split a [B, L, E] activation into heads, merge them back or
flatten, and transposes of per-head tensors. At --max-ops 2 it finds the reshape folds, split-then-merge = identity
and element-wise operators commuting with the split; every rule it writes is verified and states its reshape
targets symbolically, so that it matches and rewrites graphs of other sizes (BERT's 12 heads of 64) with equal
outputs, and a rule true only at the enumeration's head count is refuted."""
from __future__ import annotations

import numpy as np
import pytest

from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.rules import apply_match, find_matches, load_rules, parse_rules
from taso_tvm.rules.generate import generate_rules
from taso_tvm.rules.generate.coverage import rewrite_path
from taso_tvm.rules.generate.driver import make_settings, _enumerators
from taso_tvm.rules.generate.graphs import ShapeForm, expr_text
from taso_tvm.rules.verify.verdict import verify_rules

# element-wise operators with the reshapes of a [B, L, E] activation (a scalar joins it), and the layout operators
# alone on both kinds of the heads family (the transposes' axiomatic proofs take a second each)
RUNS = [dict(ops=["add", "mul", "relu", "reshape"], kinds=["seq", "scalar"]),
        dict(ops=["reshape", "transpose"], kinds=["seq", "heads"])]
BERT = (1, 128, 768, 12)  # batch, sequence, embedding, heads


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """[(result, file)] of the runs at --max-ops 2."""
    d = tmp_path_factory.mktemp("heads")
    return [(generate_rules(2, jobs=2, out=str(d / f"heads{i}.yaml"), **kw), d / f"heads{i}.yaml")
            for i, kw in enumerate(RUNS)]


def _rules(generated):
    return [r for res, _out in generated for r in res.rules]


def _heads_rules(generated):
    return [r for r in _rules(generated) if "reshape" in r.ops]


# ---------------------------------------------------------------- graphs at BERT's sizes (not the pool's)
def _split(s, x, b=BERT):
    return s.add("reshape", [x], shape=(b[0], b[1], b[3], b[2] // b[3]))[0]


def _seq(s, name, b=BERT):
    return s.input(name, TensorType((b[0], b[1], b[2])))


def _merge_of_split():
    s = NodeStore()
    a = _seq(s, "a")
    (m,) = s.add("reshape", [_split(s, a)], shape=(BERT[0], BERT[1], BERT[2]))
    return TensorGraph(s, [m]), TensorGraph(s, [a])


def _flatten_of_split():
    s = NodeStore()
    a = _seq(s, "a")
    (f,) = s.add("reshape", [_split(s, a)], shape=(BERT[0], BERT[1] * BERT[2]))
    (g,) = s.add("reshape", [a], shape=(BERT[0], BERT[1] * BERT[2]))
    return TensorGraph(s, [f]), TensorGraph(s, [g])


def _relu_commutes_with_split():
    s = NodeStore()
    a = _seq(s, "a")
    (r,) = s.add("relu", [_split(s, a)])
    (q,) = s.add("relu", [a])
    return TensorGraph(s, [r]), TensorGraph(s, [_split(s, q)])


def _add_commutes_with_split():
    s = NodeStore()
    a, b = _seq(s, "a"), _seq(s, "b")
    (y,) = s.add("add", [_split(s, a), _split(s, b)])
    (z,) = s.add("add", [a, b])
    return TensorGraph(s, [y]), TensorGraph(s, [_split(s, z)])


def _transposes_cancel():
    s = NodeStore()
    q = s.input("q", TensorType((1, 12, 128, 64)))
    (t,) = s.add("transpose", [s.add("transpose", [q], perm=(0, 2, 1, 3))[0]], perm=(0, 2, 1, 3))
    return TensorGraph(s, [t]), TensorGraph(s, [q])


CASES = {"merge(split(a)) = a": _merge_of_split, "flatten(split(a)) = flatten(a)": _flatten_of_split,
         "relu commutes with the split": _relu_commutes_with_split,
         "add commutes with the split": _add_commutes_with_split}


# ---------------------------------------------------------------- enumeration
def test_heads_family_enumerates_the_reshapes_and_the_heads_transpose():
    s = make_settings(1, ops=["reshape", "transpose"], kinds=["seq", "heads"])
    (enum,) = _enumerators(s).values()
    texts = {expr_text((n,), ("n", 0, 0)) for n in enum.roots()}
    forms = {v.form for n in enum.roots() for _k, v in n.attrs if isinstance(v, ShapeForm)}
    assert forms == {"split_heads", "merge_heads", "flatten"}
    assert "transpose{perm=(0, 2, 1, 3)}(q1)" in texts and "transpose{perm=(0, 1, 3, 2)}(q1)" in texts
    assert not any("reshape" in t and "q1" in t and "split" in t for t in texts)  # a split needs [B, L, E]


# ---------------------------------------------------------------- --max-ops 2
@pytest.mark.parametrize("case", sorted(CASES))
def test_max_ops_2_finds_heads_rules_that_match_at_bert_sizes(generated, case):
    src, dst = CASES[case]()
    path = rewrite_path(_rules(generated), src, dst, max_steps=1) or rewrite_path(_rules(generated), dst, src,
                                                                                  max_steps=1)
    assert path is not None and len(path) == 1, f"{case}: no generated rule at 12 heads of 64"


@pytest.mark.parametrize("run", range(len(RUNS)))
def test_max_ops_2_writes_only_verified_heads_rules(generated, run):
    res, out = generated[run]
    written = {r.name for r in parse_rules(out.read_text())}
    assert written == {r.name for r in res.rules} and all(res.verdicts[n] == "verified" for n in written)
    assert set(load_rules(str(out)).names) == written  # the verifier's own verdict, through the cache


def test_heads_rules_state_reshape_targets_from_the_match(generated):
    heads = _heads_rules(generated)
    assert len(heads) >= 8
    for r in heads:  # reshape targets are stated from the match, never as the pool's sizes
        assert "bounded-only" in r.doc
        assert all(p.attrs["shape"].kind in ("var", "expr") for p in r.source + r.target if p.op == "reshape")


def test_transposes_cancellation_is_a_candidate(generated):
    res, _out = generated[1]
    found = [st for c, _e, st in res.candidates
             if [n.op for n in c.src] == ["transpose", "transpose"] and not c.dst and
             dict(c.src[0].attrs)["perm"] == (0, 2, 1, 3)]
    assert found and found[0] in ("verified", "unproven")


def test_transposes_cancellation_is_verified(generated):
    """The axioms compose the constant permutations: the cancellation is verified, written, and rewrites at BERT's
    sizes."""
    res, _out = generated[1]
    assert [st for c, _e, st in res.candidates if [n.op for n in c.src] == ["transpose", "transpose"] and not c.dst
            and dict(c.src[0].attrs)["perm"] == (0, 2, 1, 3)] == ["verified"]
    src, dst = _transposes_cancel()
    assert rewrite_path(_rules(generated), src, dst, max_steps=1) is not None


def test_a_rule_true_only_at_the_enumeration_head_count_is_refuted(generated):
    """relu commuting with the split, its target splitting into the pool's 4 heads instead of the source's count."""
    res, _out = generated[0]
    (entry,) = [e for c, e, st in res.candidates if st == "verified" and [n.op for n in c.src] == ["relu", "reshape"]
                and any("[2]" in line for line in e["target"])]
    from taso_tvm.rules.generate.emit import entry_yaml
    text = entry_yaml(entry, "test")
    var = next(w.split("(")[1].split(")")[0] for w in entry["where"] if w.startswith("len("))
    bad = text.replace(f"name: {entry['name']}", "name: split_into_pool_heads")
    head, rest = bad.split("  target:")
    target, tail = rest.split("  outputs:")
    bad = head + "  target:" + target.replace(f"{var}[2]", "4") + "  outputs:" + tail
    (rule,) = parse_rules(bad)
    assert verify_rules([rule], jobs=1, use_cache=False)[0].status == "refuted"


# ---------------------------------------------------------------- applied to an attention block
def _attention(seq: int = 6, emb: int = 12, heads: int = 3):
    """Self-attention with the query scaled after its heads are split (as some exporters write it)."""
    rng = np.random.default_rng(0)
    s = NodeStore()
    x = s.input("x", TensorType((1, seq, emb)))
    w = {k: s.weight((rng.standard_normal((emb, emb)) / np.sqrt(emb)).astype(np.float32), key=f"w{k}")
         for k in "qkv"}
    scale = s.weight(np.asarray(1.0 / np.sqrt(emb // heads), dtype=np.float32), key="scale")

    def heads_of(k):
        return s.add("reshape", [s.add("matmul", [x, w[k]])[0]], shape=(1, seq, heads, emb // heads))[0]

    (q,) = s.add("transpose", [s.add("mul", [heads_of("q"), scale])[0]], perm=(0, 2, 1, 3))
    (k,) = s.add("transpose", [heads_of("k")], perm=(0, 2, 3, 1))
    (v,) = s.add("transpose", [heads_of("v")], perm=(0, 2, 1, 3))
    (p,) = s.add("softmax", [s.add("matmul", [q, k])[0]], axis=-1)
    (ctx,) = s.add("transpose", [s.add("matmul", [p, v])[0]], perm=(0, 2, 1, 3))
    (y,) = s.add("reshape", [ctx], shape=(1, seq, emb))
    return TensorGraph(s, [y]), {"x": rng.standard_normal((1, seq, emb)).astype(np.float32)}


def test_generated_heads_rules_apply_on_an_attention_block(generated):
    g, feeds = _attention()
    ref = g.evaluate(feeds)[0]
    applied = []
    for r in _heads_rules(generated):
        for m in find_matches(r, g):
            g2 = apply_match(r, g, m)
            if g2 is None:
                continue
            np.testing.assert_allclose(g2.evaluate(feeds)[0], ref, rtol=1e-5, atol=1e-6, err_msg=r.name)
            applied.append(r.name)
    # the scale moved before the split (mul by a scalar commutes with the reshape)
    assert applied and any("mul" in n for n in applied), applied


# ---------------------------------------------------------------- the head count, generalized
def _split_transpose_add(first):
    """add(transpose(split(e1)), q1) with the arguments of the add in either order: q1's heads axis must equal the
    split's head count."""
    from taso_tvm.rules.generate.graphs import GNode
    split = GNode("reshape", (("shape", ShapeForm("split_heads")),), (("i", "e1"),))
    tr = GNode("transpose", (("perm", (0, 2, 1, 3)),), (("n", 0, 0),))
    args = (("n", 1, 0), ("i", "q1")) if first else (("i", "q1"), ("n", 1, 0))
    return split, tr, GNode("add", (), args)


def test_head_count_is_free_or_tied_to_the_heads_axis_it_must_equal():
    from taso_tvm.rules.generate.emit import entry_yaml, rule_entry
    from taso_tvm.rules.generate.generalize import generalize, source_groups
    from taso_tvm.rules.generate.graphs import GNode
    from taso_tvm.rules.generate.pairs import Candidate
    from taso_tvm.rules.generate.pool import HEADS, build_pool, dim_class

    pool = {v.name: v for v in build_pool({"seq", "heads"}, 2)}
    split, _tr, _add = _split_transpose_add(True)
    merge = GNode("reshape", (("shape", ShapeForm("merge_heads")),), (("n", 0, 0),))
    identity = Candidate((split, merge), (("n", 1, 0),), (), (("i", "e1"),), ("e1",), "t")
    assert [(HEADS, 0)] in generalize(identity, pool)  # merge(split(a)) = a for any head count
    c = Candidate(_split_transpose_add(True), (("n", 2, 0),), _split_transpose_add(False), (("n", 2, 0),),
                  ("e1", "q1"), "t")
    groups = generalize(c, pool)
    assert sorted(next(g for g in groups if (HEADS, 0) in g)) == [(HEADS, 0), ("q1", 1)]
    cls = {(v, a): dim_class(pool[v], a) for v in c.inputs for a in range(len(pool[v].shape))}
    entry = rule_entry(c, groups, pool, cls, source_groups(c, pool))
    assert "s0 == [dim(a, 0), dim(a, 1), dim(b, 1), dim(a, 2) // dim(b, 1)]" in entry["where"]
    assert not entry["attrs"]  # the count is defined by the match: no head counts to list
    (rule,) = parse_rules(entry_yaml(entry, "test"))
    assert verify_rules([rule], jobs=1, use_cache=False)[0].status == "verified"
