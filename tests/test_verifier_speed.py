"""The verifier's fast path: exact polynomial normal forms (`rules/verify/poly.py`) prove convolution rules of TASO's kind
in seconds, mostly without a solver call; the axiomatic proof stops at its resource limit instead of its timeout;
subtly wrong convolution rules are still refuted with counterexamples, also without the NumPy pre-check."""
from __future__ import annotations

import textwrap
import time
from fractions import Fraction

import numpy as np
import pytest
import z3

from taso_tvm.rules import parse_rules
from taso_tvm.rules.verify import bounded as V
from taso_tvm.rules.verify.poly import Ring, to_z3
from taso_tvm.rules.verify.verdict import AXIOMATIC_RLIMIT, load_axioms, verify_rule
from taso_tvm.rules.verify.bounded import bounded_check

TIME_BOUND_S = 10.0  # per rule, generous: a loaded 2-core machine; ~0.5-2 s unloaded

CONV_RULES = textwrap.dedent("""\
    - name: merge_convs_concat_kernels
      source:
        a: conv2d(x, w1, groups=1, **c)
        b: conv2d(x, w2, groups=1, **c)
      target:
        y: conv2d(x, concat(w1, w2, axis=0), groups=1, **c)
        a, b: split(y, axis=1, sizes=[dim(w1, 0), dim(w2, 0)])
      where: [weight(w1), weight(w2)]
      verify:
        shapes: {x: [N, C, H, W], w1: [O1, C, K, K], w2: [O2, C, K, K]}
        dims: {N: [1, 2], K: [1, 3], O1: [1, 2], O2: [1, 2]}

    - name: conv_kernel_sum
      source:
        y: add(conv2d(x, w1, activation=none, **c), conv2d(x, w2, activation=none, **c))
      target:
        y: conv2d(x, add(w1, w2), activation=none, **c)
      where: [shape(w1) == shape(w2)]
      verify: {shapes: {x: [N, C, H, W], w1: [O, C, K, K], w2: [O, C, K, K]}, dims: {N: [1], K: [1, 3]}}

    - name: conv_relu_fused
      source:
        y: relu(conv2d(x, w, activation=none, **c))
      target:
        y: conv2d(x, w, activation=relu, **c)
      verify: {shapes: {x: [N, C, H, W], w: [O, C, K, K]}, dims: {N: [1], K: [1, 3]}}

    - name: conv_of_channel_concat
      source:
        y: conv2d(concat(x1, x2, axis=1), concat(w1, w2, axis=1), groups=1, activation=none, **c)
      target:
        y: add(conv2d(x1, w1, groups=1, activation=none, **c), conv2d(x2, w2, groups=1, activation=none, **c))
      verify:
        shapes: {x1: [1, C1, H, W], x2: [1, C2, H, W], w1: [O, C1, K, K], w2: [O, C2, K, K]}
        dims: {K: [1, 3]}

    - name: enlarge_1x1_to_3x3
      source:
        y: conv2d(x, w, strides=s, padding=p, dilation=[1, 1], groups=g, activation=act)
      target:
        y: conv2d(x, enlarge(w, kernel=[3, 3]), strides=s, padding=[p[0] + 1, p[1] + 1, p[2] + 1, p[3] + 1],
                  dilation=[1, 1], groups=g, activation=act)
      where: [weight(w), "dim(w, 2) == 1", "dim(w, 3) == 1"]
      verify: {shapes: {x: [N, C, H, W], w: [O, C, 1, 1]}, dims: {N: [1]}}
    """)

