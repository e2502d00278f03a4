"""TASO's axiomatic proof: operators as uninterpreted functions over a Tensor sort, operator properties as ∀-axioms.

Every tensor is a term of the uninterpreted sort `Tensor`; operator `op` with n tensor inputs and output k is the
function `op/n/k : Int^attrs × Tensor^n → Tensor` (attributes in the registry's order). Attribute values are Ints:
integers as themselves, anything else (tuples, strings, floats) as distinct interned codes; lists built from
expressions use uninterpreted list constructors; `dim`, `ndim`, `shape`, `numel`, `weight`, integer division and the
list helpers are uninterpreted. The list helpers (`len`, `range`, `compose`, `inverse`) get their values on the
constants of the encoding as ground equations (`helper_facts`, computed by the expression evaluator), and a source
transpose with a constant permutation gives the ranks of its input and output (`source_rank_facts`).
Axioms are rules of the same language (see `library/axioms.yaml`): a rule entry becomes ∀ vars. where ⇒
source_output = target_output, a `facts` entry becomes ∀ vars. where ⇒ facts. A rule is proven when its
where-clauses, the axioms and `some source output ≠ target output` are unsatisfiable.
Like TASO, axioms state equalities of well-typed terms; each axiom is itself checked by the bounded method.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

import z3

from ...graph.ops import OPS
from ...graph.types import freeze
from ..language import expr as E
from ..language.rule import ArgRef, Rule

log = logging.getLogger(__name__)

CODE_BASE = 1_000_000_000


class EncodeError(Exception):
    """An expression the encoding cannot express."""


class Encoder:
    """Builds Z3 terms for rule sides; one per proof (z3 declarations are shared by name)."""

    def __init__(self) -> None:
        self.T = z3.DeclareSort("Tensor")
        self.codes: dict = {}
        self.code_values: dict[int, Any] = {}  # code -> the value it stands for
        self.funcs: dict = {}
        I, T, B = z3.IntSort(), self.T, z3.BoolSort()
        self.tfn = {"dim": z3.Function("dim", T, I, I), "ndim": z3.Function("ndim", T, I),
                    "shape": z3.Function("shape", T, I), "numel": z3.Function("numel", T, I),
                    "weight": z3.Function("is_weight", T, B)}

    # ------------------------------------------------------------ values
    def value(self, v: Any) -> z3.ExprRef:
        v = freeze(v)
        if isinstance(v, bool):
            return z3.BoolVal(v)
        if isinstance(v, int):
            return z3.IntVal(v)
        key = (type(v).__name__, repr(v))
        code = self.codes.setdefault(key, CODE_BASE + len(self.codes))
        self.code_values.setdefault(code, v)
        return z3.IntVal(code)

    def fn(self, name: str, n: int, ret: Any = None) -> Any:
        key = (name, n, "B" if ret is not None else "I")
        f = self.funcs.get(key)
        if f is None:
            sorts = [z3.IntSort()] * n + [ret if ret is not None else z3.IntSort()]
            f = self.funcs[key] = z3.Function(f"{name}/{n}", *sorts)
        return f

    def opfn(self, op: str, n_in: int, out: int) -> Any:
        key = ("op", op, n_in, out)
        f = self.funcs.get(key)
        if f is None:
            n_attrs = len(OPS[op].attrs) if op != "const" else 1
            sorts = [z3.IntSort()] * n_attrs + [self.T] * n_in + [self.T]
            f = self.funcs[key] = z3.Function(f"{op}/{n_in}/{out}", *sorts)
        return f

    # ------------------------------------------------------------ expressions
    def expr(self, e: Any, scope: "Scope") -> z3.ExprRef:
        """The Z3 term of a rule expression, its names bound in `scope`."""
        if isinstance(e, E.Const):
            return self.value(e.value)
        if isinstance(e, E.ListExpr):
            items = [self.expr(i, scope) for i in e.items]
            if all(isinstance(i, E.Const) for i in e.items):
                return self.value(tuple(i.value for i in e.items))
            return self.fn("list", len(items))(*[self._int(i) for i in items]) if items else self.value(())
        if isinstance(e, E.Name):
            return scope.attr(e.id)
        if isinstance(e, E.Attr):
            if not isinstance(e.obj, E.Name):
                raise EncodeError("attribute access on an expression")
            return scope.group(e.obj.id, e.name)
        if isinstance(e, E.Call):
            return self._call(e, scope)
        if isinstance(e, E.Index):
            if isinstance(e.obj, E.ListExpr) and isinstance(e.index, E.Const) and isinstance(e.index.value, int):
                try:
                    return self.expr(e.obj.items[e.index.value], scope)
                except IndexError:
                    raise EncodeError("index out of range") from None
            return self.fn("index", 2)(self._int(self.expr(e.obj, scope)), self._int(self.expr(e.index, scope)))
        if isinstance(e, E.Unary):
            v = self.expr(e.operand, scope)
            return z3.Not(self._bool(v)) if e.op == "not" else -self._int(v)
        if isinstance(e, E.Binary):
            return self._binary(e, scope)
        raise EncodeError(f"cannot encode {e!r}")

    def _call(self, e: Any, scope: "Scope") -> z3.ExprRef:
        """A function of the expression language: on a tensor, over a list (exact), else uninterpreted."""
        if e.func in self.tfn:
            args = e.args
            t = scope.tensor(args[0].id) if args and isinstance(args[0], E.Name) else None
            if t is None:
                raise EncodeError(f"{e.func}() of a non-tensor")
            if e.func == "dim":
                return self.tfn["dim"](t, self._int(self.expr(args[1], scope)))
            return self.tfn[e.func](t)
        if e.func in ("sum", "len", "min", "max") and len(e.args) == 1 and isinstance(e.args[0], E.ListExpr):
            items = [self._int(self.expr(i, scope)) for i in e.args[0].items]
            if e.func == "len":
                return z3.IntVal(len(items))
            if e.func == "sum":
                return z3.Sum(items) if items else z3.IntVal(0)
            acc = items[0]
            for i in items[1:]:
                acc = z3.If(i < acc, i, acc) if e.func == "min" else z3.If(i > acc, i, acc)
            return acc
        args = [self._int(self.expr(a, scope)) for a in e.args]
        return self.fn(e.func, len(args))(*args)

    def _binary(self, e: Any, scope: "Scope") -> z3.ExprRef:
        """Connectives, comparisons and membership (exact on lists), integer arithmetic (`//`, `%`, `/`
        uninterpreted)."""
        a, b = self.expr(e.left, scope), self.expr(e.right, scope)
        if e.op == "and":
            return z3.And(self._bool(a), self._bool(b))
        if e.op == "or":
            return z3.Or(self._bool(a), self._bool(b))
        if e.op in ("==", "!="):
            if a.sort() != b.sort():
                raise EncodeError("comparison of a boolean with a number")
            return a == b if e.op == "==" else a != b
        if e.op in ("in", "notin"):
            if isinstance(e.right, E.ListExpr):
                r = z3.Or([a == self.expr(i, scope) for i in e.right.items]) if e.right.items else \
                    z3.BoolVal(False)
            else:
                r = self.fn("in", 2, z3.BoolSort())(self._int(a), self._int(b))
            return r if e.op == "in" else z3.Not(r)
        a, b = self._int(a), self._int(b)
        if e.op in ("<", "<=", ">", ">="):
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        return self.fn({"//": "floordiv", "%": "mod", "/": "truediv"}[e.op], 2)(a, b)

    @staticmethod
    def _int(v: z3.ExprRef) -> z3.ExprRef:
        if not z3.is_int(v):
            raise EncodeError("expected a number")
        return v

    @staticmethod
    def _bool(v: z3.ExprRef) -> z3.ExprRef:
        if not z3.is_bool(v):
            raise EncodeError("expected a condition")
        return v


class Scope:
    """Names of one rule (or axiom) side: tensor terms, attribute variables and groups, as z3 constants."""

    def __init__(self, enc: Encoder, rule: Rule, prefix: str):
        self.enc, self.rule, self.prefix = enc, rule, prefix
        self.tensors: dict[str, z3.ExprRef] = {}
        self.attrs: dict[str, z3.ExprRef] = {}
        self.bound: list = []  # every z3 constant standing for a variable of the rule (for ∀)
        for v in rule.inputs:
            c = z3.Const(f"{prefix}{v}", enc.T)
            self.tensors[v] = c
            self.bound.append(c)
        for a in rule.attr_vars:
            c = z3.Int(f"{prefix}{a}")
            self.attrs[a] = c
            self.bound.append(c)
        for g, p_idx in rule.splats.items():
            op = rule.source[p_idx].op
            for k in OPS[op].attrs:
                c = z3.Int(f"{prefix}{g}.{k}")
                self.attrs[f"{g}.{k}"] = c
                self.bound.append(c)
        self.src_args: dict[int, list] = {}  # each source node's argument terms
        self.extra: dict[str, z3.ExprRef] = {}

    def attr(self, name: str) -> z3.ExprRef:
        if name in self.attrs:
            return self.attrs[name]
        raise EncodeError(f"'{name}' is not an attribute variable")

    def group(self, g: str, k: str) -> z3.ExprRef:
        key = f"{g}.{k}"
        if key in self.attrs:
            return self.attrs[key]
        raise EncodeError(f"unknown attribute {key}")

    def tensor(self, name: str) -> Optional[z3.ExprRef]:
        if name in self.extra:
            return self.extra[name]
        return self.tensors.get(name)


def _node_terms(enc: Encoder, scope: Scope, nodes: list, side: str, args_of: Optional[dict] = None) -> dict:
    """Terms of each pattern node's outputs, building source (or target) nodes in order (`args_of`, when given,
    receives each node's argument terms)."""
    built: dict[int, list] = {}

    def ref(a: ArgRef) -> z3.ExprRef:
        if a.kind == "node":
            return built[a.node][a.out]
        t = scope.tensor(a.name)
        if t is None:
            raise EncodeError(f"unknown tensor {a.name}")
        return t

    for p in nodes:
        args = [ref(a) for a in p.args]
        if args_of is not None:
            args_of[p.index] = args
        if p.op == "const":
            v = enc.expr(p.attrs["value"].value, scope)
            built[p.index] = [enc.opfn("const", 0, 0)(v)]
        else:
            opdef = OPS[p.op]
            splat_src = scope.rule.source[scope.rule.splats[p.splat]] if p.splat else None
            vals = []
            for k, default in opdef.attrs.items():
                spec = p.attrs.get(k)
                if spec is not None:
                    if spec.kind == "const":
                        vals.append(enc.value(spec.value))
                    elif spec.kind == "var":
                        vals.append(scope.attr(spec.value))
                    else:
                        vals.append(enc.expr(spec.value, scope))
                elif p.splat is not None and splat_src is not None and k in OPS[splat_src.op].attrs \
                        and k not in splat_src.attrs:
                    vals.append(scope.group(p.splat, k))
                else:
                    if default is None:
                        raise EncodeError(f"{p.op}: no value for required attribute {k}")
                    vals.append(enc.value(default))
            built[p.index] = [enc.opfn(p.op, len(args), k)(*vals, *args) for k in range(p.n_outputs)]
        for k, n in enumerate(p.names):
            if n is not None:
                scope.extra[n] = built[p.index][k]
    return built


