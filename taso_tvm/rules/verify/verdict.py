"""The rule verifier: a bounded symbolic proof and TASO's axiomatic proof, both with Z3, with a persistent cache.

*Bounded*: see `bounded.py` (instances from `instances.py`, exact polynomials from `poly.py`).

*Axiomatic*: see `axiomatic.py`. Applies when every operator of the rule appears in the axioms. Its query runs
under a Z3 resource limit (`AXIOMATIC_RLIMIT`, deterministic) as well as the rule's timeout.

A rule is *verified* when the bounded proof covers its choices and succeeds, and the axiomatic proof succeeds or does
not apply (then it is "bounded-only"). Every solver call runs in a solver process killed at a hard deadline (`solver_process.py`): "unknown" means
"not verified", never a hang.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Optional

from ..language.rule import Rule
from ..language.compile import parse_rules
from .solver_process import check_smt2
from .bounded import _sweep, bounded_check
from .results import MethodResult, VerifyResult

log = logging.getLogger(__name__)

VERIFIER_VERSION = "taso-tvm-verify-7"  # bump when a change can alter a verdict
LIBRARY_DIR = Path(__file__).parent.parent / "library"
AXIOMS_FILE = LIBRARY_DIR / "axioms.yaml"
# Z3's resource limit for one axiomatic proof (deterministic, unlike a wall-clock limit): every proof of the library
# and the test suites takes at most ~22,000 units, and a query that cannot succeed burns ~200,000 units per second,
# so it stops in about a second instead of at the timeout. Running out is "unknown", never "proven".
AXIOMATIC_RLIMIT = 250_000


# ---------------------------------------------------------------- axioms
def load_axioms(path: Optional[Path] = None) -> list:
    path = Path(path or AXIOMS_FILE)
    return parse_rules(path.read_text(), str(path)) if path.exists() else []


def axioms_digest(axioms: list) -> str:
    h = hashlib.sha256()
    for a in axioms:
        h.update(a.canonical.encode())
    return h.hexdigest()


def axiomatic_check(rule: Rule, axioms: list, timeout: Optional[float] = None) -> MethodResult:
    from .axiomatic import axiom_ops

    t0 = time.perf_counter()
    if not rule.verify.axiomatic:
        return MethodResult("axiomatic", "skipped", f"disabled by the rule: {rule.verify.bounded_only}")
    if not axioms:
        return MethodResult("axiomatic", "skipped", "no axioms")
    missing = rule.ops - axiom_ops(axioms)
    if missing:
        return MethodResult("axiomatic", "skipped", f"no axioms for {', '.join(sorted(missing))}")
    limit = timeout or rule.verify.timeout
    status, detail = _prove_axiomatic(rule, axioms, limit)
    return MethodResult("axiomatic", status, detail, time.perf_counter() - t0)


# ---------------------------------------------------------------- solver calls under a hard deadline
def _context():
    """The start method for solver and worker processes: forkserver (never fork: the parent may hold threads and
    TVM state), preloading this module so a new process starts in milliseconds."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


@contextlib.contextmanager
def main_not_reimported():
    """Start processes without re-running the caller's main script in them (forkserver and spawn children import
    `__main__` by path, which re-runs a script that calls load_rules() at top level). Our children need only
    this package."""
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        for k in saved:
            if k == "__file__":
                delattr(main, k)
            else:
                setattr(main, k, None)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def relevant_axioms(rule: Rule, axioms: list) -> list:
    """The axioms a derivation of the rule can use: those whose source operators the rule has, or that the
    target sides of such axioms introduce (closed under that). Fewer quantifiers, shorter searches."""
    ops = set(rule.ops)
    chosen: list = []
    changed = True
    while changed:
        changed = False
        for ax in axioms:
            if ax in chosen:
                continue
            if {n.op for n in ax.source} <= ops:
                chosen.append(ax)
                new = {n.op for n in ax.target if n.op != "const"} - ops
                ops |= new
                changed = True
    return [ax for ax in axioms if ax in chosen]


