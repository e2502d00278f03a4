"""The rule verifier: a bounded symbolic proof and TASO's axiomatic proof, both with Z3, with a persistent cache.

*Bounded*: the rule is instantiated at the small shapes and attribute values that cover its choices by combination
(`instances.py`: every combination, or every pair, plus one instance with every dim >= 4, plus *wide* instances with
some dims grown beyond their domains, checked with NumPy); a target that does not build or changes type where the
source builds and the constraints hold is a counterexample; both sides are
evaluated with each operator's Z3 semantics (the registry's `z3` slot) and every output element is proven equal.
The slots run first over exact polynomials of the input elements (`poly.py`: rational coefficients; relu, max,
reciprocals and other functions as atoms of their normalised arguments): equal normal forms prove an element without
a solver call. Elements whose normal forms differ (and every element, where some value is not a polynomial) are
Z3 terms over one Z3 Real per input element, with the functions' exact semantics (relu and max as If, the rest
uninterpreted); Z3's own normalisation, then the solver decides them. A disagreement comes back as a counterexample
(shapes, attributes, input values), confirmed with the NumPy semantics when it involves uninterpreted functions.
Before the bounded proof is declared, an *off-plan sweep* (`_sweep`) tries random assignments with every dim also
from 1..9: where the source builds and the constraints hold, the target must build with the same types and, at small
sizes, agree on small integer inputs (NumPy, float64): a net for rules false only beyond the verify.dims domains.

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
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from ...graph import GraphError, TensorGraph
from ...graph.tensor_graph import CycleError
from .instances import Instance, NoInstance, content_seed, numpy_check, plan_instances, sweep_instances
from ..language.rule import Rule
from ..language.compile import parse_rules
from ..matching.rewrite import TypeMismatch, build_target
from .poly import Ring, Z3Converter, lift_array
from .solver_process import check_smt2

log = logging.getLogger(__name__)

VERIFIER_VERSION = "taso-tvm-verify-7"  # bump when a change can alter a verdict
LIBRARY_DIR = Path(__file__).parent.parent / "library"
AXIOMS_FILE = LIBRARY_DIR / "axioms.yaml"
BOUNDED_BUDGET_S = 60.0  # per rule, all instances together
SWEEP_TRIES = 32  # assignments the refutation sweep tries (`_sweep`)
SWEEP_ELEMENTS = 2000  # the sweep evaluates instances with at most this many input elements
# Z3's resource limit for one axiomatic proof (deterministic, unlike a wall-clock limit): every proof of the library
# and the test suites takes at most ~22,000 units, and a query that cannot succeed burns ~200,000 units per second,
# so it stops in about a second instead of at the timeout. Running out is "unknown", never "proven".
AXIOMATIC_RLIMIT = 250_000


STATUSES = ("verified", "refuted", "unproven")


@dataclass
class MethodResult:
    method: str  # 'bounded' | 'axiomatic'
    status: str  # 'proven' | 'refuted' | 'unknown' | 'skipped'
    detail: str = ""
    time: float = 0.0
    instances: int = 0
    counterexample: Optional[dict] = None
    coverage: str = ""  # bounded: which combinations the instances cover


@dataclass
class VerifyResult:
    rule: str
    status: str  # 'verified' | 'refuted' | 'unproven'
    methods: list = field(default_factory=list)
    time: float = 0.0
    digest: str = ""
    cached: bool = False
    proof: str = ""  # how a verified rule was proven: 'bounded+axiomatic' | 'bounded-only (<why>)'

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    @property
    def counterexample(self) -> Optional[dict]:
        for m in self.methods:
            if m.counterexample:
                return m.counterexample
        return None

    def method(self, name: str) -> Optional[MethodResult]:
        return next((m for m in self.methods if m.method == name), None)

    def reason(self) -> str:
        """One line on why the rule is not verified: its counterexample (instance, detail, input values), else what
        each method that did not prove it says."""
        ce = self.counterexample
        if ce:
            parts = [ce.get("instance", ""), ce.get("detail", "")]
            if ce.get("inputs"):
                parts.append("inputs " + json.dumps(ce["inputs"]))
            return "; ".join(p for p in parts if p)
        return "; ".join(f"{m.method}: {m.detail}" for m in self.methods if m.status != "proven")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("cached")
        return d

    @staticmethod
    def from_dict(d: dict) -> "VerifyResult":
        return VerifyResult(d["rule"], d["status"], [MethodResult(**m) for m in d["methods"]], d["time"],
                            d.get("digest", ""), cached=True, proof=d.get("proof", ""))


def tally(results: Iterable[VerifyResult]) -> Counter:
    """How many results have each status (every status in `STATUSES` is present, 0 when none has it)."""
    out = Counter({s: 0 for s in STATUSES})
    out.update(r.status for r in results)
    return out


# ---------------------------------------------------------------- z3 evaluation
def _obj(v: Any) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v if v.dtype == object else v.astype(object)
    out = np.empty((), dtype=object)
    out[()] = v
    return out


def z3_evaluate(graph: TensorGraph, refs: Iterable, symbols: dict, memo: dict, ring: Optional[Ring] = None) -> list:
    """Evaluate tensors with the registry's Z3 semantics. `symbols`: input name or weight key -> object array.

    With `ring`, the values are exact polynomials of that ring (`poly.py`): constants and every operator's outputs
    are lifted into it (TypeError / ValueError where an element is not a polynomial or a finite number)."""
    from ...graph.ops.elementwise import z3_val
    from ...graph.tensor_graph import weight_array

    conv = z3_val if ring is None else ring.lift

    refs = list(refs)
    for node in TensorGraph(graph.store, refs).topo_order():
        if node.id in memo:
            continue
        if node.op == "input":
            out = [symbols[node.attrs["name"]]]
        elif node.op == "weight":
            key = node.attrs["key"]
            if key in symbols:
                out = [symbols[key]]
            else:
                arr = np.asarray(weight_array(node))
                z = np.empty(arr.shape, dtype=object)
                for i in np.ndindex(arr.shape):
                    z[i] = conv(arr[i].item())
                out = [z]
        elif node.op == "opaque" or node.opdef.z3 is None:
            raise GraphError(f"operator {node.op} has no Z3 semantics")
        else:
            args = [memo[i][j] for i, j in node.inputs]
            out = [_obj(v) for v in node.opdef.z3(args, node.attrs)]
            if ring is not None:
                out = [lift_array(ring, v) for v in out]
        memo[node.id] = out
    return [memo[i][j] for i, j in refs]


def _symbols(inst: Instance, ring: Optional[Ring] = None) -> dict:
    """A symbol per input element, named `v[i, j, ...]`: a z3 Real, or with `ring`, that ring's variable."""
    import z3

    make = z3.Real if ring is None else ring.var
    syms = {}
    for v in inst.rule.inputs:
        shape = inst.shapes[v]
        arr = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            arr[idx] = make(f"{v}{list(idx)}")
        syms[f"var:{v}" if v in inst.weight_vars else v] = arr
    return syms


