"""Load rule files into a `RuleSet`: only verified rules load (unless explicitly and loudly allowed)."""
from __future__ import annotations

import logging
import weakref
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Optional, Union

from ..graph import TensorGraph
from .language.rule import Rule
from .language.compile import read_rule_files
from .matching.matcher import Match, find_matches, graph_index
from .matching.rewrite import apply_match

log = logging.getLogger(__name__)

LIBRARY_DIR = Path(__file__).parent / "library"
NOT_RULE_FILES = {"axioms.yaml"}
LIBRARY_ENTRY = "library"  # in a list of rule files (settings `rules:`, `--rules`): the shipped library's files


def library_files() -> list:
    """The shipped rule files (the axioms file is not a rule file)."""
    return [p for p in sorted(LIBRARY_DIR.glob("*.yaml")) if p.name not in NOT_RULE_FILES]


def required_ops(rule: Rule) -> dict:
    """{operator: nodes} of the rule's source pattern: a graph with fewer nodes of an operator has no match (every
    pattern node binds its own graph node of exactly its operator)."""
    return dict(Counter(p.op for p in rule.source))


class RuleSet:
    """An ordered, immutable collection of rules, with their verification results.

    Rules are indexed by the operators their source patterns need: `matches` tries only the rules whose operators
    all occur in the graph, each as often as the pattern has it, so a large (e.g. generated) rule set costs little
    on graphs it cannot touch."""

    SELECT_CACHE_SIZE = 256

    def __init__(self, rules: Iterable[Rule], results: Optional[dict] = None):
        self.rules = tuple(rules)
        self.results = dict(results or {})
        self._by_name = {r.name: r for r in self.rules}
        self._needs: dict[frozenset, list[int]] = {}  # {(op, count)} -> positions of the rules needing exactly it
        self._cap: dict[str, int] = {}  # op -> the most nodes of it any pattern has
        for i, r in enumerate(self.rules):
            need = required_ops(r)
            self._needs.setdefault(frozenset(need.items()), []).append(i)
            for op, n in need.items():
                self._cap[op] = max(self._cap.get(op, 0), n)
        self._selected: dict[frozenset, tuple] = {}  # graph signature -> the rules that may match, in order
        self._rewrites: Optional[tuple] = None

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __getitem__(self, key: Union[int, str]) -> Rule:
        return self._by_name[key] if isinstance(key, str) else self.rules[key]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> list:
        return [r.name for r in self.rules]

    def families(self) -> dict:
        out: dict = {}
        for r in self.rules:
            out.setdefault(r.family, []).append(r.name)
        return out

    def candidates(self, op_counts: Mapping[str, int]) -> tuple:
        """The rules (in rule-set order) that may match a graph with `op_counts` {operator: nodes}: those whose
        source operators all occur there as often as in the pattern; the others cannot match."""
        cap = self._cap
        sig = frozenset((op, min(n, cap[op])) for op, n in op_counts.items() if n > 0 and op in cap)
        hit = self._selected.get(sig)
        if hit is None:
            have = dict(sig)
            pos = sorted(i for need, idx in self._needs.items() if all(have.get(op, 0) >= n for op, n in need)
                         for i in idx)
            hit = tuple(self.rules[i] for i in pos)
            if len(self._selected) >= self.SELECT_CACHE_SIZE:
                self._selected.clear()
            self._selected[sig] = hit
        return hit

    def matches(self, graph: TensorGraph) -> list:
        """Every (rule, match) in the graph, in rule-set order; the graph is indexed once for all rules and only
        the rules whose operators occur in it (`candidates`) are tried."""
        index = graph_index(graph)
        out: list[tuple[Rule, Match]] = []
        for r in self.candidates({op: len(ids) for op, ids in index.by_op.items()}):
            out.extend((r, m) for m in find_matches(r, graph, index=index))
        return out

    def apply(self, graph: TensorGraph, rule: Rule, match: Match) -> Optional[TensorGraph]:
        """The graph with one match rewritten, or None when the target does not build there or makes a cycle."""
        return apply_match(rule, graph, match)

    def pattern_rewrites(self) -> tuple:
        """(the rules as e-graph rewrites (`eqsat.PatternRewrite`), a RuleSet of those that cannot be, left to the
        backtracking search). Built once; each untranslatable rule is named in the log once per process."""
        if self._rewrites is None:
            from .matching.eqsat import pattern_rewrites

            rewrites, skipped = pattern_rewrites(self.rules)
            by_reason: dict = {}
            for name, why in skipped.items():
                if name not in _SKIP_LOGGED:
                    _SKIP_LOGGED.add(name)
                    by_reason.setdefault(why, []).append(name)
            for why, names in by_reason.items():
                log.warning("%d rule(s) not run by the e-graph search (%s), the backtracking search runs them: %s",
                            len(names), why, ", ".join(names))
            self._rewrites = (tuple(rewrites), RuleSet([r for r in self.rules if r.name in skipped],
                                                       {n: v for n, v in self.results.items() if n in skipped}))
        return self._rewrites

    def __repr__(self) -> str:
        return f"RuleSet({len(self.rules)} rules)"


_SKIP_LOGGED: set = set()  # names of untranslatable rules already logged


_WITHOUT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # rule set -> {ops: the set without them}


def without_ops(rules: RuleSet, ops: Iterable[str]) -> RuleSet:
    """The rules of `rules` that do not use any of `ops` (in source or target), as a rule set (made once per set);
    `rules` itself when none does."""
    ops = frozenset(ops)
    cache = _WITHOUT.setdefault(rules, {})
    if ops not in cache:
        keep = [r for r in rules.rules if not r.ops & ops]
        cache[ops] = rules if len(keep) == len(rules.rules) else RuleSet(
            keep, {r.name: rules.results[r.name] for r in keep if r.name in rules.results})
    return cache[ops]


def load_rules(paths: Optional[Iterable] = None, allow_unverified: bool = False, jobs: Optional[int] = None,
               use_cache: bool = True) -> RuleSet:
    """Read rule files (default: the shipped library; the entry `library` in `paths` stands for it, so
    `["library", "generated.yaml"]` adds a file to it) and keep the verified rules.

    Verification results are cached by rule hash, so a library verified once loads instantly. A rule that is not
    verified is left out with an error in the log; `allow_unverified=True` loads it anyway, with a warning.
    """
    from .verify.verdict import verify_rules

    entries = [paths] if isinstance(paths, (str, Path)) else None if paths is None else list(paths)
    files = library_files() if entries is None else [f for e in entries
                                                      for f in (library_files() if e == LIBRARY_ENTRY else [e])]
    rules = read_rule_files(files)
    results = verify_rules(rules, jobs=jobs, use_cache=use_cache)
    keep, res = [], {}
    for r, v in zip(rules, results):
        res[r.name] = v
        if v.ok:
            keep.append(r)
        elif allow_unverified:
            log.warning("LOADING UNVERIFIED RULE %s (%s:%d): %s (allow_unverified=True)", r.name, r.file, r.line,
                        v.status)
            keep.append(r)
        else:
            log.error("rule %s (%s:%d) is %s and is not loaded: %s", r.name, r.file, r.line, v.status, v.reason())
    return RuleSet(keep, res)
