"""Axioms added for the generator's candidates (concat associativity), the generalizer's equality for a 2x2
block concatenation, and the generator's axiomatic-first verification: each new axiom is verified by the bounded
method, rules the generator left unproven now verify, and wrong variants are still refuted."""
from __future__ import annotations

import textwrap

import pytest

from taso_tvm.rules import parse_rules
from taso_tvm.rules.generate.generalize import source_groups
from taso_tvm.rules.generate.keep import Item, _compile, prepare
from taso_tvm.rules.generate.pairs import Candidate
from taso_tvm.rules.generate.graphs import GNode
from taso_tvm.rules.generate.pool import build_pool
from taso_tvm.rules.verify.verdict import axiomatic_check, load_axioms, verify_rule
from taso_tvm.rules.verify.bounded import bounded_check

from verified_axioms import verified_axioms  # noqa: E402

RULES = textwrap.dedent("""\
    - name: concat_reassociate
      doc: generated at --max-ops 3 (gen_concat_a73d2916f6), unproven before ax_concat_assoc
      source:
        t0: concat(a, b, axis=1)
        t1: concat(c, t0, axis=1)
      target:
        u0: concat(c, a, axis=1)
        t1: concat(u0, b, axis=1)
      where: [ndim(a) == 2, ndim(b) == 2, ndim(c) == 2]
      verify: {shapes: {a: [A, B], b: [A, C], c: [A, D]}}

    - name: concat_reassociate_wrong_order
      source:
        t0: concat(a, b, axis=1)
        t1: concat(c, t0, axis=1)
      target:
        u0: concat(a, c, axis=1)
        t1: concat(u0, b, axis=1)
      where: [ndim(a) == 2, ndim(b) == 2, ndim(c) == 2]
      verify: {shapes: {a: [A, B], b: [A, C], c: [A, D]}}

    - name: block_interchange
      doc: TASO's rule 84 (a 2x2 block matrix by rows or by columns), with the equality its target needs
      source:
        t0: concat(a, b, axis=1)
        t1: concat(c, d, axis=1)
        t2: concat(t0, t1, axis=0)
      target:
        u0: concat(a, c, axis=0)
        u1: concat(b, d, axis=0)
        t2: concat(u0, u1, axis=1)
      where: [ndim(a) == 2, ndim(b) == 2, ndim(c) == 2, ndim(d) == 2, "dim(c, 1) == dim(a, 1)",
              "dim(d, 1) == dim(b, 1)"]
      verify: {shapes: {a: [A, B], b: [A, C], c: [D, B], d: [D, C]}}

    - name: block_interchange_unconstrained
      doc: the same without the equality - the source builds where only the row widths add up
      source:
        t0: concat(a, b, axis=1)
        t1: concat(c, d, axis=1)
        t2: concat(t0, t1, axis=0)
      target:
        u0: concat(a, c, axis=0)
        u1: concat(b, d, axis=0)
        t2: concat(u0, u1, axis=1)
      where: [ndim(a) == 2, ndim(b) == 2, ndim(c) == 2, ndim(d) == 2]
      verify: {shapes: {a: [A, B], b: [A, C], c: [D, E], d: [D, F]}}

    - name: grouped_conv_of_a_repeat
      doc: "generated at --max-ops 3 (gen_concat_conv2d_*); the output channels must be even, so E is 2 or 4"
      source:
        t0: concat(a, a, axis=1)
        t1: conv2d(t0, b, groups=2, padding=[1, 1, 1, 1], strides=[2, 2], activation=relu)
      target:
        t1: conv2d(a, b, groups=1, padding=[1, 1, 1, 1], strides=[2, 2], activation=relu)
      where: [ndim(a) == 4, ndim(b) == 4]
      verify:
        shapes: {a: [A, B, C, D], b: [E, B, F, G]}
        dims: {A: [1, 2], B: [1, 2, 3], C: [3, 4], D: [3, 4], E: [2, 4], F: [1, 3], G: [1, 3]}

    - name: grouped_conv_of_two_tensors_wrong
      source:
        t0: concat(a, c, axis=1)
        t1: conv2d(t0, b, groups=2)
      target:
        t1: conv2d(a, b, groups=1)
      where: [ndim(a) == 4, ndim(b) == 4, shape(a) == shape(c)]
      verify:
        shapes: {a: [1, B, C, C], c: [1, B, C, C], b: [E, B, F, F]}
        dims: {B: [1, 2], C: [3, 4], E: [2, 4], F: [1, 3]}

    - name: relu_distributes_over_add
      source:
        y: relu(add(a, b))
      target:
        y: add(relu(a), relu(b))
      verify: {shapes: {a: [N], b: [N]}}
    """)


@pytest.fixture(scope="module")
def rules():
    return {r.name: r for r in parse_rules(RULES, "generated_axioms.yaml")}


@pytest.fixture(scope="module")
def axioms():
    return list(verified_axioms())


def test_concat_assoc_axiom_is_verified_by_the_bounded_method():
    ax = next(a for a in load_axioms() if a.name == "ax_concat_assoc")
    res = verify_rule(ax, is_axiom=True)
    assert res.status == "verified", res.reason()
    assert "all 80 combinations" in res.methods[0].detail  # both layouts, every axis (negative ones too)