WRONG_CONV_RULES = textwrap.dedent("""\
    - name: merge_convs_split_swapped
      doc: the split's pieces assigned in the wrong order
      source:
        a: conv2d(x, w1, groups=1, **c)
        b: conv2d(x, w2, groups=1, **c)
      target:
        y: conv2d(x, concat(w1, w2, axis=0), groups=1, **c)
        b, a: split(y, axis=1, sizes=[dim(w1, 0), dim(w2, 0)])
      where: [weight(w1), weight(w2), shape(w1) == shape(w2)]
      verify:
        shapes: {x: [N, C, H, W], w1: [O, C, K, K], w2: [O, C, K, K]}
        dims: {N: [1], K: [1, 3]}

    - name: same_padding_as_symmetric
      doc: SAME padding with stride 2 puts the odd pixel after; symmetric padding is wrong at even sizes
      source:
        y: conv2d(x, w, strides=[2, 2], padding=SAME, groups=1, activation=none)
      target:
        y: conv2d(x, w, strides=[2, 2], padding=[1, 1, 1, 1], groups=1, activation=none)
      where: ["dim(w, 2) == 3", "dim(w, 3) == 3"]
      verify: {shapes: {x: [1, C, H, W], w: [O, C, 3, 3]}}

    - name: relu_fused_into_the_wrong_conv
      source:
        y: add(relu(conv2d(x, w1, activation=none, **c)), conv2d(x, w2, activation=none, **c))
      target:
        y: conv2d(x, add(w1, w2), activation=relu, **c)
      where: [shape(w1) == shape(w2)]
      verify: {shapes: {x: [1, C, H, W], w1: [O, C, K, K], w2: [O, C, K, K]}, dims: {K: [1, 3]}}
    """)


def _rules(text: str) -> dict:
    return {r.name: r for r in parse_rules(text, "<test>")}


@pytest.fixture
def solver_calls(monkeypatch):
    """Counts the bounded proof's solver calls (the real solver still answers them)."""
    calls = []

    def counting(text, timeout, params=None, deadline=None):
        calls.append(text)
        return real(text, timeout, params, deadline)

    real = V.check_smt2
    monkeypatch.setattr(V, "check_smt2", counting)
    return calls


@pytest.mark.parametrize("name", list(_rules(CONV_RULES)))
def test_taso_conv_rule_verifies_fast(name):
    rule = _rules(CONV_RULES)[name]
    t0 = time.perf_counter()
    res = verify_rule(rule, load_axioms())
    dt = time.perf_counter() - t0
    assert res.status == "verified", res.reason()
    b = res.method("bounded")
    assert b.instances >= 10 and "NOT covered" not in b.coverage
    assert dt < TIME_BOUND_S, f"{name}: {dt:.1f} s"


def test_polynomial_rules_need_no_solver(solver_calls):
    """Conv, concat, split and add are polynomials and relu of equal arguments is one atom: equal normal forms prove
    every instance, no solver query is made."""
    rules = _rules(CONV_RULES)
    for name in ("merge_convs_concat_kernels", "conv_kernel_sum", "conv_relu_fused", "conv_of_channel_concat"):
        res = bounded_check(rules[name])
        assert res.status == "proven", (name, res.detail)
    assert solver_calls == []


@pytest.mark.parametrize("numeric_first", [True, False], ids=["numpy-first", "symbolic-only"])
@pytest.mark.parametrize("name", list(_rules(WRONG_CONV_RULES)))
def test_subtly_wrong_conv_rule_is_refuted(name, numeric_first):
    rule = _rules(WRONG_CONV_RULES)[name]
    t0 = time.perf_counter()
    res = bounded_check(rule, numeric_first=numeric_first)
    assert res.status == "refuted", res.detail
    ce = res.counterexample
    assert ce and ce["instance"] and ce["kind"] in ("numeric", "z3")
    assert time.perf_counter() - t0 < TIME_BOUND_S
    if ce.get("values"):  # the counterexample's input values do show the difference in NumPy
        from taso_tvm.rules.verify.plan import plan_instances
        inst = next(i for i in plan_instances(rule).instances if i.describe() == ce["instance"])
        tgt = V._rewrite(inst)
        feeds = {k: np.asarray(v) for k, v in ce["values"].items()}
        assert any(not np.allclose(a, b) for a, b in V._numpy_outputs(inst, tgt, feeds))


def test_wrong_conv_rule_refuted_by_the_solver_from_normal_forms(solver_calls):
    """Without the NumPy pre-check the differing normal forms go to Z3, whose model is the counterexample."""
    rule = _rules(WRONG_CONV_RULES)["same_padding_as_symmetric"]
    res = bounded_check(rule, numeric_first=False)
    assert res.status == "refuted" and res.counterexample["kind"] == "z3"
    assert len(solver_calls) >= 1


