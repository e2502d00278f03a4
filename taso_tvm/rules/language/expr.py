"""The rule language's small expression language: a tokenizer, a recursive-descent parser and an evaluator.

One grammar serves pattern right-hand sides (``conv2d(x, w, strides=s, **c)``), attribute expressions
(``[dim(w1, -1), dim(w2, -1)]``) and constraints (``groups == 1 and weight(w)``). Nothing is ever ``eval``-ed.

Grammar (lowest precedence first)::

    expr     := or
    or       := and ('or' and)*
    and      := not ('and' not)*
    not      := 'not' not | compare
    compare  := sum (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') sum)?
    sum      := term (('+'|'-') term)*
    term     := unary (('*'|'//'|'%'|'/') unary)*
    unary    := '-' unary | postfix
    postfix  := primary ('[' expr ']' | '.' NAME)*
    primary  := NUMBER | STRING | NAME | NAME '(' args ')' | '[' items ']' | '(' expr ')'
    args     := (arg (',' arg)*)? ','?      arg := expr | NAME '=' expr | '**' NAME
"""
from __future__ import annotations

import functools
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from ... import errors as _errors


class ExprError(_errors.RuleFileError, ValueError):
    """A syntax or evaluation error in a rule expression; `col` is the 0-based column when known."""

    def __init__(self, msg: str, col: Optional[int] = None):
        super().__init__(msg)
        self.msg = msg
        self.col = col


# ---------------------------------------------------------------- AST
@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class Name:
    id: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ListExpr:
    items: tuple


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple
    kwargs: tuple  # ((name, expr), ...) in source order
    splats: tuple  # names given as **name
    col: int = field(default=0, compare=False)

    @property
    def kw(self) -> dict:
        return dict(self.kwargs)


@dataclass(frozen=True)
class Index:
    obj: Any
    index: Any


@dataclass(frozen=True)
class Attr:
    obj: Any
    name: str


@dataclass(frozen=True)
class Unary:
    op: str  # '-' or 'not'
    operand: Any


@dataclass(frozen=True)
class Binary:
    op: str  # + - * // % / == != < <= > >= in notin and or
    left: Any
    right: Any


Expr = Union[Const, Name, ListExpr, Call, Index, Attr, Unary, Binary]

# Bare words that are constants, not variables (activation modes, padding modes, booleans).
BARE_CONSTANTS = {"none": "none", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "SAME": "SAME",
                  "VALID": "VALID", "true": True, "false": False, "True": True, "False": False}

