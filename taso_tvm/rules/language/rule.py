"""The compiled form of a substitution rule: `Rule` and its parts (pattern nodes, tensor arguments, attributes,
constraints, verification settings), and `RuleError`, which names the file, line and rule.

`compile.py` compiles rule-file entries into these; see docs/rules.md for the language.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional

from ... import errors as _errors


class RuleError(_errors.RuleFileError, ValueError):
    """A malformed rule: says which file, line and rule, and what is wrong."""

    def __init__(self, msg: str, file: Optional[str] = None, line: Optional[int] = None,
                 rule: Optional[str] = None):
        self.msg, self.file, self.line, self.rule = msg, file, line, rule
        where = f"{file or '<string>'}:{line if line is not None else '?'}"
        super().__init__(f"{where}: rule '{rule}': {msg}" if rule else f"{where}: {msg}")


@dataclass(frozen=True)
class ArgRef:
    """A tensor argument of a pattern node: an input variable, a pattern node's output, or (target) a source name."""

    kind: str  # 'var' | 'node' | 'src'
    name: str = ""
    node: int = -1
    out: int = 0


@dataclass(frozen=True)
class AttrSpec:
    """An attribute of a pattern node: a constant, an attribute variable (binds/reuses), or an expression."""

    kind: str  # 'const' | 'var' | 'expr'
    value: Any


@dataclass
class PNode:
    """One operator application of a pattern (named or anonymous)."""

    index: int
    op: str  # registry operator, or 'const' in a target
    args: tuple
    attrs: dict
    splat: Optional[str]
    names: tuple  # output names (None: anonymous)
    line: int

    @property
    def n_outputs(self) -> int:
        return len(self.names)


@dataclass
class Constraint:
    expr: Any
    text: str
    line: int


@dataclass
class VerifySpec:
    shapes: list = field(default_factory=list)  # alternatives: [{input var -> tuple of int | symbol name}]
    dims: dict = field(default_factory=dict)  # symbol -> tuple of ints
    attrs: dict = field(default_factory=dict)  # attr var (or group.key) -> tuple of values
    instances: int = 8
    axiomatic: bool = True
    bounded_only: str = ""  # why the rule opts out of the axiomatic proof (required to opt out)
    timeout: float = 10.0
    elements: int = 400  # skip instances with more input elements than this


@dataclass
class Rule:
    """A compiled substitution: source pattern, target pattern, outputs, constraints, verification settings.

    A rule is data: `matcher.find_matches(rule, graph)` finds it in a graph, `rewrite.apply_match` rewrites a match."""

    name: str
    file: Optional[str]
    line: int
    family: str
    doc: str
    source: list  # [PNode]
    target: list  # [PNode]
    inputs: list  # tensor variables, in order of first use
    attr_vars: dict  # attr var -> (pattern node index, attribute) of its first use
    splats: dict  # group name -> pattern node index of its first use
    src_names: dict  # named source tensor -> ArgRef('node')
    outputs: list  # names of replaced source tensors
    tgt_outputs: dict  # output name -> ArgRef in the target ('node' or 'src')
    where: list  # [Constraint]
    facts: list  # [Constraint] (axioms: properties that hold whenever the source builds)
    verify: VerifySpec
    canonical: str  # canonical JSON of the entry without name, doc, family, expect (hash input)
    expect: Optional[str] = None
    _compiled: Any = None  # matcher data, built lazily

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical.encode()).hexdigest()

    def __getstate__(self) -> dict:  # the matcher's compiled form holds closures: rebuilt after unpickling
        d = dict(self.__dict__)
        d["_compiled"] = None
        return d

    @property
    def ops(self) -> set:
        return {n.op for n in self.source} | {n.op for n in self.target if n.op != "const"}

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {len(self.source)} -> {len(self.target)} ops)"
