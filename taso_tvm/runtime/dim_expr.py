"""Symbolic dims written as expressions of other dims (torch's dynamo exporter: a KV cache's attention mask is
`past_sequence_length + 1` long): parsed once, evaluated from the values of the dims they name, solved for the one
dim they name when a value is given for the expression.

A dim name that is a plain identifier (or anything that does not parse as integer arithmetic) is not an expression:
`parse` gives None and the name is a dim of its own, as before.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Mapping, Optional

from .. import errors as _errors

class DimExprError(_errors.ModelError, ValueError):
    """A symbolic dim's expression that has no value at the dims given (a division by zero)."""


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_CALLS = {"max": max, "min": min}


@dataclass(frozen=True)
class DimExpr:
    """An integer expression over named dims (+, -, *, //, %, Max, Min and integer constants)."""

    text: str
    names: tuple  # the dims it reads, in order of first appearance
    _tree: ast.AST

    def value(self, values: Mapping[str, int]) -> int:
        """The expression at `values` (every name in `names` bound)."""
        try:
            return int(_eval(self._tree, values))
        except ZeroDivisionError:
            at = ", ".join(f"{n}={values[n]}" for n in self.names)
            raise DimExprError(f"symbolic dim '{self.text}' divides by zero at {at}") from None

    def solve(self, target: int, values: Mapping[str, int]) -> Optional[dict]:
        """{name: value} for the one unbound name that makes the expression `target` (the smallest such value in
        0 .. 4 * target + 64), None if there is none, or no unbound name, or several."""
        free = [n for n in self.names if n not in values]
        if len(free) != 1:
            return None
        name = free[0]
        for v in range(0, 4 * max(target, 0) + 65):
            try:
                if self.value({**values, name: v}) == target:
                    return {name: v}
            except DimExprError:  # a divisor at 0: not a value the dim can take
                continue
        return None


def _eval(node: ast.AST, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body, values)
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        return int(values[node.id])
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, values)
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    assert isinstance(node, ast.Call)
    return _CALLS[node.func.id.lower()](*(_eval(a, values) for a in node.args))


def _valid(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub) and _valid(node.operand)
    if isinstance(node, ast.BinOp):
        return type(node.op) in _BINOPS and _valid(node.left) and _valid(node.right)
    if isinstance(node, ast.Call):
        return (isinstance(node.func, ast.Name) and node.func.id.lower() in _CALLS and not node.keywords
                and len(node.args) >= 2 and all(_valid(a) for a in node.args))
    return False


@functools.lru_cache(maxsize=1024)
def parse(text: str) -> Optional[DimExpr]:
    """The expression a dim name writes, None for a plain name or text that is not integer arithmetic of names."""
    if not text or len(text) > 200:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    if isinstance(tree.body, ast.Name) or not _valid(tree.body):
        return None
    funcs = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
    names = tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in funcs))
    if not names:
        return None  # a constant written as a name: not a symbolic dim
    return DimExpr(text, names, tree)


def base_dims(text: str) -> tuple:
    """The dims a dim name stands for: the names of its expression, or the name itself."""
    e = parse(text)
    return e.names if e is not None else (text,)


def dim_value(text: str, values: Mapping[str, int], default: Optional[int] = None) -> int:
    """A dim name's value: its expression evaluated (unbound names at `default`), or its own value (or
    `default`). KeyError when unbound and no default."""
    e = parse(text)
    if e is None:
        return int(values[text]) if default is None else int(values.get(text, default))
    if default is not None:
        values = {**{n: default for n in e.names}, **values}
    return e.value(values)


__all__ = ["DimExpr", "DimExprError", "parse", "base_dims", "dim_value"]