def _num(v: Any) -> float:
    import z3

    if z3.is_rational_value(v):
        f = v.as_fraction()
        return float(Fraction(f.numerator, f.denominator))
    if z3.is_algebraic_value(v):
        return float(v.approx(12).as_fraction())
    return 0.0


def _has_uf(exprs: list) -> bool:
    import z3

    todo, seen = list(exprs), set()
    while todo:
        e = todo.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED and e.num_args() > 0:
            return True
        todo.extend(e.children())
    return False


def _summary(arr: np.ndarray, limit: int = 12) -> Any:
    flat = [round(float(x), 6) for x in np.asarray(arr, dtype=np.float64).ravel()[:limit]]
    return flat if arr.size > limit else np.asarray(flat).reshape(arr.shape).tolist() if arr.ndim else flat[0]


def _counterexample(inst: Instance, kind: str, detail: str, values: Optional[dict] = None) -> dict:
    ce = {"kind": kind, "instance": inst.describe(), "shapes": {k: list(v) for k, v in inst.shapes.items()},
          "attrs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in inst.choices.items()},
          "detail": detail}
    if values is not None:
        ce["inputs"] = {k: _summary(np.asarray(v)) for k, v in values.items()}  # for reading
        ce["values"] = {k: np.asarray(v, dtype=np.float64).tolist() for k, v in values.items()}  # for re-checking
    return ce


def _numpy_outputs(inst: Instance, tgt: TensorGraph, feeds: dict) -> list:
    store = inst.graph.store
    for v in inst.weight_vars:
        store.nodes[inst.match.tensors[v][0]].value = feeds[v]
    with np.errstate(all="ignore"):  # a NaN or inf is compared like any value, not warned about
        a = inst.graph.evaluate({k: feeds[k] for k in inst.rule.inputs if k not in inst.weight_vars})
        b = tgt.evaluate({k: feeds[k] for k in inst.rule.inputs if k not in inst.weight_vars})
    return [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in zip(a, b)]