def encode_sides(enc: Encoder, rule: Rule, prefix: str) -> tuple:
    """(scope, source output terms, target output terms, source node terms)."""
    scope = Scope(enc, rule, prefix)
    src_built = _node_terms(enc, scope, rule.source, "source", scope.src_args)
    src_out = [scope.extra[o] for o in rule.outputs]
    src_extra = dict(scope.extra)
    tgt_out = []
    if rule.target or rule.tgt_outputs:
        # target names may shadow source output names: evaluate the target in its own name space
        scope.extra = dict(src_extra)
        built = _node_terms(enc, scope, rule.target, "target")
        for o in rule.outputs:
            ref = rule.tgt_outputs[o]
            if ref.kind == "node":
                tgt_out.append(built[ref.node][ref.out])
            else:
                tgt_out.append(src_extra[ref.name] if ref.name in src_extra else scope.tensors[ref.name])
        scope.extra = src_extra
    return scope, src_out, tgt_out, src_built


# ---------------------------------------------------------------- ground facts about constants
PERMS_PER_RANK = 24  # permutation constants of one length the helper values are computed for (the group of rank 4)


def _perm(v: Any) -> Optional[tuple]:
    """The value as a permutation (a non-empty tuple of 0..n-1 in some order), else None."""
    if isinstance(v, tuple) and v and all(type(i) is int for i in v) and sorted(v) == list(range(len(v))):
        return v
    return None


