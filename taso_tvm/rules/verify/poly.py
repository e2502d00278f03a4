"""Exact polynomials over a rule instance's input elements: the bounded proof's fast path.

Every operator the rules use is a polynomial in its inputs (add, mul, matmul, conv2d, concat, split, transpose,
reshape, pad...), or a function applied to one (relu, exp, recip, max...). A `Poly` is a sum of monomials with exact
rational coefficients (`int` or `Fraction`); a monomial is a product of *atoms*: an input element, or a function
applied to polynomials (`relu(p)`, interned by the function's name and its arguments' normal forms, so that equal
arguments give the same atom). Two sides whose normal forms are equal are equal for every value of the inputs and
for every interpretation of the functions (congruence), so equal normal forms are a proof; unequal ones go to Z3 with
the functions' exact semantics (`to_z3`). The one fact about a function used here is relu's: relu(p) is p where p
is non-negative by its form (every monomial a product of relu atoms and squares, all coefficients positive) and 0
where p is non-positive by its form. Float constants are read as the rational of their shortest decimal form,
as `z3.RealVal` reads them.

An evaluation that would multiply more than `PRODUCT_BUDGET` monomials stops (`BudgetExceeded`): the verifier then
uses Z3 terms, whose shared subterms stay small where the expanded form does not.

The operators' Z3 slots accept these values: `graph.ops.elementwise` dispatches relu, functions, reciprocals and
max to `Poly.sym_apply` when a value has one, and conv2d and matmul sum their products with `Poly.sym_dot` (the
graph package never imports this module).
"""
from __future__ import annotations

from fractions import Fraction
from numbers import Rational
from typing import Any, Iterable, Optional

import numpy as np

PRODUCT_BUDGET = 4_000_000  # monomial products per evaluation (a few seconds); beyond it Z3's terms are used

# functions with an exact meaning on constants (folded); every other name is uninterpreted on non-constants
_CONST_FOLD = {
    "relu": lambda c: c if c > 0 else 0,
    "max": lambda a, b: a if a >= b else b,
    "recip": lambda c: Fraction(1) / c if c != 0 else None,
}


def coefficient(v: Any) -> Any:
    """A plain number as an exact int or Fraction (float: its shortest decimal form). TypeError for anything else;
    ValueError for inf / nan."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, Fraction):
        return v
    if isinstance(v, (float, np.floating)):
        f = Fraction(repr(float(v)))  # raises ValueError for inf / nan
        return int(f) if f.denominator == 1 else f
    if isinstance(v, Rational):
        return Fraction(v.numerator, v.denominator)
    raise TypeError(f"not a number: {type(v).__name__}")


class BudgetExceeded(ArithmeticError):
    """The evaluation multiplied more monomials than its ring's budget (the expanded form is too large)."""


class Ring:
    """The atoms of one evaluation: input elements and interned function applications, each an int id (the
    monomials' order); `budget`: how many monomial products the evaluation may compute."""

    def __init__(self, budget: Optional[int] = None) -> None:
        self.budget = PRODUCT_BUDGET if budget is None else budget
        self.atoms: list = []  # id -> ("var", name) | ("app", function, argument polys)
        self._ids: dict = {}  # ("var", name) | ("app", function, argument keys) -> id
        self.nonneg: list = []  # id -> the atom is >= 0 for all inputs (relu; max with such an argument)

    def var(self, name: str) -> "Poly":
        key = ("var", name)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.atoms)
            self.atoms.append(key)
            self.nonneg.append(False)
        return Poly(self, {(i,): 1})

    def const(self, v: Any) -> "Poly":
        c = coefficient(v)
        return Poly(self, {(): c} if c else {})

    def app(self, name: str, args: tuple) -> "Poly":
        """`name(*args)`: folded when every argument is a constant and `name` has an exact constant meaning, else
        the interned atom."""
        fold = _CONST_FOLD.get(name)
        if fold is not None and all(a.is_const() for a in args):
            c = fold(*(a.const_value() for a in args))
            if c is not None:
                return self.const(c)
        if name == "relu":  # relu(p) = p where p >= 0 for all inputs, 0 where p <= 0
            sign = args[0].sign()
            if sign > 0:
                return args[0]
            if sign < 0:
                return Poly(self, {})
        key = ("app", name, tuple(a.key() for a in args))
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.atoms)
            self.atoms.append(("app", name, args))
            self.nonneg.append(name == "relu" or name == "max" and any(a.sign() > 0 for a in args))
        return Poly(self, {(i,): 1})

    def spend(self, products: int) -> None:
        self.budget -= products
        if self.budget < 0:
            raise BudgetExceeded("the expanded polynomials exceed the product budget")

    def atom_value(self, i: int, values: dict) -> Fraction:
        a = self.atoms[i]
        if a[0] == "var":
            return Fraction(coefficient(values[a[1]]))
        args = [p.evaluate(values) for p in a[2]]
        if a[1] == "relu":
            return max(args[0], Fraction(0))
        if a[1] == "max":
            return max(args)
        raise KeyError(f"no exact value for the function {a[1]}")

    def lift(self, v: Any) -> "Poly":
        if isinstance(v, Poly):
            if v.ring is not self:
                raise TypeError("a polynomial of another ring")
            return v
        return self.const(v)