# ---------------------------------------------------------------- tokenizer
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<str>'[^'\\]*'|"[^"\\]*")
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\*\*|//|==|!=|<=|>=|[-+*/%<>()\[\],.=])
""", re.VERBOSE)


@dataclass
class _Tok:
    kind: str
    text: str
    col: int


def tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(f"unexpected character {text[pos]!r}", pos)
        kind = m.lastgroup
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    toks.append(_Tok("end", "", len(text)))
    return toks


# ---------------------------------------------------------------- parser
class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t.kind in ("op", "name") and t.text == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> _Tok:
        t = self.peek()
        if t.text != text or t.kind not in ("op", "name"):
            raise ExprError(f"expected '{text}', found {t.text!r}" if t.kind != "end" else f"expected '{text}'",
                            t.col)
        return self.next()

    def parse(self) -> Expr:
        e = self.parse_or()
        t = self.peek()
        if t.kind != "end":
            raise ExprError(f"unexpected {t.text!r}", t.col)
        return e

    def parse_or(self) -> Expr:
        e = self.parse_and()
        while self.accept("or"):
            e = Binary("or", e, self.parse_and())
        return e

    def parse_and(self) -> Expr:
        e = self.parse_not()
        while self.accept("and"):
            e = Binary("and", e, self.parse_not())
        return e

    def parse_not(self) -> Expr:
        if self.accept("not"):
            return Unary("not", self.parse_not())
        return self.parse_compare()

    def parse_compare(self) -> Expr:
        e = self.parse_sum()
        t = self.peek()
        if t.kind == "op" and t.text in ("==", "!=", "<", "<=", ">", ">="):
            self.next()
            e = Binary(t.text, e, self.parse_sum())
        elif t.kind == "name" and t.text == "in":
            self.next()
            e = Binary("in", e, self.parse_sum())
        elif t.kind == "name" and t.text == "not" and self.peek(1).text == "in":
            self.next()
            self.next()
            e = Binary("notin", e, self.parse_sum())
        t = self.peek()
        if t.kind == "op" and t.text in ("==", "!=", "<", "<=", ">", ">="):
            raise ExprError("chained comparisons are not supported; use 'and'", t.col)
        return e

    def parse_sum(self) -> Expr:
        e = self.parse_term()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.next().text
            e = Binary(op, e, self.parse_term())
        return e

    def parse_term(self) -> Expr:
        e = self.parse_unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "//", "%", "/"):
            op = self.next().text
            e = Binary(op, e, self.parse_unary())
        return e

    def parse_unary(self) -> Expr:
        if self.peek().kind == "op" and self.peek().text == "-":
            self.next()
            operand = self.parse_unary()
            if isinstance(operand, Const) and isinstance(operand.value, (int, float)) \
                    and not isinstance(operand.value, bool):
                return Const(-operand.value)
            return Unary("-", operand)
        return self.parse_postfix()

    def parse_postfix(self) -> Expr:
        e = self.parse_primary()
        while True:
            if self.accept("["):
                idx = self.parse_or()
                self.expect("]")
                e = Index(e, idx)
            elif self.peek().kind == "op" and self.peek().text == ".":
                self.next()
                t = self.next()
                if t.kind != "name":
                    raise ExprError("expected an attribute name after '.'", t.col)
                e = Attr(e, t.text)
            else:
                return e

    def parse_primary(self) -> Expr:
        t = self.next()
        if t.kind == "num":
            return Const(float(t.text) if any(c in t.text for c in ".eE") else int(t.text))
        if t.kind == "str":
            return Const(t.text[1:-1])
        if t.kind == "name":
            if self.peek().kind == "op" and self.peek().text == "(":
                self.next()
                return self.parse_call(t)
            if t.text in ("and", "or", "not", "in"):
                raise ExprError(f"unexpected keyword '{t.text}'", t.col)
            if t.text in BARE_CONSTANTS:
                return Const(BARE_CONSTANTS[t.text])
            return Name(t.text, t.col)
        if t.kind == "op" and t.text == "[":
            items = []
            while not self.accept("]"):
                items.append(self.parse_or())
                if not self.accept(","):
                    self.expect("]")
                    break
            return ListExpr(tuple(items))
        if t.kind == "op" and t.text == "(":
            e = self.parse_or()
            self.expect(")")
            return e
        raise ExprError(f"unexpected {t.text!r}" if t.kind != "end" else "unexpected end of expression", t.col)

    def parse_call(self, name_tok: _Tok) -> Call:
        args, kwargs, splats = [], [], []
        seen_kw: set = set()
        while not self.accept(")"):
            t = self.peek()
            if t.kind == "op" and t.text == "**":
                self.next()
                n = self.next()
                if n.kind != "name":
                    raise ExprError("expected a name after '**'", n.col)
                splats.append(n.text)
            elif t.kind == "name" and self.peek(1).kind == "op" and self.peek(1).text == "=":
                self.next()
                self.next()
                if t.text in seen_kw:
                    raise ExprError(f"attribute '{t.text}' given twice", t.col)
                seen_kw.add(t.text)
                kwargs.append((t.text, self.parse_or()))
            else:
                if kwargs or splats:
                    raise ExprError("positional argument after keyword argument", t.col)
                args.append(self.parse_or())
            if not self.accept(","):
                self.expect(")")
                break
        return Call(name_tok.text, tuple(args), tuple(kwargs), tuple(splats), name_tok.col)


def parse(text: str) -> Expr:
    """Parse one expression. Raises ExprError with the column of the problem."""
    if not isinstance(text, str):
        text = str(text)
    return _Parser(text).parse()


# ---------------------------------------------------------------- walking
def children(e: Expr) -> tuple:
    """The expression's direct sub-expressions, in source order."""
    if isinstance(e, ListExpr):
        return e.items
    if isinstance(e, Call):
        return e.args + tuple(v for _, v in e.kwargs)
    if isinstance(e, Index):
        return (e.obj, e.index)
    if isinstance(e, Attr):
        return (e.obj,)
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.left, e.right)
    return ()