def test_concat_reassociation_verifies_with_the_axiom_only(rules, axioms):
    rule = rules["concat_reassociate"]
    res = verify_rule(rule, axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()
    without = [a for a in axioms if a.name != "ax_concat_assoc"]
    assert axiomatic_check(rule, without, timeout=2.0).status == "unknown"


def test_wrong_reassociation_is_refuted_and_not_proven(rules, axioms):
    rule = rules["concat_reassociate_wrong_order"]
    assert bounded_check(rule).status == "refuted"
    assert axiomatic_check(rule, axioms, timeout=2.0).status == "unknown"
    assert verify_rule(rule, axioms).status == "refuted"
    assert verify_rule(rule, axioms, axiomatic_first=True).status == "refuted"  # the sweep finds it


def test_block_interchange_verifies_and_needs_its_equality(rules, axioms):
    res = verify_rule(rules["block_interchange"], axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()
    bad = bounded_check(rules["block_interchange_unconstrained"])
    assert bad.status == "refuted" and bad.counterexample["kind"] in ("build", "type"), bad


def _interchange_candidate() -> Candidate:
    """concat(concat(x1, x2, 1), concat(x3, x4, 1), 0) = concat(concat(x1, x3, 0), concat(x2, x4, 0), 1)."""
    inner = lambda a, b, ax: GNode("concat", (("axis", ax),), (("i", a), ("i", b)))  # noqa: E731
    src = (inner("x1", "x2", 1), inner("x3", "x4", 1),
           GNode("concat", (("axis", 0),), (("n", 0, 0), ("n", 1, 0))))
    dst = (inner("x1", "x3", 0), inner("x2", "x4", 0),
           GNode("concat", (("axis", 1),), (("n", 0, 0), ("n", 1, 0))))
    return Candidate(src, (("n", 2, 0),), dst, (("n", 2, 0),), ("x1", "x2", "x3", "x4"), "test")


def test_generalizer_states_the_equality_a_sum_does_not_imply():
    """The source ties the row widths only by a sum: the generated rule names the equality, and verifies."""
    pool = {v.name: v for v in build_pool({"mat"}, 4)}
    c = _interchange_candidate()
    implied = source_groups(c, pool)
    assert [("x1", 1)] in implied and [("x3", 1)] in implied  # not one group
    it = Item(c)
    prepare(it, pool)
    assert "dim(c, 1) == dim(a, 1)" in it.entry["where"] and "dim(d, 1) == dim(b, 1)" in it.entry["where"]
    res = verify_rule(_compile(it.entry), list(verified_axioms()), axiomatic_first=True)
    assert res.status == "verified", res.reason()


def test_axiomatic_first_gives_the_same_verdicts(rules, axioms):
    """Never 'verified' for a wrong rule; the same verdict as the usual order on a right one."""
    wrong = rules["relu_distributes_over_add"]
    assert verify_rule(wrong, axioms, axiomatic_first=True).status != "verified"
    for name in ("concat_reassociate", "block_interchange"):
        a = verify_rule(rules[name], axioms, axiomatic_first=True)
        b = verify_rule(rules[name], axioms)
        assert a.status == b.status == "verified" and a.proof == b.proof


def test_grouped_conv_axiom_is_verified_and_proves_the_generated_rule(rules, axioms):
    ax = next(a for a in load_axioms() if a.name == "ax_conv_grouped_repeat")
    assert verify_rule(ax, is_axiom=True).status == "verified"
    res = verify_rule(rules["grouped_conv_of_a_repeat"], axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()
    wrong = rules["grouped_conv_of_two_tensors_wrong"]
    assert verify_rule(wrong, axioms).status == "refuted"
    assert axiomatic_check(wrong, axioms, timeout=2.0).status == "unknown"


def test_generated_grouped_conv_gets_even_output_channels():
    """The emitter gives a grouped convolution's output channels multiples of its groups: every pair of the
    bounded proof's choices is then covered (with 1, 2, 3 the odd sizes never built: 'coverage falls short')."""
    pool = {v.name: v for v in build_pool({"act4", "conv3x3"}, 2)}
    a, k = next(v for v in pool if v.startswith("a")), next(v for v in pool if v.startswith("k"))
    conv = (("activation", "none"), ("dilation", (1, 1)), ("padding", (1, 1, 1, 1)), ("strides", (1, 1)))
    src = (GNode("concat", (("axis", 1),), (("i", a), ("i", a))),
           GNode("conv2d", tuple(sorted(conv + (("groups", 2),))), (("n", 0, 0), ("i", k))))
    dst = (GNode("conv2d", tuple(sorted(conv + (("groups", 1),))), (("i", a), ("i", k))),)
    it = Item(Candidate(src, (("n", 1, 0),), dst, (("n", 0, 0),), (a, k), "test"))
    prepare(it, pool)
    rule = _compile(it.entry)
    out_sym = rule.verify.shapes[0]["b"][0]
    assert rule.verify.dims[out_sym] == (2, 4)
    m = bounded_check(rule)
    assert m.status == "proven" and "NOT covered" not in m.detail, m.detail