def _helper(name: str, *args: Any) -> Any:
    """A helper of the expression language on constants, by the evaluator itself (the bounded method's semantics)."""
    return E.evaluate(E.Call(name, tuple(E.Const(a) for a in args), (), ()), E.Env())


def source_rank_facts(enc: Encoder, rule: Rule, scope: Scope, src_built: dict) -> list:
    """ndim of the tensors around each source transpose with a constant permutation: a match guarantees them (the
    pattern's permutation denotes the node's only for an input of its length, and the output has that rank).
    Source nodes only: a target term need not be well-typed until the bounded method builds it."""
    facts = []
    for p in rule.source:
        spec = p.attrs.get("perm") if p.op == "transpose" else None
        perm = _perm(freeze(spec.value)) if spec is not None and spec.kind == "const" else None
        if perm is None:
            continue
        for t in (scope.src_args[p.index][0], src_built[p.index][0]):
            facts.append(enc.tfn["ndim"](t) == len(perm))
    return facts


def helper_facts(enc: Encoder) -> list:
    """Ground equations giving the uninterpreted list helpers their values on the constants of the encoding:
    len(c), range(n) for the lengths of the permutation constants, inverse(c), and compose(c1, c2) over the
    permutation constants of each length closed under composition and inversion (at most `PERMS_PER_RANK` each).
    Values come from the expression evaluator, so both methods read the helpers alike."""
    used = {k[0] for k in enc.funcs if k[0] != "op" and k[2] == "I"} & {"len", "range", "inverse", "compose"}
    if not used:
        return []
    facts = []
    by_rank: dict[int, list] = {}
    for v in list(enc.code_values.values()):
        perm = _perm(v)
        if perm is not None and perm not in by_rank.setdefault(len(perm), []):
            by_rank[len(perm)].append(perm)
    if "range" in used:  # at the lengths of the permutation constants (the only codes a range can equal)
        for n in sorted(by_rank):
            facts.append(enc.fn("range", 1)(z3.IntVal(n)) == enc.value(_helper("range", n)))
    for n, perms in sorted(by_rank.items()):
        if "compose" not in used and "inverse" not in used:
            continue
        i = 0
        while i < len(perms) and len(perms) < PERMS_PER_RANK:  # close under inverse and composition
            for q in [_helper("inverse", perms[i])] + [_helper("compose", a, b) for a in perms[:i + 1]
                                                      for b in perms[:i + 1]]:
                if q not in perms and len(perms) < PERMS_PER_RANK:
                    perms.append(q)
            i += 1
        for a in perms:
            if "inverse" in used:
                facts.append(enc.fn("inverse", 1)(enc.value(a)) == enc.value(_helper("inverse", a)))
            if "compose" in used:
                facts += [enc.fn("compose", 2)(enc.value(a), enc.value(b)) == enc.value(_helper("compose", a, b))
                          for b in perms]
    if "len" in used:  # last: of every list constant, those the equations above introduced too
        for code, v in list(enc.code_values.items()):
            if isinstance(v, tuple):
                facts.append(enc.fn("len", 1)(z3.IntVal(code)) == _helper("len", v))
    return facts