def names_in(e: Expr, out: Optional[set] = None) -> set:
    """Every identifier read by the expression (not function names or keyword names)."""
    out = set() if out is None else out
    if isinstance(e, Name):
        out.add(e.id)
    elif isinstance(e, Call):
        out.update(e.splats)
    for c in children(e):
        names_in(c, out)
    return out


def calls_in(e: Expr, out: Optional[list] = None) -> list:
    """Every Call node in the expression, outermost first."""
    out = [] if out is None else out
    if isinstance(e, Call):
        out.append(e)
    for c in children(e):
        calls_in(c, out)
    return out


def to_text(e: Expr, rename: Optional[Callable[[str], str]] = None) -> str:
    """Canonical text of an expression (used for hashing and symmetry detection)."""
    r = rename or (lambda s: s)
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Name):
        return r(e.id)
    if isinstance(e, ListExpr):
        return "[" + ", ".join(to_text(i, rename) for i in e.items) + "]"
    if isinstance(e, Call):
        parts = [to_text(a, rename) for a in e.args]
        parts += [f"{k}={to_text(v, rename)}" for k, v in sorted(e.kwargs)]
        parts += [f"**{r(s)}" for s in e.splats]
        return f"{e.func}({', '.join(parts)})"
    if isinstance(e, Index):
        return f"{to_text(e.obj, rename)}[{to_text(e.index, rename)}]"
    if isinstance(e, Attr):
        return f"{to_text(e.obj, rename)}.{e.name}"
    if isinstance(e, Unary):
        return f"({e.op} {to_text(e.operand, rename)})"
    if isinstance(e, Binary):
        return f"({to_text(e.left, rename)} {e.op} {to_text(e.right, rename)})"
    raise TypeError(e)


# ---------------------------------------------------------------- evaluation
class Env:
    """What an expression can see: attribute variables, splat groups and tensors (types, weight-ness)."""

    def lookup(self, name: str) -> Any:  # an attribute variable's value
        raise ExprError(f"unknown name '{name}'")

    def splat(self, name: str) -> dict:
        raise ExprError(f"unknown attribute group '{name}'")

    def tensor_type(self, name: str) -> Any:  # a TensorType
        raise ExprError(f"unknown tensor '{name}'")

    def is_tensor(self, name: str) -> bool:
        return False

    def is_weight(self, name: str) -> bool:
        raise ExprError(f"unknown tensor '{name}'")


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ExprError(f"{what} must be an integer, got {v!r}")
    return v


def _tensor_arg(e: Expr, env: Env, fn: str) -> str:
    if not isinstance(e, Name) or not env.is_tensor(e.id):
        raise ExprError(f"{fn}() expects a tensor name, got {to_text(e)}")
    return e.id


def _dim(env: Env, t: str, i: int) -> int:
    shape = env.tensor_type(t).shape
    if not -len(shape) <= i < len(shape):
        raise ExprError(f"dim({t}, {i}) out of range for rank {len(shape)}")
    return shape[i]


def _fn_dim(args, env):
    return _dim(env, _tensor_arg(args[0], env, "dim"), _int(evaluate(args[1], env), "dim index"))


def _perm(v: Any, what: str) -> tuple:
    if not isinstance(v, tuple) or sorted(v) != list(range(len(v))):
        raise ExprError(f"{what}: {v!r} is not a permutation")
    return v


