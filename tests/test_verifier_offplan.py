"""The bounded proof's nets beyond its planned domains: wide instances and the off-plan sweep refute rules that are
false only at sizes the verify.dims domains do not reach (where the planned instances' sources never build)."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from taso_tvm.rules.verify import plan as instances_plan
from taso_tvm.rules import parse_rules
from taso_tvm.rules.verify.plan import plan_instances
from taso_tvm.rules.verify.verdict import axiomatic_check, load_axioms, verify_rule
from taso_tvm.rules.verify.bounded import _sweep, bounded_check

# Stride 2 then a KxK conv is not a KxK conv at stride 2 after a stride-1 conv: with spatial sizes in {3, 4} (and 4, 5
# in the every-dim->=4 instance, which sets the kernels to 4 or 5 too) the source builds only with 1x1 second
# kernels, where the two sides agree.
STRIDE_SWAP = textwrap.dedent("""\
    - name: false_stride_swap
      source:
        t0: "conv2d(a, b, strides=[2, 2], padding=VALID)"
        t1: "conv2d(t0, c, strides=[1, 1], padding=VALID)"
      target:
        u0: "conv2d(a, b, strides=[1, 1], padding=VALID)"
        t1: "conv2d(u0, c, strides=[2, 2], padding=VALID)"
      outputs: [t1]
      where: ["ndim(a) == 4", "ndim(b) == 4", "ndim(c) == 4"]
      verify:
        shapes: {a: [A, B, C, C], b: [B, B, D, D], c: [B, B, E, E]}
        dims: {A: [1, 2], B: [1, 2, 3], C: [3, 4], D: [1, 3], E: [1, 3]}
    """)

# the same mistake with an operator outside the axioms (enlarge): without the nets it was "verified (bounded-only)"
STRIDE_SWAP_ENLARGE = textwrap.dedent("""\
    - name: false_stride_swap_enlarge
      source:
        t0: "conv2d(a, enlarge(b, kernel=[3, 3]), strides=[2, 2], padding=VALID)"
        t1: "conv2d(t0, c, strides=[1, 1], padding=VALID)"
      target:
        u0: "conv2d(a, enlarge(b, kernel=[3, 3]), strides=[1, 1], padding=VALID)"
        t1: "conv2d(u0, c, strides=[2, 2], padding=VALID)"
      outputs: [t1]
      verify:
        shapes: {a: [A, B, C, C], b: [B, B, D, D], c: [B, B, E, E]}
        dims: {A: [1, 2], B: [1, 2, 3], C: [3, 4], D: [1, 3], E: [1, 3]}
    """)

# equal shapes everywhere, equal values only at the domain's 1x1 matrices
COMMUTED_MATMUL = textwrap.dedent("""\
    - name: matmul_commutes
      source: {y: "matmul(a, b)"}
      target: {y: "matmul(b, a)"}
      verify: {shapes: {a: [S, S], b: [S, S]}, dims: {S: [1]}}
    """)


def _rule(text: str):
    (rule,) = parse_rules(text, "test")
    return rule


@pytest.fixture
def no_wide(monkeypatch):
    """The planner without its wide instances: the sweep alone must refute."""
    monkeypatch.setattr(instances_plan, "_add_wide", lambda pl, plan: None)


def _names_shapes(ce: dict) -> None:
    assert ce["kind"] == "type"
    assert set(ce["shapes"]) == {"a", "b", "c"}
    assert "shapes {a: [" in ce["instance"]
    assert "would change type" in ce["detail"]


@pytest.mark.parametrize("text", [STRIDE_SWAP, STRIDE_SWAP_ENLARGE], ids=["conv", "enlarge"])
def test_stride_swap_refuted_by_the_bounded_check_alone(text):
    rule = _rule(text)
    plan = plan_instances(rule)
    assert plan.wide == 2 and "2 wide" in plan.describe()
    m = bounded_check(rule)
    assert m.status == "refuted", m.detail
    _names_shapes(m.counterexample)
    # the wide instance that refutes it: the spatial dims grown, the kernels at their domain's largest value
    assert max(m.counterexample["shapes"]["a"][2:]) >= 7


@pytest.mark.parametrize("text", [STRIDE_SWAP, STRIDE_SWAP_ENLARGE], ids=["conv", "enlarge"])
def test_stride_swap_refuted_by_the_sweep_alone(text, no_wide):
    rule = _rule(text)
    m = bounded_check(rule)
    assert m.status == "refuted" and m.detail.startswith("off-plan sweep:"), m.detail
    _names_shapes(m.counterexample)


def test_rule_outside_the_axioms_is_refuted_not_bounded_only():
    rule = _rule(STRIDE_SWAP_ENLARGE)
    axioms = load_axioms()
    assert axiomatic_check(rule, axioms).detail == "no axioms for enlarge"  # it would be "bounded-only"
    res = verify_rule(rule, axioms)
    assert res.status == "refuted" and not res.proof
    assert "shapes {a: [" in res.reason()


def test_sweep_finds_value_mismatches_with_integer_inputs():
    rule = _rule(COMMUTED_MATMUL)
    status, detail, ce = _sweep(rule)
    assert status == "refuted" and ce["kind"] == "numeric"
    a, b = (np.asarray(ce["values"][v]) for v in ("a", "b"))
    assert a.shape[0] > 1 and np.all(a == np.round(a)) and np.all(np.abs(a) <= 3)
    assert not np.allclose(a @ b, b @ a)  # the counterexample is real


@pytest.mark.slow  # room in the default suite (issue 35)
def test_sweep_is_deterministic_and_quiet_on_true_rules():
    same = STRIDE_SWAP.replace("false_stride_swap", "same_sides").replace(
        'u0: "conv2d(a, b, strides=[1, 1]', 'u0: "conv2d(a, b, strides=[2, 2]').replace(
        't1: "conv2d(u0, c, strides=[2, 2]', 't1: "conv2d(u0, c, strides=[1, 1]')
    true_rule = _rule(same)
    assert _sweep(true_rule) is None
    assert bounded_check(true_rule).status == "proven"
    rule = _rule(STRIDE_SWAP)
    assert _sweep(rule)[2] == _sweep(rule)[2]