def test_unprovable_axiomatic_query_stops_at_the_resource_limit():
    """A true rule the axioms cannot derive (relu(a) + relu(a) = relu(a + a): no axiom scales relu; the grouped
    conv of a tensor concatenated with itself, used here before, now has its axiom): the bounded proof succeeds,
    the axiomatic one runs out of resources - deterministic, well before its 60 s timeout."""
    rule = _rules(textwrap.dedent("""\
        - name: relu_of_a_doubled
          source:
            t0: relu(a)
            y: add(t0, t0)
          target:
            u0: add(a, a)
            y: relu(u0)
          verify: {shapes: {a: [M, N]}, timeout: 60}
        """))["relu_of_a_doubled"]
    res = verify_rule(rule, load_axioms())
    assert res.method("bounded").status == "proven"
    ax = res.method("axiomatic")
    assert res.status == "unproven" and ax.status == "unknown"
    assert f"resource limit ({AXIOMATIC_RLIMIT} units)" in ax.detail


# ---------------------------------------------------------------- the polynomials themselves
def test_normal_forms_are_exact_and_canonical():
    ring = Ring()
    x, y = ring.var("x"), ring.var("y")
    assert ((x + y) * (x - y)).same(x * x - y * y)
    assert (x * 0.1 + x * 0.2).same(x * Fraction(3, 10))  # floats read as their decimal form, exactly
    assert not (x * 0.1 + x * 0.2).same(x * 0.3 + 0 * y + Fraction(1, 10**17) * x)
    assert (x + 1 - 1).same(x) and (x - x).is_const() and (x - x).const_value() == 0
    # relu of equal arguments is one atom; of different arguments, two
    assert (x + y).sym_apply("relu").same((y + x).sym_apply("relu"))
    assert not (x + y).sym_apply("relu").same((x - y).sym_apply("relu"))
    assert ring.const(-2).sym_apply("relu").same(ring.const(0))
    assert ring.const(4).sym_apply("recip").same(ring.const(Fraction(1, 4)))
    with pytest.raises(TypeError):
        x / y  # not a polynomial


def test_z3_conversion_keeps_the_semantics():
    """A polynomial with relu, max and an uninterpreted function converts to the Z3 term the operators' Z3 slots
    build; both evaluate alike at random points."""
    from taso_tvm.graph.ops.elementwise import z3_fn

    ring = Ring()
    a, b = ring.var("a"), ring.var("b")
    p = (a * b - 3).sym_apply("relu") * Fraction(1, 2) + a.sym_apply("max", b) - (a + b).sym_apply("tanh")
    za, zb = z3.Real("a"), z3.Real("b")
    q = z3.If(za * zb - 3 > 0, za * zb - 3, 0) / 2 + z3.If(zb > za, zb, za) - z3_fn("tanh")(za + zb)
    (zp,) = to_z3(ring, [p])
    s = z3.Solver()
    s.add(zp != q)
    assert s.check() == z3.unsat