_TENSOR_FNS: dict[str, Callable] = {
    "dim": _fn_dim,
    "ndim": lambda a, env: len(env.tensor_type(_tensor_arg(a[0], env, "ndim")).shape),
    "shape": lambda a, env: tuple(env.tensor_type(_tensor_arg(a[0], env, "shape")).shape),
    "numel": lambda a, env: math.prod(env.tensor_type(_tensor_arg(a[0], env, "numel")).shape),
    "weight": lambda a, env: env.is_weight(_tensor_arg(a[0], env, "weight")),
}
_TENSOR_ARITY = {"dim": 2, "ndim": 1, "shape": 1, "numel": 1, "weight": 1}

_VALUE_FNS: dict[str, tuple[int, Callable]] = {  # name -> (arity, fn over evaluated args); arity -1: variadic
    "len": (1, lambda v: len(v)),
    "sum": (1, lambda v: sum(v)),
    "prod": (1, lambda v: math.prod(v)),
    "min": (-1, lambda *v: min(v[0]) if len(v) == 1 else min(v)),
    "max": (-1, lambda *v: max(v[0]) if len(v) == 1 else max(v)),
    "abs": (1, abs),
    "range": (1, lambda n: tuple(range(_int(n, "range()")))),
    "compose": (2, lambda p, q: tuple(_perm(p, "compose")[i] for i in _perm(q, "compose"))),
    "inverse": (1, lambda p: tuple(sorted(range(len(p)), key=lambda i: _perm(p, "inverse")[i]))),
    "pos": (2, lambda i, n: _int(i, "pos()") % _int(n, "pos()")),  # normalise a negative axis
    "reshape_axis": (3, lambda f, t, a: _reshape_axis(f, t, _int(a, "reshape_axis()"))),
    "identity_kernel": (3, lambda c, kh, kw: _identity_kernel(_int(c, "identity_kernel()"),
                                                              _int(kh, "identity_kernel()"),
                                                              _int(kw, "identity_kernel()"))),
}


def _reshape_axis(src: Any, dst: Any, a: int) -> int:
    """The axis of shape `src` that a reshape to `dst` carries whole onto axis `a` of `dst` (the axes before it
    hold as many elements, and it has the same size), or -1 when there is none: rows of that axis are rows of the
    reshaped tensor's axis `a`."""
    if not (isinstance(src, tuple) and isinstance(dst, tuple)) or not 0 <= a < len(dst):
        raise ExprError(f"reshape_axis: needs two shapes and an axis of the second, got {src!r}, {dst!r}, {a}")
    before = math.prod(dst[:a])
    for k, size in enumerate(src):
        if size == dst[a] and math.prod(src[:k]) == before:
            return k
    return -1