def _has_all(term: z3.ExprRef, consts: list) -> bool:
    names = {c.decl().name() for c in consts}
    seen = set()
    todo = [term]
    while todo:
        t = todo.pop()
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            seen.add(t.decl().name())
        todo.extend(t.children())
    return names <= seen


def _pattern_ok(term: z3.ExprRef) -> bool:
    """A usable E-matching pattern: uninterpreted applications over variables and numerals only (Z3 ignores a
    pattern with arithmetic in it, and the quantifier is then never instantiated)."""
    todo = [term]
    while todo:
        t = todo.pop()
        if z3.is_const(t) or z3.is_int_value(t):
            continue
        if not z3.is_app(t) or t.decl().kind() != z3.Z3_OP_UNINTERPRETED:
            return False
        todo.extend(t.children())
    return True


def _trigger(term: z3.ExprRef, bound: list) -> list:
    """Patterns for a quantifier over `bound` from one side's term: the term itself when usable, else its largest
    usable subterm that mentions every bound variable (e.g. the concat under a split whose sizes are sums)."""
    if z3.is_const(term) or not _has_all(term, bound):
        return []
    if _pattern_ok(term):
        return [term]
    subs, todo = [], list(term.children())
    while todo:
        t = todo.pop()
        if z3.is_app(t) and not z3.is_const(t):
            if _pattern_ok(t) and _has_all(t, bound):
                subs.append(t)
            todo.extend(t.children())
    subs.sort(key=lambda t: -len(t.sexpr()))
    return subs[:1]