@pytest.mark.parametrize("attrs", [
    {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
    {"strides": (2, 2), "padding": (1, 0, 1, 1), "dilation": (1, 1), "groups": 1},
    {"strides": (1, 2), "padding": (1, 1, 1, 1), "dilation": (2, 1), "groups": 2},
    {"strides": (2, 1), "padding": (0, 1, 1, 0), "dilation": (1, 1), "groups": 4},
], ids=["valid", "strided-padded", "dilated-grouped", "depthwise"])
def test_conv_over_polynomials_matches_numpy(attrs):
    """The conv slot's polynomial path (one in-place sum of products per element) computes NumPy's conv2d, with
    relu fused: the polynomials evaluated at random integers equal NumPy on the same numbers."""
    from taso_tvm.graph.ops import OPS
    from taso_tvm.graph.ops.nn import conv2d_numpy

    rng = np.random.default_rng(1)
    ring = Ring()
    xv, wv = rng.integers(-3, 4, (2, 4, 5, 4)), rng.integers(-3, 4, (4, 4 // attrs["groups"], 3, 2))
    xs = np.empty(xv.shape, dtype=object)
    ws = np.empty(wv.shape, dtype=object)
    values = {}
    for arr, val, name in ((xs, xv, "x"), (ws, wv, "w")):
        for idx in np.ndindex(val.shape):
            arr[idx] = ring.var(f"{name}{idx}")
            values[f"{name}{idx}"] = int(val[idx])
    (y,) = OPS["conv2d"].z3([xs, ws], {**attrs, "activation": "relu"})
    ref = np.maximum(conv2d_numpy(xv.astype(float), wv.astype(float), attrs["strides"], attrs["padding"],
                                  attrs["dilation"], attrs["groups"]), 0)
    assert y.shape == ref.shape
    got = np.array([float(p.evaluate(values)) for p in y.ravel()]).reshape(y.shape)
    np.testing.assert_array_equal(got, ref)


def test_relu_of_a_nonnegative_form_is_the_form():
    ring = Ring()
    x, y = ring.var("x"), ring.var("y")
    rx, ry = x.sym_apply("relu"), y.sym_apply("relu")
    assert rx.sym_apply("relu").same(rx)  # relu(relu(x)) = relu(x)
    assert (rx * ry * 2 + x * x + 1).sign() == 1 and (rx * ry * 2 + x * x + 1).sym_apply("relu").same(
        rx * ry * 2 + x * x + 1)
    assert (-(rx * ry)).sym_apply("relu").same(ring.const(0))
    assert (rx * y).sign() == 0 and (rx - ry).sign() == 0 and x.sign() == 0


SIGN_RULES = textwrap.dedent("""\
    - name: relu_after_conv_of_relus_is_redundant
      doc: a conv of two non-negative tensors is non-negative (a proof Z3 alone does not find in seconds)
      source:
        y: conv2d(relu(x), relu(w), activation=relu, **c)
      target:
        y: conv2d(relu(x), relu(w), activation=none, **c)
      verify: {shapes: {x: [1, C, H, W], w: [O, C, K, K]}, dims: {K: [1, 3]}}

    - name: relu_after_conv_of_relu_input_is_not_redundant
      source:
        y: conv2d(relu(x), w, activation=relu, **c)
      target:
        y: conv2d(relu(x), w, activation=none, **c)
      verify: {shapes: {x: [1, C, H, W], w: [O, C, K, K]}, dims: {K: [1, 3]}}
    """)


def test_relu_sign_reasoning_proves_and_still_refutes(solver_calls):
    rules = _rules(SIGN_RULES)
    res = bounded_check(rules["relu_after_conv_of_relus_is_redundant"], numeric_first=False)
    assert res.status == "proven", res.detail
    assert solver_calls == []
    res = bounded_check(rules["relu_after_conv_of_relu_input_is_not_redundant"], numeric_first=False)
    assert res.status == "refuted" and res.counterexample["kind"] == "z3"


@pytest.mark.parametrize("shapes", [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (3, 4)),
                                    ((4,), (4,)), ((1, 2, 3), (2, 3, 2))], ids=str)
def test_matmul_over_polynomials_matches_numpy(shapes):
    from taso_tvm.graph.ops import OPS

    rng = np.random.default_rng(2)
    ring = Ring()
    vals = [rng.integers(-3, 4, s) for s in shapes]
    syms, values = [], {}
    for k, v in enumerate(vals):
        arr = np.empty(v.shape, dtype=object)
        for idx in np.ndindex(v.shape):
            arr[idx] = ring.var(f"v{k}{idx}")
            values[f"v{k}{idx}"] = int(v[idx])
        syms.append(arr)
    if shapes == ((2, 1, 3, 4), (3, 4)):  # inner dimensions must agree: transpose the second
        vals[1], syms[1] = vals[1].T, syms[1].T
    (y,) = OPS["matmul"].z3(syms, {"activation": "none"})
    ref = np.matmul(vals[0], vals[1])
    assert y.shape == np.shape(ref)
    got = np.array([float(p.evaluate(values)) for p in y.ravel()]).reshape(y.shape)
    np.testing.assert_array_equal(got, ref)


def test_polynomials_over_budget_fall_back_to_z3_terms(monkeypatch, solver_calls):
    """Where the expanded polynomials would be too large the instance is decided on Z3 terms, with the same
    verdicts."""
    from taso_tvm.rules.verify import poly

    ring = Ring(budget=3)
    x, y = ring.var("x"), ring.var("y")
    with pytest.raises(poly.BudgetExceeded):
        (x + y) * (x - y)
    monkeypatch.setattr(poly, "PRODUCT_BUDGET", 10)
    rules = _rules(CONV_RULES)
    assert bounded_check(rules["conv_kernel_sum"]).status == "proven"
    wrong = _rules(WRONG_CONV_RULES)["same_padding_as_symmetric"]
    res = bounded_check(wrong, numeric_first=False)
    assert res.status == "refuted" and res.counterexample["kind"] == "z3"