def _prove_axiomatic(rule: Rule, axioms: list, limit: float) -> tuple:
    """The axiomatic proof from the relevant axioms; Z3 runs in the solver process under a hard deadline."""
    from .axiomatic import Encoder, axiom_formulas, prove

    # a fresh encoder per proof: the query's text (names, declaration order) depends on the rule and its axioms
    # alone, never on what this process encoded before, so Z3 takes the same path in every run
    relevant = relevant_axioms(rule, axioms)
    names = {ax.name for ax in relevant}
    enc = Encoder()
    status, detail = prove(rule, axioms, limit, formulas=axiom_formulas(enc, relevant), enc=enc,
                           check=lambda solver: check_smt2(solver.to_smt2(), limit,
                                                           {"smt.mbqi": False, "rlimit": AXIOMATIC_RLIMIT}))
    if status == "proven":
        return status, f"{len(names)} of {len(axioms)} axioms"
    if "canceled" in detail or "resource limit" in detail:
        return status, f"solver: resource limit ({AXIOMATIC_RLIMIT} units) reached"
    return status, detail


def verify_rule(rule: Rule, axioms: Optional[list] = None, is_axiom: bool = False,
                axiomatic_first: bool = False) -> VerifyResult:
    """Verify one rule (an axiom gets the bounded proof only, with a target that must build).

    Verified: the bounded proof covers the rule's choices and proves every instance, and the axiomatic proof
    succeeds, or does not apply (operators without axioms, or an opt-out with a reason: "bounded-only").
    `axiomatic_first` (the generator's many candidates): the axiomatic proof runs first, and where it fails, only
    the off-plan sweep looks for a counterexample (refuted, else unproven) instead of the whole bounded proof; the
    verdict "verified" still needs both proofs."""
    t0 = time.perf_counter()
    if axiomatic_first and not is_axiom:
        ax = axiomatic_check(rule, axioms or [])
        if ax.status == "unknown":
            t1 = time.perf_counter()
            refuted = _sweep(rule) if rule.tgt_outputs else None
            dt = time.perf_counter() - t1
            if refuted is not None:
                b = MethodResult("bounded", "refuted", f"off-plan sweep: {refuted[1]}", dt, 1, refuted[2])
                return VerifyResult(rule.name, "refuted", [b, ax], time.perf_counter() - t0)
            b = MethodResult("bounded", "skipped", "not run: the axiomatic proof failed (the sweep found no "
                             "counterexample)", dt)
            return VerifyResult(rule.name, "unproven", [b, ax], time.perf_counter() - t0)
        methods = [bounded_check(rule), ax]
        if methods[0].status != "proven":
            methods = methods[:1]
    else:
        methods = [bounded_check(rule, strict=is_axiom)]
        if not is_axiom and methods[0].status == "proven":
            methods.append(axiomatic_check(rule, axioms or []))
    b = methods[0].status
    proof = ""
    if b == "refuted":
        status = "refuted"
    elif b == "proven" and all(m.status in ("proven", "skipped") for m in methods):
        status = "verified"
        ax = methods[1] if len(methods) > 1 else None
        proof = "bounded" if is_axiom else "bounded+axiomatic" if ax and ax.status == "proven" else \
            f"bounded-only ({ax.detail if ax else 'no axioms'})"
    else:
        status = "unproven"
    return VerifyResult(rule.name, status, methods, time.perf_counter() - t0, proof=proof)


# ---------------------------------------------------------------- cache
def cache_path() -> Path:
    d = os.environ.get("TASO_TVM_CACHE_DIR")
    base = Path(d) if d else Path.home() / ".cache" / "taso_tvm"
    return base / "rules.json"


class Cache:
    """Verification results by rule hash, in a JSON file (merged and replaced atomically on write)."""

    def __init__(self, path: Optional[Path] = None):
        self.path = Path(path) if path else cache_path()
        self.data = self._read()

    def _read(self) -> dict:
        try:
            d = json.loads(self.path.read_text())
            return d if isinstance(d, dict) and d.get("version") == VERIFIER_VERSION else {"version": VERIFIER_VERSION}
        except (OSError, ValueError):
            return {"version": VERIFIER_VERSION}

    def get(self, key: str) -> Optional[VerifyResult]:
        d = self.data.get("results", {}).get(key)
        return VerifyResult.from_dict(d) if d else None

    def put_many(self, items: dict) -> None:
        if not items:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            disk = self._read()
            disk.setdefault("results", {}).update({k: v.to_dict() for k, v in items.items()})
            from ...fileio import atomic_write_text

            atomic_write_text(str(self.path), json.dumps(disk))  # a temporary file renamed into place
            self.data = disk
        except OSError as err:
            log.warning("cannot write the rule cache %s: %s", self.path, err)


def axioms_file_hash(path: Optional[Path] = None) -> str:
    """sha256 of the axiom file's bytes (any edit of the file re-verifies every rule)."""
    try:
        return hashlib.sha256(Path(path or AXIOMS_FILE).read_bytes()).hexdigest()
    except OSError:
        return "no-axioms-file"


