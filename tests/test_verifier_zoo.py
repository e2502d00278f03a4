"""The verifier against zoos: wrong rules (each wrong only at a combination of values, for some shapes, or for signed
inputs) are all refuted with counterexamples NumPy confirms; true rules outside the library are all proven."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taso_tvm.graph import GraphError
from taso_tvm.graph.types import freeze
from taso_tvm.rules import read_rule_files
from taso_tvm.rules.verify.instances import build_instance
from taso_tvm.rules.matching.rewrite import build_target
from taso_tvm.rules.verify.verdict import verify_rule
from taso_tvm.rules.verify.bounded import bounded_check
from verified_axioms import verified_axioms

DATA = Path(__file__).parent / "data"
WRONG = read_rule_files([DATA / "wrong_rules.yaml"])
TRUE = read_rule_files([DATA / "true_rules.yaml"])


@pytest.fixture(scope="module")
def axioms():
    return list(verified_axioms())


def recheck(rule, ce) -> str:
    """Rebuild the counterexample's instance and confirm it with NumPy: the target does not build, has another
    type, or computes other numbers. Returns what was confirmed."""
    attrs = {k: freeze(v) for k, v in ce["attrs"].items()}
    values = {k: np.asarray(v, dtype=np.float64) for k, v in ce.get("values", {}).items()}
    inst = build_instance(rule, {k: tuple(v) for k, v in ce["shapes"].items()}, lambda name, dom: attrs[name],
                          values or None)
    try:
        mapping = build_target(rule, inst.graph, inst.match)
    except GraphError:
        assert ce["kind"] in ("build", "type")
        return "target does not build / changes type"
    assert ce["kind"] in ("numeric", "z3"), ce
    tgt = inst.graph.replace(mapping)
    feeds = {k: v for k, v in values.items() if k not in inst.weight_vars}
    src = [np.asarray(a, np.float64) for a in inst.graph.evaluate(feeds)]
    dst = [np.asarray(b, np.float64) for b in tgt.evaluate(feeds)]
    assert any(a.shape != b.shape or not np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True)
               for a, b in zip(src, dst)), "NumPy does not confirm the counterexample"
    return "numbers differ"


def test_zoos_are_large_enough():
    assert len(WRONG) >= 30 and len(TRUE) >= 10


@pytest.mark.parametrize("rule", WRONG, ids=lambda r: r.name)
def test_wrong_rule_is_refuted_and_the_counterexample_is_real(rule):
    m = bounded_check(rule)
    assert m.status == "refuted", (m.status, m.detail)
    recheck(rule, m.counterexample)


@pytest.mark.parametrize("rule", TRUE, ids=lambda r: r.name)
def test_true_rule_is_proven(rule, axioms):
    res = verify_rule(rule, axioms)
    assert res.status == "verified", [(m.method, m.status, m.detail) for m in res.methods]
    if rule.ops <= {op for a in axioms for op in a.ops}:
        assert res.proof == "bounded+axiomatic", res.proof
        assert res.method("axiomatic").time < 5.0  # well within the 10 s limit
    else:
        assert res.proof.startswith("bounded-only")


@pytest.mark.slow
def test_axioms_never_prove_a_wrong_rule(axioms):
    """The axiomatic method alone, with a longer limit, proves none of the wrong rules."""
    from taso_tvm.rules.verify.verdict import axiomatic_check
    proven = [r.name for r in WRONG if axiomatic_check(r, axioms, timeout=2.0).status == "proven"]
    assert proven == []