class Poly:
    """A polynomial: {monomial (sorted tuple of atom ids): non-zero coefficient}."""

    __slots__ = ("ring", "terms")

    def __init__(self, ring: Ring, terms: dict):
        self.ring, self.terms = ring, terms

    # -------------------------------------------------------- inspection
    def is_const(self) -> bool:
        return not self.terms or (len(self.terms) == 1 and () in self.terms)

    def const_value(self) -> Any:
        return self.terms.get((), 0)

    def key(self) -> frozenset:
        """The normal form as a hashable value (equal keys: equal polynomials)."""
        return frozenset(self.terms.items())

    def same(self, other: "Poly") -> bool:
        return self.terms == other.terms

    def sign(self) -> int:
        """1: >= 0 for all inputs, -1: <= 0 for all inputs, by its form alone (every monomial a product of
        atoms known to be >= 0 and of squares, all coefficients of one sign); else 0 (unknown)."""
        if not self.terms:
            return 1
        nonneg = self.ring.nonneg
        pos = neg = True
        for m, c in self.terms.items():
            if not _monomial_nonneg(m, nonneg):
                return 0
            pos, neg = pos and c > 0, neg and c < 0
            if not (pos or neg):
                return 0
        return 1 if pos else -1

    def __repr__(self) -> str:
        return f"Poly({sorted(self.terms.items())})"

    # -------------------------------------------------------- arithmetic
    def _other(self, o: Any) -> Optional["Poly"]:
        if isinstance(o, Poly):
            return o if o.ring is self.ring else None
        if o.__class__ is int or o.__class__ is float and o == 0:  # the common constants, fast
            return Poly(self.ring, {(): int(o)} if o else {})
        try:
            return self.ring.const(o)
        except (TypeError, ValueError):
            return None

    def __add__(self, o: Any) -> Any:
        p = self._other(o)
        if p is None:
            return NotImplemented
        a, b = (self.terms, p.terms) if len(self.terms) >= len(p.terms) else (p.terms, self.terms)
        if not b:
            return Poly(self.ring, a)
        out = dict(a)
        for m, c in b.items():
            s = out.get(m, 0) + c
            if s:
                out[m] = s
            else:
                out.pop(m, None)
        return Poly(self.ring, out)

    __radd__ = __add__

    def __neg__(self) -> "Poly":
        return Poly(self.ring, {m: -c for m, c in self.terms.items()})

    def __pos__(self) -> "Poly":
        return self

    def __sub__(self, o: Any) -> Any:
        p = self._other(o)
        return NotImplemented if p is None else self + (-p)

    def __rsub__(self, o: Any) -> Any:
        p = self._other(o)
        return NotImplemented if p is None else p + (-self)

    def __mul__(self, o: Any) -> Any:
        p = self._other(o)
        if p is None:
            return NotImplemented
        a, b = self.terms, p.terms
        if not a or not b:
            return Poly(self.ring, {})
        if len(b) == 1 and () in b:
            c = b[()]
            return Poly(self.ring, {m: k * c for m, k in a.items()})
        if len(a) == 1 and () in a:
            c = a[()]
            return Poly(self.ring, {m: k * c for m, k in b.items()})
        self.ring.spend(len(a) * len(b))
        out: dict = {}
        for m1, c1 in a.items():
            for m2, c2 in b.items():
                m = _times(m1, m2)
                s = out.get(m, 0) + c1 * c2
                if s:
                    out[m] = s
                else:
                    out.pop(m, None)
        return Poly(self.ring, out)

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        p = self._other(o)
        if p is None or not p.is_const() or p.const_value() == 0:
            return NotImplemented  # division by a non-constant or zero: not a polynomial
        return self * (Fraction(1) / p.const_value())

    def evaluate(self, values: dict) -> Any:
        """The value at `values` (input element name -> number), exactly (relu and max evaluated; other functions
        raise KeyError)."""
        atoms: dict = {}
        total = Fraction(0)
        for m, c in self.terms.items():
            term = Fraction(c)
            for i in m:
                if i not in atoms:
                    atoms[i] = self.ring.atom_value(i, values)
                term *= atoms[i]
            total += term
        return total

    def sym_dot(self, xs: Iterable, ys: Iterable) -> "Poly":
        """sum(x * y for x, y in zip(xs, ys)) over this polynomial's ring, accumulated in place (elements: Poly or
        plain numbers)."""
        ring = self.ring
        acc: dict = {}
        for x, y in zip(xs, ys):
            if not isinstance(x, Poly):
                if not x:
                    continue
                x = ring.lift(x)
            if not isinstance(y, Poly):
                if not y:
                    continue
                y = ring.lift(y)
            if x.ring is not ring or y.ring is not ring:
                raise TypeError("a polynomial of another ring")
            ring.spend(len(x.terms) * len(y.terms))
            for m1, c1 in x.terms.items():
                for m2, c2 in y.terms.items():
                    m = _times(m1, m2)
                    v = acc.get(m, 0) + c1 * c2
                    if v:
                        acc[m] = v
                    else:
                        acc.pop(m, None)
        return Poly(ring, acc)

    def sym_apply(self, name: str, *others: Any) -> "Poly":
        """`name(self, *others)` (the hook `graph.ops.elementwise` calls for relu, functions, recip, max)."""
        args = (self,) + tuple(self.ring.lift(o) for o in others)
        return self.ring.app(name, args)


