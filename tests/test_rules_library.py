"""The shipped rule library: every rule verifies, and every rule is right on random numbers with NumPy (a check of
the rules that does not go through the Z3 semantics)."""
from __future__ import annotations

import numpy as np
import pytest

from taso_tvm.rules import apply_match, find_matches, read_rule_files
from taso_tvm.rules.verify.axiomatic import axiom_ops
from taso_tvm.rules.verify.instances import numpy_check
from taso_tvm.rules.verify.plan import iter_instances
from taso_tvm.rules.ruleset import library_files
from taso_tvm.rules.verify.verdict import load_axioms, verify_axioms, verify_rules
from verified_axioms import seed_cache

LIBRARY = read_rule_files(library_files())
AXIOM_OPS = axiom_ops(load_axioms())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Verify the whole library cold (fresh cache), in parallel."""
    from taso_tvm.rules.verify.verdict import Cache
    cache = Cache(seed_cache(tmp_path_factory.mktemp("cache")))  # the axioms verified once per session, cold
    axioms, ax_results = verify_axioms(load_axioms(), jobs=2, cache=cache)
    assert all(r.ok for r in ax_results), [(r.rule, r.status) for r in ax_results if not r.ok]
    results = verify_rules(LIBRARY, jobs=2, axioms=axioms, cache=cache)
    assert not any(r.cached for r in results)  # the rules themselves verified cold
    return dict(zip((r.name for r in LIBRARY), results))


def test_library_size_and_families():
    fams = {}
    for r in LIBRARY:
        fams.setdefault(r.family, []).append(r.name)
    assert len(LIBRARY) >= 45
    for fam in ("fusion", "batchnorm", "merge_shared_input", "merge_shared_weight", "concat_inputs", "linearity",
                "reassociation", "elementwise_concat", "split_concat", "layout", "grouped_conv", "packing"):
        assert fam in fams, fam
    names = {r.name for r in LIBRARY}
    assert {"fuse_conv_relu", "fuse_matmul_relu", "fold_conv_batchnorm", "fold_conv_bias_batchnorm",
            "enlarge_conv_kernel", "merge_convs_sharing_input", "merge_conv_bias_sharing_input", "merge_gconv",
            "merge_qkv_projections", "merge_matmuls_sharing_weight", "matmul_concat_inputs"} <= names


@pytest.mark.parametrize("rule", LIBRARY, ids=lambda r: r.name)
def test_rule_verifies(rule, results):
    res = results[rule.name]
    assert res.status == "verified", [(m.method, m.status, m.detail) for m in res.methods]
    bounded = res.method("bounded")
    assert bounded.status == "proven" and bounded.instances >= 2
    axiomatic = res.method("axiomatic")
    if not rule.verify.axiomatic:  # the rule opts out (e.g. an identity-kernel constant no axiom describes)
        assert axiomatic.status == "skipped" and "disabled by the rule" in axiomatic.detail
    elif rule.ops <= AXIOM_OPS:
        assert axiomatic.status == "proven", axiomatic.detail  # its operators have axioms: proven both ways
    else:
        assert axiomatic.status == "skipped"


@pytest.mark.parametrize("rule", LIBRARY, ids=lambda r: r.name)
def test_rule_holds_on_random_numbers(rule):
    """Build the source at random small shapes (other instances than the verifier's), apply, evaluate both."""
    rng = np.random.default_rng(7)
    n = 0
    for inst in iter_instances(rule, max_instances=4, seed=1):
        ok, detail, _ = numpy_check(inst, rng)
        assert ok, f"{inst.describe()}: {detail}"
        n += 1
    assert n >= 1


def test_rule_holds_at_larger_shapes():
    """A few rules at realistic sizes (kernels and channels beyond the verifier's bounds)."""
    from taso_tvm.graph import NodeStore, TensorGraph, TensorType
    byname = {r.name: r for r in LIBRARY}
    rng = np.random.default_rng(0)
    s = NodeStore()
    x = s.input("x", TensorType((2, 16, 12, 12), "float32"))
    w1 = s.weight(rng.standard_normal((24, 16, 1, 1)).astype(np.float32))
    w3 = s.weight(rng.standard_normal((32, 16, 5, 5)).astype(np.float32))
    b1 = s.weight(rng.standard_normal((1, 24, 1, 1)).astype(np.float32))
    b3 = s.weight(rng.standard_normal((1, 32, 1, 1)).astype(np.float32))
    (a,) = s.add("add", [s.add("conv2d", [x, w1], strides=2)[0], b1])
    (b,) = s.add("add", [s.add("conv2d", [x, w3], strides=2, padding=2)[0], b3])
    g = TensorGraph(s, [a, b])
    rule = byname["merge_convs_enlarge_bias"]
    (m,) = find_matches(rule, g)
    g2 = apply_match(rule, g, m)
    feeds = {"x": rng.standard_normal((2, 16, 12, 12)).astype(np.float32)}
    for p, q in zip(g.evaluate(feeds), g2.evaluate(feeds)):
        np.testing.assert_allclose(p, q, rtol=1e-4, atol=1e-3)
