"""The axiomatic proof of rules with constant 3-D/4-D transposes (#12): the permutation helpers get their values
on the constants of the encoding (by the expression evaluator), a source transpose with a constant perm gives the
ranks around it, and element-wise operators and batched products commute with a transpose by axioms. Wrong
transpose rules stay unproven by the axioms and are refuted by the bounded method."""
from __future__ import annotations

import itertools

import pytest
import z3

from taso_tvm.rules import parse_rules
from taso_tvm.rules.language import expr as E
from taso_tvm.rules.verify.axiomatic import Encoder, encode_sides, helper_facts, source_rank_facts
from taso_tvm.rules.verify.verdict import axiomatic_check, load_axioms, verify_rule

HEADS = "[0, 2, 1, 3]"


SHAPES = {2: "[A, B]", 3: "[A, B, C]", 4: "[A, B, C, D]"}
DIMS = "{A: [1, 2], B: [2, 3], C: [2, 3], D: [2, 3]}"


def _rule(source: str, target: str, where: str = "", rank: int = 4, inputs: str = "a", name: str = "r") -> object:
    """A rule whose inputs (`inputs`, one letter each) have the given rank in its verify shapes."""
    shapes = ", ".join(f"{v}: {SHAPES[rank]}" for v in inputs)
    text = f"- name: {name}\n  source:\n{source}\n  target:\n{target}\n"
    if where:
        text += f"  where: {where}\n"
    text += f"  verify: {{shapes: {{{shapes}}}, dims: {DIMS}}}\n"
    (rule,) = parse_rules(text)
    return rule


def _cancel(p1: str, p2: str) -> object:
    return _rule(f"    y: transpose(transpose(q, perm={p1}), perm={p2})", "    y: q", rank=p1.count(",") + 1,
                 inputs="q", name="cancel")


@pytest.fixture(scope="module")
def axioms():
    return load_axioms()


# ---------------------------------------------------------------- right rules: verified, by both methods
@pytest.mark.parametrize("p1,p2", [(HEADS, HEADS), ("[0, 2, 1]", "[0, 2, 1]"), ("[0, 2, 3, 1]", "[0, 3, 1, 2]"),
                                   ("[1, 0]", "[1, 0]")])