def check_instance(inst: Instance, timeout: float, strict: bool = False, numeric_first: bool = True) -> tuple:
    """Prove one instance. Returns (status, detail, counterexample): proven / refuted / unknown / inapplicable.

    `numeric_first`: try random numbers with NumPy first (a concrete counterexample, found fast)."""
    try:
        _check_facts(inst)
        if not inst.rule.tgt_outputs:
            return "proven", "", None
        tgt = _rewrite(inst)
        poly = _poly_sides(inst, tgt)
        if poly is not None and _poly_equal(poly):
            return "proven", "", None
        if numeric_first:  # fast refutation with concrete numbers
            ok, detail, feeds = numpy_check(inst)
            if not ok:
                return "refuted", detail, _counterexample(inst, "numeric", detail, feeds)
        if poly is not None:
            return _poly_solve(inst, tgt, poly, timeout)
        syms = _symbols(inst)
        memo: dict = {}
        try:
            src = z3_evaluate(inst.graph, inst.graph.outputs, syms, memo)
            dst = z3_evaluate(tgt, tgt.outputs, syms, memo)
        except GraphError as err:
            return "unknown", str(err), None
        residual = _residual(inst, src, dst)
        return _solve(inst, tgt, syms, residual, timeout) if residual else ("proven", "", None)
    except _Verdict as v:
        return v.result


class _Verdict(Exception):
    """A verdict on an instance reached before its proof's end: (status, detail, counterexample)."""

    def __init__(self, status: str, detail: str, counterexample: Optional[dict] = None):
        super().__init__(detail)
        self.result = (status, detail, counterexample)


def _check_facts(inst: Instance) -> None:
    """The rule's facts hold at the instance (else a `_Verdict`: refuted, or unknown when one is not evaluable)."""
    if not inst.rule.facts:
        return
    from ..language import expr as E
    from ..matching.matcher import MatchEnv, graph_index

    env = MatchEnv(inst.match, graph_index(inst.graph))
    for f in inst.rule.facts:
        try:
            holds = bool(E.evaluate(f.expr, env))
        except E.ExprError as err:
            raise _Verdict("unknown", f"fact '{f.text}' not evaluable at {inst.describe()}: {err}") from None
        if not holds:
            raise _Verdict("refuted", f"fact '{f.text}' is false", _counterexample(inst, "fact", f.text))


def _rewrite(inst: Instance) -> TensorGraph:
    """The instance's graph rewritten by the rule. A target that does not build or changes a type where the source
    builds and the constraints hold is a counterexample (a refuting `_Verdict`); a cyclic rewrite is unknown."""
    try:
        mapping = build_target(inst.rule, inst.graph, inst.match)
    except TypeMismatch as err:
        raise _Verdict("refuted", str(err), _counterexample(inst, "type", str(err))) from None
    except GraphError as err:
        raise _Verdict("refuted", f"the target does not build: {err}",
                       _counterexample(inst, "build", str(err))) from None
    try:
        return inst.graph.replace(mapping)
    except CycleError as err:  # the target reads what it replaces: no rewrite to compare
        raise _Verdict("unknown", f"the rewrite is cyclic at {inst.describe()}: {err}") from None


def _poly_sides(inst: Instance, tgt: TensorGraph) -> Optional[tuple]:
    """Both sides' outputs as exact polynomials (`poly.py`): (ring, source outputs, target outputs), or None when
    some value is not a polynomial of the input elements (the Z3 evaluation decides then)."""
    ring = Ring()
    memo: dict = {}
    try:
        syms = _symbols(inst, ring)
        src = z3_evaluate(inst.graph, inst.graph.outputs, syms, memo, ring)
        dst = z3_evaluate(tgt, tgt.outputs, syms, memo, ring)
    except Exception as err:  # noqa: BLE001  (an operator outside polynomial arithmetic: the Z3 path decides)
        log.debug("no polynomial evaluation at %s: %s", inst.describe(), err)
        return None
    return ring, src, dst


