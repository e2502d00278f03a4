"""Coverage of the bounded proof: combinations not values, build failures are verdicts, samples and cache keys depend
on a rule's content only, and a plan that falls short is never 'verified'."""
from __future__ import annotations

import textwrap

import pytest

from taso_tvm.rules import parse_rules, read_rule_files
from taso_tvm.rules.verify.plan import EXHAUSTIVE_LIMIT, plan_instances
from taso_tvm.rules.language.rule import RuleError
from taso_tvm.rules.ruleset import library_files
from taso_tvm.rules.verify.verdict import axioms_digest, load_axioms, rule_key, verify_rules
from taso_tvm.rules.verify.bounded import bounded_check
from verified_axioms import verified_axioms

LIBRARY = read_rule_files(library_files())
SAME_TOTAL = textwrap.dedent("""\
    - name: merge_convs_same_total_padding
      source:
        a: conv2d(x, w1, padding=p1)
        b: conv2d(x, w2, padding=p2)
      target:
        y: conv2d(x, concat(w1, w2, axis=0), padding=p1)
        a, b: split(y, axis=1, sizes=[dim(w1, 0), dim(w2, 0)])
      where: [sum(p1) == sum(p2)]
      verify: {shapes: {x: [1, 1, H, W], w1: [1, 1, K, K], w2: [1, 1, K, K]}}
    """)


def _renamed(rule_text: str, new: str) -> list:
    return parse_rules(rule_text.replace("- name: merge_convs_same_total_padding", f"- name: {new}"))


def _assignments(plan) -> list:
    return [(inst.describe(), inst.large) for inst in plan.instances]


def test_plan_covers_every_pair_including_unequal_values():
    (rule,) = parse_rules(SAME_TOTAL)
    plan = plan_instances(rule)
    pairs = {(i.choices["p1"], i.choices["p2"]) for i in plan.instances}
    assert ((0, 1, 1, 0), (1, 0, 0, 1)) in pairs  # same total, different sides
    assert plan.complete and "all" in plan.describe()
    assert bounded_check(rule).status == "refuted"


def test_small_rules_are_exhaustive_large_ones_pairwise():
    byname = {r.name: r for r in LIBRARY}
    small = plan_instances(byname["fuse_matmul_relu"])
    assert small.mode == "exhaustive" and small.combinations <= EXHAUSTIVE_LIMIT
    big = plan_instances(byname["fuse_conv_relu"])
    assert big.mode == "pairwise" and big.pairs_covered + big.outside == big.combinations and big.large


def test_target_that_does_not_build_is_a_counterexample():
    (rule,) = parse_rules(textwrap.dedent("""\
        - name: transpose_2d_of_any_rank
          source:
            y: relu(x)
          target:
            y: relu(transpose(transpose(x, perm=[1, 0]), perm=[1, 0]))
          verify: {shapes: [{x: [M, N]}, {x: [A, M, N]}]}
        """))
    m = bounded_check(rule)
    assert m.status == "refuted" and m.counterexample["kind"] == "build"
    assert len(m.counterexample["shapes"]["x"]) == 3


def test_coverage_shortfall_is_unproven():
    (rule,) = parse_rules(SAME_TOTAL.replace("padding=p1)\n    a, b", "padding=p1)\n    a, b")
                          .replace("where: [sum(p1) == sum(p2)]", "where: [p1 == p2]"))
    assert bounded_check(rule).status == "proven"
    short = bounded_check(rule, max_instances=2)
    assert short.status == "unknown" and "falls short" in short.detail


def test_sample_and_cache_key_do_not_depend_on_the_name():
    (a,) = _renamed(SAME_TOTAL, "one_name")
    (b,) = _renamed(SAME_TOTAL, "another_name")
    assert _assignments(plan_instances(a)) == _assignments(plan_instances(b))
    ah = axioms_digest(load_axioms())
    assert rule_key(a, ah) == rule_key(b, ah)


def test_cache_key_changes_with_axiom_file_and_version(tmp_path, monkeypatch):
    import taso_tvm.rules.verify.verdict as V
    (a,) = parse_rules(SAME_TOTAL)
    ah = axioms_digest(load_axioms())
    k0 = rule_key(a, ah)
    f = tmp_path / "axioms.yaml"
    f.write_text(V.AXIOMS_FILE.read_text() + "\n# edited\n")
    monkeypatch.setattr(V, "AXIOMS_FILE", f)
    assert rule_key(a, ah) != k0
    monkeypatch.undo()
    monkeypatch.setattr(V, "VERIFIER_VERSION", "other")
    assert rule_key(a, ah) != k0


def test_opting_out_of_the_axiomatic_proof_needs_a_reason():
    text = SAME_TOTAL.replace("verify: {", "verify: {axiomatic: false, ")
    with pytest.raises(RuleError, match="bounded_only"):
        parse_rules(text)
    (r,) = parse_rules(SAME_TOTAL.replace("verify: {", "verify: {bounded_only: 'a reason', "))
    assert not r.verify.axiomatic and r.verify.bounded_only == "a reason"


RENAME_FAST = ["fuse_matmul_relu", "split_concat_cancel", "transpose_identity", "fold_constant_adds",
               "merge_matmuls_sharing_input", "concat_relu"]


def _rename_all(rules: list) -> list:
    import dataclasses
    return [dataclasses.replace(r, name=f"renamed_{i}_{r.name[::-1]}", _compiled=None) for i, r in enumerate(rules)]


def _verdicts(rules: list) -> list:
    res = verify_rules(rules, jobs=2, use_cache=False, axioms=list(verified_axioms()))
    return [(r.status, r.proof, [(m.method, m.status, m.detail if m.method == "bounded" else "") for m in r.methods])
            for r in res]


def test_renaming_library_rules_changes_no_verdict():
    rules = [r for r in LIBRARY if r.name in RENAME_FAST]
    assert _verdicts(rules) == _verdicts(_rename_all(rules))


@pytest.mark.slow
def test_renaming_every_library_rule_changes_no_verdict():
    assert _verdicts(LIBRARY) == _verdicts(_rename_all(LIBRARY))


def test_solver_process_is_killed_at_the_deadline_and_replaced():
    import time

    from taso_tvm.rules.verify.solver_process import check_smt2
    hard = ("(declare-const x Int) (declare-const y Int) (declare-const z Int)"
            "(assert (and (> x 0) (> y 0) (> z 0) (= (+ (* x x x) (* y y y)) (* z z z))))")
    t = time.perf_counter()
    status, why = check_smt2(hard, timeout=100.0, deadline=1.0)
    assert status == "unknown" and "did not stop" in why and time.perf_counter() - t < 5.0
    assert check_smt2("(declare-const a Real) (assert (> a 1.0))", timeout=5.0)[0] == "sat"  # a new process