def test_transposes_that_compose_to_the_identity_cancel(axioms, p1, p2):
    res = verify_rule(_cancel(p1, p2), axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()


@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh"])
def test_element_wise_commutes_with_a_4d_transpose(axioms, op):
    fwd = _rule(f"    y: {op}(transpose(a, perm={HEADS}))", f"    y: transpose({op}(a), perm={HEADS})")
    back = _rule(f"    y: transpose({op}(a), perm={HEADS})", f"    y: {op}(transpose(a, perm={HEADS}))")
    for rule in (fwd, back):
        res = verify_rule(rule, axioms)
        assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()


@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary_commutes_with_a_4d_transpose(axioms, op):
    rule = _rule(f"    y: {op}(transpose(a, perm={HEADS}), transpose(b, perm={HEADS}))",
                 f"    y: transpose({op}(b, a), perm={HEADS})", "[shape(a) == shape(b)]", inputs="ab")
    res = verify_rule(rule, axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()


def test_batched_product_of_transposes(axioms):
    text = ("- name: batched\n  source:\n    y: matmul(transpose(a, perm=[0, 2, 1]), transpose(b, perm=[0, 2, 1]))\n"
            "  target:\n    y: transpose(matmul(b, a), perm=[0, 2, 1])\n  where: [ndim(a) == 3, ndim(b) == 3]\n"
            "  verify: {shapes: {a: [A, B, C], b: [A, D, B]}, dims: {A: [1, 2]}}\n")
    (rule,) = parse_rules(text)
    res = verify_rule(rule, axioms)
    assert res.status == "verified" and res.proof == "bounded+axiomatic", res.reason()


# ---------------------------------------------------------------- wrong rules: never proven, refuted
@pytest.mark.parametrize("p1,p2", [(HEADS, "[0, 1, 3, 2]"), ("[0, 2, 3, 1]", "[0, 2, 3, 1]"),
                                   ("[0, 2, 1]", "[1, 0, 2]")])
def test_transposes_that_do_not_compose_to_the_identity_are_not_proven(axioms, p1, p2):
    rule = _cancel(p1, p2)
    assert axiomatic_check(rule, axioms).status == "unknown"
    assert verify_rule(rule, axioms).status == "refuted"
    assert verify_rule(rule, axioms, axiomatic_first=True).status == "refuted"


def test_a_rank_the_rule_does_not_fix_is_not_assumed(axioms):
    """The identity permutation of rank 4 applied to a tensor of any rank: true only for 4-D tensors. Its verify
    shapes are 4-D, but only a where-clause makes the rank part of the rule: the axioms prove it then alone."""
    src, tgt = "    y: relu(a)", "    y: relu(transpose(a, perm=[0, 1, 2, 3]))"
    assert axiomatic_check(_rule(src, tgt), axioms).status == "unknown"
    assert axiomatic_check(_rule(src, tgt, "[ndim(a) == 4]"), axioms).status == "proven"


def test_wrong_rank_in_the_target_is_not_proven(axioms):
    rule = _rule(f"    y: transpose(transpose(q, perm={HEADS}), perm={HEADS})",
                 "    y: transpose(q, perm=[0, 1, 2])", inputs="q")
    assert axiomatic_check(rule, axioms).status == "unknown"


# ---------------------------------------------------------------- the ground facts themselves
def _values(enc: Encoder, facts: list) -> dict:
    """{term text: value} of the ground equations (code values decoded)."""
    out = {}
    for f in facts:
        lhs, rhs = f.arg(0), f.arg(1)
        term, val = (lhs, rhs) if z3.is_int_value(rhs) else (rhs, lhs)
        v = val.as_long()
        out[term.sexpr()] = enc.code_values.get(v, v)
    return out


def test_helper_values_are_the_evaluators():
    enc = Encoder()
    perms = [(0, 2, 1, 3), (0, 2, 3, 1)]
    for p in perms:
        enc.value(p)
    for name, n in (("compose", 2), ("inverse", 1), ("range", 1), ("len", 1)):
        enc.fn(name, n)
    vals = _values(enc, helper_facts(enc))
    code = {v: c for c, v in enc.code_values.items()}
    seen = [v for v in enc.code_values.values() if isinstance(v, tuple) and len(v) == 4]
    assert len(seen) == 6  # the two generate the permutations of the last three axes
    assert vals["(range/1 4)"] == (0, 1, 2, 3) and "(range/1 3)" not in vals
    for a, b in itertools.product(seen, seen):
        want = E.evaluate(E.parse(f"compose({list(a)}, {list(b)})"), E.Env())
        assert vals[f"(compose/2 {code[a]} {code[b]})"] == want
    for a in seen:
        assert vals[f"(inverse/1 {code[a]})"] == E.evaluate(E.parse(f"inverse({list(a)})"), E.Env())
        assert vals[f"(len/1 {code[a]})"] == 4


def test_no_helper_facts_without_helpers():
    enc = Encoder()
    enc.value((0, 2, 1, 3))
    assert helper_facts(enc) == []


def test_rank_facts_come_from_source_transposes_only():
    rule = _rule(f"    y: relu(transpose(a, perm={HEADS}))", "    y: transpose(relu(a), perm=[0, 2, 1])")  # wrong
    enc = Encoder()
    scope, _src, tgt, built = encode_sides(enc, rule, "r_")
    facts = source_rank_facts(enc, rule, scope, built)
    assert facts and all(f.arg(1).as_long() == 4 for f in facts)
    assert {f.arg(0).arg(0).sexpr() for f in facts} == {"r_a", built[0][0].sexpr()}
    assert not any(tgt[0].sexpr() in f.sexpr() for f in facts)


def test_new_axioms_pass_the_bounded_method(axioms):
    names = ["ax_transpose_relu", "ax_transpose_sigmoid", "ax_transpose_tanh", "ax_transpose_add",
             "ax_transpose_mul", "ax_transpose_matmul_batched", "ax_transpose_matmul_heads"]
    by_name = {a.name: a for a in axioms}
    for n in names:
        res = verify_rule(by_name[n], is_axiom=True)
        assert res.status == "verified", (n, res.reason())


def test_identity_constant_at_the_rank_the_where_clause_gives(axioms):
    """A constant identity permutation in a target: it cancels at the rank the rule's where-clause states, not at
    another (range(ndim(a)) is a code of the other length then)."""
    src, tgt = "    y: relu(a)", "    y: relu(transpose(a, perm=[0, 1, 2]))"
    assert axiomatic_check(_rule(src, tgt, "[ndim(a) == 3]", rank=3), axioms).status == "proven"
    assert axiomatic_check(_rule(src, tgt, "[ndim(a) == 4]", rank=4), axioms).status == "unknown"


def test_every_3d_pair_is_proven_exactly_when_true(axioms):
    """All 36 pairs of 3-D permutations: the cancellation is proven iff they compose to the identity (by the
    evaluator), relu commuting iff the target's permutation is the source's."""
    perms = [list(p) for p in itertools.permutations(range(3))]
    wrong = []
    for p1, p2 in itertools.product(perms, perms):
        ident = E.evaluate(E.parse(f"compose({p1}, {p2})"), E.Env()) == (0, 1, 2)
        if (axiomatic_check(_cancel(str(p1), str(p2)), axioms).status == "proven") != ident:
            wrong.append(("cancel", p1, p2))
        rule = _rule(f"    y: relu(transpose(a, perm={p1}))", f"    y: transpose(relu(a), perm={p2})", rank=3)
        if (axiomatic_check(rule, axioms).status == "proven") != (p1 == p2):
            wrong.append(("relu", p1, p2))
    assert not wrong
