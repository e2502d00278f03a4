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


def library_files() -> list:
    """The shipped rule files (the axioms file is not a rule file)."""
    return [p for p in sorted(LIBRARY_DIR.glob("*.yaml")) if p.name not in NOT_RULE_FILES]


class RuleSet:
    """An ordered collection of rules, with their verification results."""

    def __init__(self, rules: Iterable[Rule], results: Optional[dict] = None):
        self.rules = list(rules)
        self.results = dict(results or {})
        self._by_name = {r.name: r for r in self.rules}

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

    def matches(self, graph: TensorGraph) -> list:
        """Every (rule, match) in the graph; the graph is indexed once for all rules."""
        index = graph_index(graph)
        out: list[tuple[Rule, Match]] = []
        for r in self.rules:
            out.extend((r, m) for m in find_matches(r, graph, index=index))
        return out

    def apply(self, graph: TensorGraph, rule: Rule, match: Match) -> Optional[TensorGraph]:
        """The graph with one match rewritten, or None when the target does not build there or makes a cycle."""
        return apply_match(rule, graph, match)

    def __repr__(self) -> str:
        return f"RuleSet({len(self.rules)} rules)"


def load_rules(paths: Optional[Iterable] = None, allow_unverified: bool = False, jobs: Optional[int] = None,
               use_cache: bool = True) -> RuleSet:
    """Read rule files (default: the shipped library) and keep the verified rules.

    Verification results are cached by rule hash, so a library verified once loads instantly. A rule that is not
    verified is left out with an error in the log; `allow_unverified=True` loads it anyway, with a warning.
    """
    from .verify import verify_rules

    files = library_files() if paths is None else [paths] if isinstance(paths, (str, Path)) else list(paths)
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
