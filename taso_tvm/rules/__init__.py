"""Substitution rules: the YAML rule language, the matcher, the Z3 verifier and the shipped library.

>>> from taso_tvm.rules import load_rules
>>> rules = load_rules()                      # the shipped library, verified (cached)
>>> for rule, match in rules.matches(graph):
...     new_graph = rules.apply(graph, rule, match)  # None when not applicable
"""
from . import op_facets  # noqa: F401  (declares and registers the rules.* operator facets)
from .language.compile import compile_rule, parse_rules, read_rule_files
from .language.rule import Rule, RuleError
from .matching.matcher import GraphIndex, Match, find_matches, graph_index
from .matching.rewrite import apply_match
from .ruleset import RuleSet, library_files, load_rules

__all__ = ["Rule", "RuleError", "RuleSet", "Match", "GraphIndex", "compile_rule", "parse_rules", "read_rule_files",
           "find_matches", "apply_match", "graph_index", "load_rules", "library_files"]
