"""The rule language: YAML rule files (with line numbers) compiled into `Rule`s, and the expression language of
their `where`, attribute and shape clauses.

- `yaml_lines`: YAML loading that keeps each entry's line;
- `expr`: the expression language (tokenizer, recursive-descent parser, evaluation);
- `rule`: the rule data model, and the compilation of YAML entries into it.
"""
from .compile import compile_rule, parse_rules, read_rule_files
from .rule import Rule, RuleError

__all__ = ["Rule", "RuleError", "compile_rule", "parse_rules", "read_rule_files"]
