"""Proving rules before they load: two methods and a verdict.

- `verdict`: verify a rule (bounded and axiomatic methods, the verdict, the cache, batches in worker processes);
- `instances`: the concrete instances (shapes, attributes) a bounded proof covers;
- `poly`: exact polynomial values for the bounded proof;
- `axiomatic`: the proof from the axioms (rules/library/axioms.yaml) for every shape;
- `solver_process`: Z3 queries in a separate process under a hard deadline.
"""
from .results import VerifyResult
from .verdict import Cache, load_axioms, verify_axioms, verify_rule, verify_rules

__all__ = ["Cache", "VerifyResult", "load_axioms", "verify_axioms", "verify_rule", "verify_rules"]