@functools.lru_cache(maxsize=64)
def _identity_kernel(c: int, kh: int, kw: int) -> Any:
    """The OIHW kernel of a convolution that copies its c input channels (1 at the centre tap of channel i -> i).
    Read-only and shared: the search asks for the same kernel at every match."""
    import numpy as np

    if c < 1 or kh % 2 == 0 or kw % 2 == 0:
        raise ExprError(f"identity_kernel({c}, {kh}, {kw}): needs c >= 1 and odd kernel sizes")
    k = np.zeros((c, c, kh, kw))
    k[np.arange(c), np.arange(c), kh // 2, kw // 2] = 1.0
    k.flags.writeable = False
    return k

FUNCTIONS = set(_TENSOR_FNS) | set(_VALUE_FNS)


def _arith(op: str, a: Any, b: Any) -> Any:
    if op == "+":
        if isinstance(a, tuple) and isinstance(b, tuple):
            return a + b
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "/":
        return a / b
    raise ExprError(f"unknown operator {op}")


def evaluate(e: Expr, env: Env) -> Any:
    """Evaluate an expression to a Python value (lists become tuples)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Name):
        return env.lookup(e.id)
    if isinstance(e, ListExpr):
        return tuple(evaluate(i, env) for i in e.items)
    if isinstance(e, Call):
        return _evaluate_call(e, env)
    if isinstance(e, Index):
        obj = evaluate(e.obj, env)
        idx = _int(evaluate(e.index, env), "index")
        try:
            return obj[idx]
        except (TypeError, IndexError):
            raise ExprError(f"cannot index {obj!r} with {idx}") from None
    if isinstance(e, Attr):
        if not isinstance(e.obj, Name):
            raise ExprError("'.' applies to an attribute group (**name) only")
        group = env.splat(e.obj.id)
        if e.name not in group:
            raise ExprError(f"attribute group '{e.obj.id}' has no '{e.name}'")
        return group[e.name]
    if isinstance(e, Unary):
        v = evaluate(e.operand, env)
        if e.op == "not":
            return not v
        return -v
    if isinstance(e, Binary):
        return _evaluate_binary(e, env)
    raise ExprError(f"cannot evaluate {e!r}")


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}


def _evaluate_call(e: Call, env: Env) -> Any:
    """A function of the expression language: on tensors (their shapes, whether a weight) or on values."""
    if e.kwargs or e.splats:
        raise ExprError(f"{e.func}() takes no keyword arguments here")
    if e.func in _TENSOR_FNS:
        if len(e.args) != _TENSOR_ARITY[e.func]:
            raise ExprError(f"{e.func}() takes {_TENSOR_ARITY[e.func]} argument(s)")
        return _TENSOR_FNS[e.func](e.args, env)
    if e.func in _VALUE_FNS:
        arity, fn = _VALUE_FNS[e.func]
        if arity >= 0 and len(e.args) != arity:
            raise ExprError(f"{e.func}() takes {arity} argument(s)")
        try:
            return fn(*[evaluate(a, env) for a in e.args])
        except (TypeError, ValueError, IndexError) as err:
            raise ExprError(f"{e.func}(): {err}") from None
    raise ExprError(f"unknown function '{e.func}'")


def _evaluate_binary(e: Binary, env: Env) -> Any:
    """`and` / `or` (short-circuit), a comparison or membership, or arithmetic."""
    if e.op == "and":
        return bool(evaluate(e.left, env)) and bool(evaluate(e.right, env))
    if e.op == "or":
        return bool(evaluate(e.left, env)) or bool(evaluate(e.right, env))
    a, b = evaluate(e.left, env), evaluate(e.right, env)
    try:
        compare = _COMPARISONS.get(e.op)
        return compare(a, b) if compare is not None else _arith(e.op, a, b)
    except (TypeError, ZeroDivisionError) as err:
        raise ExprError(f"cannot compute {to_text(e)}: {err}") from None


# ---------------------------------------------------------------- compilation to closures (the matcher's hot path)
def compile_expr(e: Expr) -> Callable[[Env], Any]:
    """The expression as a function of an Env; same results and errors as `evaluate`, without the AST walk."""
    if isinstance(e, Const):
        v = e.value
        return lambda env: v
    if isinstance(e, Name):
        n = e.id
        return lambda env: env.lookup(n)
    if isinstance(e, ListExpr):
        items = [compile_expr(i) for i in e.items]
        return lambda env: tuple(f(env) for f in items)
    if isinstance(e, Call) and not e.kwargs and not e.splats and e.func in _TENSOR_FNS \
            and len(e.args) == _TENSOR_ARITY[e.func] and isinstance(e.args[0], Name):
        t = e.args[0].id
        if e.func == "weight":
            return lambda env: env.is_weight(t) if env.is_tensor(t) else evaluate(e, env)
        if e.func == "ndim":
            return lambda env: len(env.tensor_type(t).shape) if env.is_tensor(t) else evaluate(e, env)
        if e.func == "dim" and isinstance(e.args[1], Const) and isinstance(e.args[1].value, int):
            i = e.args[1].value
            return lambda env: _dim(env, t, i) if env.is_tensor(t) else evaluate(e, env)
    if isinstance(e, Binary):
        a, b = compile_expr(e.left), compile_expr(e.right)
        if e.op == "and":
            return lambda env: bool(a(env)) and bool(b(env))
        if e.op == "or":
            return lambda env: bool(a(env)) or bool(b(env))
        if e.op == "==":
            return lambda env: a(env) == b(env)
        if e.op == "!=":
            return lambda env: a(env) != b(env)
    if isinstance(e, Unary) and e.op == "not":
        f = compile_expr(e.operand)
        return lambda env: not f(env)
    return lambda env: evaluate(e, env)