def rule_key(rule: Rule, axioms_hash: str, is_axiom: bool = False) -> str:
    """The cache key: the verifier version, the rule's canonical form (not its name) and, for rules, the axioms
    used (their content and the axiom file's hash)."""
    h = hashlib.sha256()
    h.update(VERIFIER_VERSION.encode())
    h.update(b"axiom" if is_axiom else b"rule")
    h.update(rule.canonical.encode())
    if not is_axiom:
        h.update(axioms_hash.encode())
        h.update(axioms_file_hash().encode())
    return h.hexdigest()


# ---------------------------------------------------------------- batch verification
_POOL_WORK: dict = {}


def _pool_init(rules: list, axioms: list, is_axiom: bool, axiomatic_first: bool = False) -> None:
    _POOL_WORK["job"] = (rules, axioms, is_axiom, axiomatic_first)
    logging.getLogger("taso_tvm").setLevel(logging.WARNING)


def _work(i: int) -> tuple:
    rules, axioms, is_axiom, first = _POOL_WORK["job"]
    return i, verify_rule(rules[i], axioms, is_axiom, first)


def _run(rules: list, axioms: list, is_axiom: bool, jobs: int, axiomatic_first: bool = False) -> list:
    """verify_rule for each rule, in `jobs` worker processes (forkserver; each keeps its own solver process)."""
    if jobs <= 1 or len(rules) <= 1 or multiprocessing.current_process().daemon:
        return [verify_rule(r, axioms, is_axiom, axiomatic_first) for r in rules]
    from concurrent.futures import ProcessPoolExecutor, as_completed

    out: list = [None] * len(rules)
    with main_not_reimported(), ProcessPoolExecutor(min(jobs, len(rules)), mp_context=_context(),
                                                     initializer=_pool_init, initargs=(rules, axioms, is_axiom,
                                                                                  axiomatic_first)) as pool:
        for fut in as_completed([pool.submit(_work, i) for i in range(len(rules))]):
            i, res = fut.result()
            out[i] = res
    return out


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def verify_axioms(axioms: Optional[list] = None, jobs: Optional[int] = None, use_cache: bool = True,
                  cache: Optional[Cache] = None) -> tuple[list, list]:
    """Bounded-check the axioms; returns (verified axioms, results)."""
    axioms = load_axioms() if axioms is None else axioms
    results = _verify_batch(axioms, [], True, jobs, use_cache, cache)
    good = [a for a, r in zip(axioms, results) if r.ok]
    for a, r in zip(axioms, results):
        if not r.ok:
            log.error("axiom %s is %s (%s); it is not used", a.name, r.status, r.methods[0].detail)
    return good, results


def _verify_batch(rules: list, axioms: list, is_axiom: bool, jobs: Optional[int], use_cache: bool,
                  cache: Optional[Cache], axiomatic_first: bool = False) -> list:
    cache = cache or (Cache() if use_cache else None)
    ah = axioms_digest(axioms)
    keys = [rule_key(r, ah, is_axiom) for r in rules]
    results: list = [None] * len(rules)
    todo = []
    for i, (r, k) in enumerate(zip(rules, keys)):
        hit = cache.get(k) if cache is not None else None
        if hit is not None:
            hit.digest, hit.rule = k, r.name  # the key is the rule's content: the name may differ
            results[i] = hit
        else:
            todo.append(i)
    if todo:
        log.info("verifying %d %s(s)", len(todo), "axiom" if is_axiom else "rule")
        fresh = _run([rules[i] for i in todo], axioms, is_axiom, jobs or default_jobs(), axiomatic_first)
        store = {}
        for i, res in zip(todo, fresh):
            res.digest = keys[i]
            results[i] = res
            if res.status in ("verified", "refuted"):
                store[keys[i]] = res
        if cache is not None:
            cache.put_many(store)
    return results


def verify_rules(rules: list, jobs: Optional[int] = None, use_cache: bool = True,
                 axioms: Optional[list] = None, cache: Optional[Cache] = None,
                 axiomatic_first: bool = False) -> list:
    """Verify rules (cached by rule hash). Axioms default to the shipped ones, themselves verified first.
    `axiomatic_first`: see `verify_rule` (the same verdicts, sooner for rules the axioms do not prove)."""
    cache = cache or (Cache() if use_cache else None)
    if axioms is None:
        axioms, _ = verify_axioms(jobs=jobs, use_cache=use_cache, cache=cache)
    return _verify_batch(rules, axioms, False, jobs, use_cache, cache, axiomatic_first)
