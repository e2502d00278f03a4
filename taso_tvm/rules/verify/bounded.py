"""The bounded proof of a rule, with Z3.

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
"""
from __future__ import annotations

import logging
import time
from fractions import Fraction
from typing import Any, Iterable, Optional

import numpy as np

from ...graph import GraphError, TensorGraph
from ...graph.tensor_graph import CycleError
from .instances import Instance, NoInstance, content_seed, numpy_check
from .plan import plan_instances, sweep_instances
from ..language.rule import Rule
from ..matching.rewrite import TypeMismatch, build_target
from .poly import Ring, Z3Converter, lift_array
from .solver_process import check_smt2
from .results import MethodResult

log = logging.getLogger(__name__)

BOUNDED_BUDGET_S = 60.0  # per rule, all instances together
SWEEP_TRIES = 32  # assignments the refutation sweep tries (`_sweep`)
SWEEP_ELEMENTS = 2000  # the sweep evaluates instances with at most this many input elements


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
