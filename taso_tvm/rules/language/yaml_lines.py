"""Read YAML safely (the bounded safe loader of `taso_tvm.safe_read`) and keep the line number of every mapping key
and list item."""
from __future__ import annotations

from typing import Any

import yaml

from ... import errors as _errors
from ...safe_read import UnsafeFileError, compose_yaml, construct_scalar


class LMap(dict):
    """A YAML mapping that remembers its own line and each key's line (1-based)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class LList(list):
    """A YAML sequence that remembers its own line and each item's line (1-based)."""

    line: int = 0
    item_lines: list

    def line_of(self, i: int) -> int:
        return self.item_lines[i] if 0 <= i < len(self.item_lines) else self.line


class YamlError(_errors.RuleFileError, ValueError):
    def __init__(self, msg: str, line: int):
        super().__init__(msg)
        self.msg, self.line = msg, line


def _convert(node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = LMap()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for k, v in node.value:
            key = _convert(k)
            if isinstance(key, (dict, list)):
                raise YamlError("a mapping key must be a scalar", k.start_mark.line + 1)
            if key in out:
                raise YamlError(f"duplicate key '{key}'", k.start_mark.line + 1)
            out[key] = _convert(v)
            out.key_lines[key] = k.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        out_l = LList(_convert(v) for v in node.value)
        out_l.line = node.start_mark.line + 1
        out_l.item_lines = [v.start_mark.line + 1 for v in node.value]
        return out_l
    return construct_scalar(node, "YAML")


def load_yaml(text: str) -> Any:
    """Parse YAML text with the safe loader into LMap/LList/scalars. Raises YamlError with a line number."""
    try:
        node = compose_yaml(text, "YAML")
        return None if node is None else _convert(node)
    except UnsafeFileError as err:
        raise YamlError(err.detail, err.line) from None
