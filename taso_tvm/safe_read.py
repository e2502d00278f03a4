"""Reading files someone else wrote: every file the tool takes is data, checked by type and size before it is
opened, and YAML is read with the safe loader after a streaming pass that bounds nesting and alias expansion.

    check_regular_file(path, kind, max_bytes)   refuse a missing file, a directory, FIFO, device or socket, and
                                                a file over the cap, from `os.stat` alone (a FIFO is never opened)
    read_text / read_bytes                      the check, then the read (at most the cap)
    read_json                                   JSON data (deep nesting refused, not a RecursionError)
    check_yaml / load_yaml                      bounded YAML: nesting depth, alias expansion, scalar errors

Errors are `UnsafeFileError` (an InputError, exit 2) with one line naming the file (and line). Callers with their
own error class catch it and re-raise theirs. This module imports nothing from the project but `errors`.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any, Optional

import yaml

from .errors import InputError

MIB = 1 << 20
TEXT_CAP = 8 * MIB  # rule files and settings files: far above any real one
JSON_CAP = 256 * MIB  # JSON the tool imports (kernel timings, tuning records)
MAX_DEPTH = 64  # nested YAML collections
MAX_ALIAS_NODES = 10_000  # nodes YAML aliases may add when expanded (an alias bomb adds billions)

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader when present


class UnsafeFileError(InputError, ValueError):
    """A file that is not a regular file, too large, or YAML that nests or expands past the limits; one line."""

    def __init__(self, msg: str, line: int = 0, detail: str = ""):
        super().__init__(msg)
        self.msg, self.line, self.detail = msg, line, detail or msg  # detail: the message without the place


def _at(where: str, line: int, detail: str) -> UnsafeFileError:
    return UnsafeFileError(f"{where}{f' line {line}' if line else ''}: {detail}", line, detail)


def _refuse(kind: str, path: "str | os.PathLike[str]", why: str) -> UnsafeFileError:
    return UnsafeFileError(f"cannot read {kind} '{os.fspath(path)}': {why}", 0, why)


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular_file(path: "str | os.PathLike[str]", kind: str, max_bytes: Optional[int] = None) -> int:
    """The size of `path` if it is a regular file (symlinks followed) of at most `max_bytes`; else UnsafeFileError
    ("cannot read <kind> '<path>': ...")."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _refuse(kind, path, "no such file") from None
    except (OSError, ValueError) as e:
        raise _refuse(kind, path, str(getattr(e, "strerror", None) or e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(kind, path, f"it is {_kind_of(st.st_mode)}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise _refuse(kind, path, f"{st.st_size} bytes is over the limit of {max_bytes} bytes")
    return st.st_size


def read_bytes(path: "str | os.PathLike[str]", kind: str, max_bytes: Optional[int] = TEXT_CAP) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (checked before opening, and while reading)."""
    check_regular_file(path, kind, max_bytes)
    try:
        with open(path, "rb") as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as e:
        raise _refuse(kind, path, f"{e.strerror or e}") from None
    if max_bytes is not None and len(data) > max_bytes:  # grew since the check
        raise _refuse(kind, path, f"over the limit of {max_bytes} bytes")
    return data


def read_text(path: "str | os.PathLike[str]", kind: str, max_bytes: Optional[int] = TEXT_CAP) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`."""
    data = read_bytes(path, kind, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _refuse(kind, path, f"not UTF-8 text (byte {e.start})") from None


def _line(event: Any) -> int:
    mark = getattr(event, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def check_yaml(text: str, where: str) -> None:
    """Stream `text`'s YAML events once (nothing is built) and refuse nesting deeper than MAX_DEPTH, an alias to a
    node that contains it, and aliases that would expand to more than MAX_ALIAS_NODES nodes."""
    stack: list = []  # [expanded size, anchor] of each open collection
    sizes: dict = {}  # anchor -> expanded size of its node
    added = 0
    try:
        for ev in yaml.parse(text, Loader=_LOADER):
            if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                if len(stack) >= MAX_DEPTH:
                    raise _at(where, _line(ev), f"nested deeper than {MAX_DEPTH} levels")
                stack.append([1, ev.anchor])
                if ev.anchor is not None:
                    sizes.pop(ev.anchor, None)
                continue
            if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                n, anchor = stack.pop()
                if anchor is not None:
                    sizes[anchor] = n
            elif isinstance(ev, yaml.ScalarEvent):
                n = 1
                if ev.anchor is not None:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                if any(a == ev.anchor for _n, a in stack):
                    raise _at(where, _line(ev), f"alias *{ev.anchor} refers to a node that contains it")
                n = sizes.get(ev.anchor, 1)  # an undefined alias: the composer says so
                added += n
                if added > MAX_ALIAS_NODES:
                    raise _at(where, _line(ev), f"aliases expand to more than {MAX_ALIAS_NODES} nodes")
            else:
                continue
            if stack:
                stack[-1][0] += n
    except yaml.YAMLError:
        return  # the loader reports the syntax error with its line


def _first(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err).strip() else type(err).__name__


def _yaml_error(err: yaml.YAMLError, where: str) -> UnsafeFileError:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    line = mark.line + 1 if mark is not None else 0
    problem = getattr(err, "problem", None) or (str(err).splitlines()[0] if str(err) else type(err).__name__)
    return _at(where, line, f"invalid YAML: {problem}")


def compose_yaml(text: str, where: str) -> Optional[yaml.Node]:
    """The YAML node tree of `text` (None when empty), after `check_yaml`."""
    check_yaml(text, where)
    try:
        return yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as err:
        raise _yaml_error(err, where) from None


_SCALARS = yaml.SafeLoader("")  # only its constructor is used, for scalar nodes


def construct_scalar(node: yaml.Node, where: str) -> Any:
    """A scalar node's value as the safe loader makes it; a value it cannot make (a 5000-digit integer, a date
    that does not exist, bad base64) is an UnsafeFileError naming the line."""
    try:
        return _SCALARS.construct_object(node, deep=True)
    except yaml.YAMLError as err:
        raise _yaml_error(err, where) from None
    except (ValueError, TypeError, OverflowError) as err:
        raise _at(where, node.start_mark.line + 1, f"bad value {str(node.value)[:40]!r} ({_first(err)})") from None


def load_yaml(text: str, where: str) -> Any:
    """`yaml.safe_load` with the limits of `check_yaml`; errors are UnsafeFileError naming `where` and the line."""
    check_yaml(text, where)
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as err:
        raise _yaml_error(err, where) from None
    except (ValueError, TypeError, OverflowError) as err:  # a scalar the constructor cannot make
        raise _at(where, 0, f"bad value ({_first(err)})") from None


def read_yaml(path: "str | os.PathLike[str]", kind: str, max_bytes: int = TEXT_CAP) -> Any:
    """A YAML file's data: `read_text`, then `load_yaml`."""
    return load_yaml(read_text(path, kind, max_bytes), f"cannot read {kind} '{os.fspath(path)}'")


def read_json(path: "str | os.PathLike[str]", kind: str, max_bytes: int = JSON_CAP) -> Any:
    """A JSON file's data; malformed or too deeply nested JSON is an UnsafeFileError."""
    text = read_text(path, kind, max_bytes)
    try:
        return json.loads(text)
    except ValueError as e:
        raise _refuse(kind, path, f"not valid JSON ({_first(e)})") from None
    except RecursionError:
        raise _refuse(kind, path, "JSON nested too deeply") from None
