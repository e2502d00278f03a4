"""The shipped axioms, verified once per test session (cold, in parallel), for the verifier tests."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def verified_axioms() -> tuple:
    from taso_tvm.rules.verify import load_axioms, verify_axioms
    good, results = verify_axioms(load_axioms(), jobs=2, use_cache=False)
    assert all(r.ok for r in results), [(r.rule, r.status) for r in results if not r.ok]
    return tuple(good)
