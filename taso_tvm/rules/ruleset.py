"""Load rule files into a `RuleSet`: only verified rules load (unless explicitly and loudly allowed)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from ..graph import TensorGraph
from .language import Rule, read_rule_files
from .matcher import Match, apply_match, find_matches, graph_index

log = logging.getLogger(__name__)

LIBRARY_DIR = Path(__file__).parent / "library"
NOT_RULE_FILES = {"axioms.yaml"}
LIBRARY_ENTRY = "library"  # in a list of rule files (settings `rules:`, `--rules`): the shipped library's files


def library_files() -> list:
    """The shipped rule files (the axioms file is not a rule file)."""
    return [p for p in sorted(LIBRARY_DIR.glob("*.yaml")) if p.name not in NOT_RULE_FILES]


def required_ops(rule: Rule) -> frozenset:
    """The operators a graph must contain for the rule's source pattern to match there (every pattern node binds a
    graph node of exactly its operator)."""
    return frozenset(p.op for p in rule.source)


class RuleSet:
    """An ordered, immutable collection of rules, with their verification results.

    Rules are indexed by the operators their source patterns need: `matches` tries only the rules whose operators
    all occur in the graph, so a large (e.g. generated) rule set costs little on graphs it cannot touch."""

    SELECT_CACHE_SIZE = 256

    def __init__(self, rules: Iterable[Rule], results: Optional[dict] = None):
        self.rules = tuple(rules)
        self.results = dict(results or {})
        self._by_name = {r.name: r for r in self.rules}
        self._by_ops: dict[frozenset, list[int]] = {}  # required operators -> positions of the rules needing them
        for i, r in enumerate(self.rules):
            self._by_ops.setdefault(required_ops(r), []).append(i)
        self._selected: dict[frozenset, tuple] = {}  # the graph's operators -> the rules that may match, in order

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

    def candidates(self, ops: Iterable[str]) -> tuple:
        """The rules (in rule-set order) whose source operators all occur among `ops`; the others cannot match."""
        present = frozenset(ops)
        hit = self._selected.get(present)
        if hit is None:
            pos = sorted(i for need, idx in self._by_ops.items() if need <= present for i in idx)
            hit = tuple(self.rules[i] for i in pos)
            if len(self._selected) >= self.SELECT_CACHE_SIZE:
                self._selected.clear()
            self._selected[present] = hit
        return hit

    def matches(self, graph: TensorGraph) -> list:
        """Every (rule, match) in the graph, in rule-set order; the graph is indexed once for all rules and only
        the rules whose operators occur in it are tried."""
        index = graph_index(graph)
        out: list[tuple[Rule, Match]] = []
        for r in self.candidates(index.by_op):
            out.extend((r, m) for m in find_matches(r, graph, index=index))
        return out

    def apply(self, graph: TensorGraph, rule: Rule, match: Match) -> Optional[TensorGraph]:
        """The graph with one match rewritten, or None when the target does not build there or makes a cycle."""
        return apply_match(rule, graph, match)

    def __repr__(self) -> str:
        return f"RuleSet({len(self.rules)} rules)"


def load_rules(paths: Optional[Iterable] = None, allow_unverified: bool = False, jobs: Optional[int] = None,
               use_cache: bool = True) -> RuleSet:
    """Read rule files (default: the shipped library; the entry `library` in `paths` stands for it, so
    `["library", "generated.yaml"]` adds a file to it) and keep the verified rules.

    Verification results are cached by rule hash, so a library verified once loads instantly. A rule that is not
    verified is left out with an error in the log; `allow_unverified=True` loads it anyway, with a warning.
    """
    from .verify import verify_rules

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