def _times(m1: tuple, m2: tuple) -> tuple:
    """The product of two monomials (sorted tuples of atom ids)."""
    if not m1 or not m2:
        return m1 or m2
    if m1[-1] <= m2[0]:
        return m1 + m2
    if m2[-1] <= m1[0]:
        return m2 + m1
    return tuple(sorted(m1 + m2))


def _monomial_nonneg(m: tuple, nonneg: list) -> bool:
    """Every atom of the (sorted) monomial is >= 0 or occurs an even number of times."""
    i, n = 0, len(m)
    while i < n:
        j = i
        while j < n and m[j] == m[i]:
            j += 1
        if (j - i) % 2 and not nonneg[m[i]]:
            return False
        i = j
    return True


# ---------------------------------------------------------------- arrays
def lift_array(ring: Ring, arr: Any) -> np.ndarray:
    """An object array of Poly from an array (or scalar) of Poly and plain numbers (TypeError / ValueError when an
    element is neither, e.g. a z3 expression or inf)."""
    a = np.asarray(arr, dtype=object)
    out = np.empty(a.shape, dtype=object)
    for i, v in np.ndenumerate(a):
        out[i] = v if isinstance(v, Poly) and v.ring is ring else ring.lift(v)
    return out


# ---------------------------------------------------------------- Z3
class Z3Converter:
    """Poly -> z3 Real expressions: input elements as z3.Real(name), relu and max as If, every other function as
    the uninterpreted function of `graph.ops.elementwise.z3_fn` (the semantics of the operators' Z3 slots)."""

    def __init__(self, ring: Ring):
        self.ring = ring
        self._atoms: dict = {}

    def atom(self, i: int) -> Any:
        import z3

        from ...graph.ops.elementwise import z3_fn

        z = self._atoms.get(i)
        if z is not None:
            return z
        a = self.ring.atoms[i]
        if a[0] == "var":
            z = z3.Real(a[1])
        else:
            args = [self.poly(p) for p in a[2]]
            if a[1] == "relu":
                z = z3.If(args[0] > 0, args[0], z3.RealVal(0))
            elif a[1] == "max":
                z = z3.If(args[1] > args[0], args[1], args[0])
            elif len(args) == 1:
                z = z3_fn(a[1])(*args)
            else:  # an n-ary uninterpreted function (`elementwise.z3_apply_n`: where)
                z = z3.Function(a[1], *([z3.RealSort()] * (len(args) + 1)))(*args)
        self._atoms[i] = z
        return z

    def poly(self, p: Poly) -> Any:
        import z3

        terms = []
        for m, c in sorted(p.terms.items()):
            q = c if isinstance(c, Fraction) else Fraction(c)
            factors = [self.atom(i) for i in m]
            coef = z3.RealVal(f"{q.numerator}/{q.denominator}")
            if not factors:
                terms.append(coef)
            elif q == 1:
                terms.append(factors[0] if len(factors) == 1 else z3.Product(factors))
            else:
                terms.append(z3.Product([coef] + factors))
        if not terms:
            return z3.RealVal(0)
        return terms[0] if len(terms) == 1 else z3.Sum(terms)


def to_z3(ring: Ring, polys: Iterable[Poly]) -> list:
    conv = Z3Converter(ring)
    return [conv.poly(p) for p in polys]