def _poly_equal(poly: tuple) -> bool:
    """Every output has the same shape and every element the same normal form on both sides: a proof."""
    _, src, dst = poly
    return all(a.shape == b.shape and all(x.same(y) for x, y in zip(a.flat, b.flat)) for a, b in zip(src, dst))


def _poly_solve(inst: Instance, tgt: TensorGraph, poly: tuple, timeout: float) -> tuple:
    """The elements whose normal forms differ go to the solver, with the functions' exact semantics (a refuting
    `_Verdict` when an output's shape differs)."""
    ring, src, dst = poly
    differ = []
    for o, (a, b) in enumerate(zip(src, dst)):
        _same_shape(inst, o, a, b)
        differ += [(o, idx, a[idx], b[idx]) for idx in np.ndindex(a.shape) if not a[idx].same(b[idx])]
    conv = Z3Converter(ring)
    residual = [(o, idx, x, y) for o, idx, x, y in ((o, i, conv.poly(p), conv.poly(q)) for o, i, p, q in differ)
                if not _simplify_equal(x, y)]
    return _solve(inst, tgt, _symbols(inst), residual, timeout) if residual else ("proven", "", None)


def _same_shape(inst: Instance, o: int, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise _Verdict("refuted", f"output {inst.rule.outputs[o]}: shape {a.shape} vs {b.shape}",
                       _counterexample(inst, "type", "shape mismatch"))


def _simplify_equal(x: Any, y: Any) -> bool:
    """x and y are syntactically equal, or Z3's sum-of-monomials normalisation of x - y is 0."""
    import z3

    if x.eq(y):
        return True
    d = z3.simplify(x - y, som=True)
    return z3.is_rational_value(d) and d.as_fraction() == 0


def _residual(inst: Instance, src: list, dst: list) -> list:
    """[(output, index, source element, target element)] for the elements that polynomial normalisation does not
    prove equal (a refuting `_Verdict` when an output's shape differs)."""
    from ...graph.ops.elementwise import z3_val

    residual = []
    for o, (a, b) in enumerate(zip(src, dst)):
        _same_shape(inst, o, a, b)
        for idx in np.ndindex(a.shape):
            x, y = z3_val(a[idx]), z3_val(b[idx])
            if not _simplify_equal(x, y):
                residual.append((o, idx, x, y))
    return residual


def _solve(inst: Instance, tgt: TensorGraph, syms: dict, residual: list, timeout: float) -> tuple:
    """Ask Z3 whether some residual element can differ: proven, refuted with the model as a counterexample (when
    NumPy confirms it or no uninterpreted function is involved), or unknown."""
    import z3

    s = z3.Solver()
    s.set("timeout", int(timeout * 1000))
    s.add(z3.Or([x != y for _, _, x, y in residual]))
    # the check runs in a child under a hard deadline; a satisfiable query is re-run here for its model
    verdict, why = check_smt2(s.to_smt2(), timeout)
    if verdict == "unsat":
        return "proven", "", None
    if verdict != "sat" or s.check() != z3.sat:
        return "unknown", f"solver: {why} at {inst.describe()}", None
    model = s.model()
    values = {}
    for key, arr in syms.items():
        v = key[4:] if key.startswith("var:") else key
        vals = np.empty(arr.shape, dtype=np.float64)
        for idx in np.ndindex(arr.shape):
            vals[idx] = _num(model.eval(arr[idx], model_completion=True))
        values[v] = vals
    o, idx, x, y = next(((o, i, x, y) for o, i, x, y in residual
                         if z3.is_true(model.eval(x != y, model_completion=True))), residual[0])
    detail = f"output {inst.rule.outputs[o]}{list(idx)}: source {model.eval(x, model_completion=True)} vs target " \
             f"{model.eval(y, model_completion=True)}"
    try:
        pairs = _numpy_outputs(inst, tgt, values)
        confirmed = any(not np.allclose(p, q, rtol=1e-6, atol=1e-9, equal_nan=True) for p, q in pairs)
    except Exception:  # noqa: BLE001  (NumPy may reject a model value, e.g. sqrt of a negative)
        confirmed = False
    if confirmed or not _has_uf([x, y]):
        return "refuted", detail, _counterexample(inst, "z3", detail, values)
    return "unknown", f"a counterexample exists only for some uninterpreted function ({detail})", None


def _numeric_only(inst: Instance, draws: int = 3) -> tuple:
    """An instance beyond the solver's size bound: the rewrite must build, then NumPy on several random draws."""
    try:
        _rewrite(inst)
    except _Verdict as v:
        return v.result
    for k in range(draws):
        ok, detail, feeds = numpy_check(inst, np.random.default_rng(k))
        if not ok:
            return "refuted", detail, _counterexample(inst, "numeric", detail, feeds)
    return "proven", "", None


def _wide_check(inst: Instance) -> tuple:
    """A wide instance (beyond the solver's size bound): the rule's facts hold, then `_numeric_only`."""
    try:
        _check_facts(inst)
    except _Verdict as v:
        return v.result
    return _numeric_only(inst) if inst.rule.tgt_outputs else ("proven", "", None)


def _sweep(rule: Rule, seed: int = 0) -> Optional[tuple]:
    """The refutation net run before the bounded proof is declared: instances off the plan, dimensions also from
    1..9 (`sweep_instances`), where the source builds and the constraints hold. The target must build with the same
    output types, and where the instance is small, both sides must agree on small integer inputs in float64 (NumPy,
    relative tolerance 1e-6). Returns a refuting (status, detail, counterexample), or None."""
    rng = np.random.default_rng(content_seed(rule, seed) % (2 ** 32))
    for inst in sweep_instances(rule, SWEEP_TRIES, seed):
        try:
            tgt = _rewrite(inst)
        except _Verdict as v:
            if v.result[0] == "refuted":
                return v.result
            continue
        if inst.num_elements > SWEEP_ELEMENTS:
            continue
        try:
            ok, detail, feeds = numpy_check(inst, rng, integers=True, tgt=None if inst.weight_vars else tgt)
        except Exception as err:  # noqa: BLE001  (NumPy may reject a value: the symbolic proof has the last word)
            log.debug("sweep: no numeric evaluation at %s: %s", inst.describe(), err)
            continue
        if not ok:
            return "refuted", detail, _counterexample(inst, "numeric", detail, feeds)
    return None


def bounded_check(rule: Rule, timeout: Optional[float] = None, max_instances: Optional[int] = None,
                  strict: bool = False, budget: float = BOUNDED_BUDGET_S, numeric_first: bool = True,
                  seed: int = 0) -> MethodResult:
    """The bounded symbolic proof over the instances that cover the rule's choices (`plan_instances`).

    Proven only when every planned instance is proven and the plan covers every combination (or every pair) of
    the rule's choices; a counterexample at any instance refutes the rule."""
    t0 = time.perf_counter()
    timeout = timeout or rule.verify.timeout
    try:
        plan = plan_instances(rule, seed=seed, max_instances=max_instances)
    except NoInstance as err:
        return MethodResult("bounded", "unknown", str(err), time.perf_counter() - t0, 0)
    proven = 0
    for inst in plan.instances:
        if inst.wide:
            status, detail, ce = _wide_check(inst)
        elif inst.large and inst.num_elements > rule.verify.elements and rule.tgt_outputs and not rule.facts:
            status, detail, ce = _numeric_only(inst)  # beyond the solver's size bound: NumPy, several draws
        else:
            status, detail, ce = check_instance(inst, timeout, strict, numeric_first)
        if status == "refuted":
            return MethodResult("bounded", "refuted", detail, time.perf_counter() - t0, proven + 1, ce,
                                plan.describe())
        if status != "proven":
            return MethodResult("bounded", "unknown", detail, time.perf_counter() - t0, proven,
                                coverage=plan.describe())
        proven += 1
        if time.perf_counter() - t0 > budget:
            return MethodResult("bounded", "unknown", f"time budget ({budget:.0f} s) spent after {proven} of "
                                f"{len(plan.instances)} instances", time.perf_counter() - t0, proven,
                                coverage=plan.describe())
    if not plan.complete:
        return MethodResult("bounded", "unknown", f"coverage falls short: {plan.describe()}",
                            time.perf_counter() - t0, proven, coverage=plan.describe())
    refuted = _sweep(rule, seed) if rule.tgt_outputs else None
    dt = time.perf_counter() - t0
    if refuted is not None:
        return MethodResult("bounded", "refuted", f"off-plan sweep: {refuted[1]}", dt, proven, refuted[2],
                            plan.describe())
    return MethodResult("bounded", "proven", plan.describe(), dt, proven, coverage=plan.describe())


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
def _main_not_reimported():
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
    with _main_not_reimported(), ProcessPoolExecutor(min(jobs, len(rules)), mp_context=_context(),
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