def axiom_formulas(enc: Encoder, axioms: list) -> list:
    """∀-formulas for each axiom (rules and fact entries). Axioms that cannot be encoded are skipped (logged)."""
    out = []
    for i, ax in enumerate(axioms):
        try:
            scope, src_out, tgt_out, src_built = encode_sides(enc, ax, f"ax{i}_")
            guards = [enc._bool(enc.expr(c.expr, scope)) for c in ax.where]
            bodies = []
            for s, t in zip(src_out, tgt_out):
                # triggers on the source side only: each axiom rewrites one way, which keeps E-matching finite
                trig = _trigger(s, scope.bound) or _trigger(t, scope.bound)
                bodies.append((s == t, trig))
            for f in ax.facts:
                fe = enc._bool(enc.expr(f.expr, scope))
                roots = [ts[0] for ts in src_built.values()]
                trig = [r for r in roots if _has_all(r, scope.bound)]
                bodies.append((fe, trig[:1] if trig else []))
        except EncodeError as err:
            log.warning("axiom %s cannot be encoded (%s); not used", ax.name, err)
            continue
        for body, triggers in bodies:
            f = z3.Implies(z3.And(guards), body) if guards else body
            if scope.bound:
                pats = [z3.MultiPattern(t) for t in triggers] if triggers else []
                f = z3.ForAll(scope.bound, f, patterns=pats) if pats else z3.ForAll(scope.bound, f)
            out.append((ax.name, f))
    return out


def axiom_ops(axioms: list) -> set:
    ops: set = set()
    for ax in axioms:
        ops |= ax.ops
    return ops


def prove(rule: Rule, axioms: list, timeout: float = 10.0, formulas: Optional[list] = None,
          enc: Optional[Encoder] = None, check: Optional[Any] = None) -> tuple[str, str]:
    """Prove the rule from the axioms. Returns (status, detail): proven / unknown (never refuted: axioms are
    incomplete, a satisfying model says nothing about the real operators). `check(solver) -> (result, reason)`
    runs the query (default: here, under Z3's own timeout)."""
    enc = enc or Encoder()
    if formulas is None:
        formulas = axiom_formulas(enc, axioms)
    try:
        scope, src_out, tgt_out, src_built = encode_sides(enc, rule, "r_")
        hyps = []
        for c in rule.where:
            try:
                hyps.append(enc._bool(enc.expr(c.expr, scope)))
            except EncodeError:
                pass  # dropping a hypothesis only makes the proof obligation stronger
        hyps += source_rank_facts(enc, rule, scope, src_built)
        hyps += helper_facts(enc)
    except EncodeError as err:
        return "unknown", f"cannot encode the rule: {err}"
    s = z3.Solver()
    s.set("timeout", int(timeout * 1000))
    s.set("smt.mbqi", False)
    for _, f in formulas:
        s.add(f)
    s.add(hyps)
    s.add(z3.Or([a != b for a, b in zip(src_out, tgt_out)]))
    if check is not None:
        r, why = check(s)
    else:
        res = s.check()
        r, why = str(res), s.reason_unknown() if res == z3.unknown else ""
    if r == "unsat":
        return "proven", f"{len(formulas)} axioms"
    if r == "sat":
        return "unknown", "the axioms do not imply the rule"
    return "unknown", f"solver: {why}"
