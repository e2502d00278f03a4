"""Settings files for the pass and the CLI: YAML with a `search:` section, a `cost:` section (the cost model's
settings, see configs/cpu.yaml) and an optional `rules:` list of rule files (the entry `library` is the shipped
library: `rules: [library, generated.yaml]` adds a generated file to it).

Precedence: defaults < the file named by $TASO_TVM_CONFIG < a `config=` file < explicit keyword arguments. The
environment variable is how `tvm.compile(mod, target, relax_pipeline="taso")`, which takes no arguments, is
configured.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from typing import Any, Iterator, Optional

from .. import errors as _errors
from ..safe_read import UnsafeFileError, read_yaml
from ..search.config import SearchConfig, check_setting

CONFIG_ENV = "TASO_TVM_CONFIG"
_SCOPE: contextvars.ContextVar = contextvars.ContextVar("taso_tvm_search_scope", default={})
SEARCH_DEFAULTS = SearchConfig.defaults()  # the settings users set, and their defaults


class SettingsError(_errors.SettingsError, ValueError):
    """An unreadable or malformed settings file; one line naming the file and the problem."""


def read_settings(path: str) -> dict:
    """{"search": {...}, "cost": path or None, "rules": RuleSet or None} from one YAML file, validated whole: unknown
    keys at any level, types and ranges, the cost section (see `load_cost_config`), and the rule files it names,
    which are read and verified (a rule that is not verified is an error, with its counterexample)."""
    from ..cost.config import CostConfig, load_cost_config

    try:
        data = read_yaml(path, "config") or {}
    except UnsafeFileError as e:
        raise SettingsError(str(e)) from None
    if not isinstance(data, dict):
        raise SettingsError(f"config '{path}' must be a mapping of settings")
    cost_keys = {f.name for f in dataclasses.fields(CostConfig)}
    sections = {"search", "cost", "rules"}
    for k in data:
        if k not in sections and k not in cost_keys:
            raise SettingsError(_errors.unknown_key("setting", k, sections | cost_keys, f" in config '{path}'"))
    search = data.get("search") or {}
    if not isinstance(search, dict):
        raise SettingsError(f"config '{path}': 'search' must be a mapping")
    for k, v in search.items():
        if k not in SEARCH_DEFAULTS:
            raise SettingsError(_errors.unknown_key("search setting", k, SEARCH_DEFAULTS, f" in config '{path}'"))
        why = check_setting(k, v)
        if why:
            raise SettingsError(f"config '{path}': search setting '{k}' {why}")
    has_cost = any(k not in ("search", "rules") for k in data)
    if has_cost:
        try:
            load_cost_config(path)
        except SettingsError:
            raise
        except _errors.TasoError as e:
            raise SettingsError(str(e)) from None
    rules = data.get("rules")
    if rules is not None:
        if isinstance(rules, str):
            rules = [rules]
        if not isinstance(rules, list) or not all(isinstance(r, str) and r for r in rules):
            raise SettingsError(f"config '{path}': 'rules' must be a rule file or a list of rule files")
        base = os.path.dirname(os.path.abspath(path))
        rules = load_named_rules(rule_paths(rules, base))
    return {"search": dict(search), "cost": path if has_cost else None, "rules": rules}


def rule_paths(entries: list, base: str = "") -> list:
    """Rule file paths from a `rules:` list: relative paths are taken from `base` (the settings file's folder) and
    the entry `library` stands for the shipped library's files, so `rules: [library, generated.yaml]` adds a rule
    file (e.g. one written by `taso-tvm rules generate`) to the library instead of replacing it."""
    from ..rules.ruleset import LIBRARY_ENTRY, library_files

    out: list = []
    for r in entries:
        if r == LIBRARY_ENTRY:
            out.extend(str(p) for p in library_files())
        else:
            out.append(r if os.path.isabs(r) or not base else os.path.join(base, r))
    return out


def load_named_rules(paths: list) -> Any:
    """Read and verify rule files the user named; a rule that is refuted or unproven is an error (with the
    counterexample), not a rule silently left out."""
    from ..rules.language.compile import read_rule_files
    from ..rules.ruleset import RuleSet
    from ..rules.verify.verdict import verify_rules

    for p in paths:
        if not os.path.isfile(p):
            raise _errors.RuleFileError(f"rule file '{p}' does not exist" if not os.path.exists(p)
                                        else f"rule file '{p}' is not a file")
    try:
        rules = read_rule_files(paths)
    except _errors.RuleFileError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _errors.RuleFileError(f"cannot read rule files {', '.join(map(str, paths))}: {_errors.one_line(e)}"
                                    ) from None
    results = verify_rules(rules)
    for r, v in zip(rules, results):
        if not v.ok:
            word = "refuted" if v.status == "refuted" else f"{v.status} (not verified)"
            raise _errors.RuleFileError(f"rule {r.name} ({r.file}:{r.line}) is {word}: {v.reason()}")
    return RuleSet(rules, {r.name: v for r, v in zip(rules, results)})


@contextlib.contextmanager
def search_scope(**settings: Any) -> Iterator[None]:
    """Search settings (e.g. `method="egraph"`) for every pass whose settings are resolved inside the block, above
    the settings files and below a pass's own keywords: for callers that cannot reach the passes (the ONNX
    optimizer builds one per region). None values are ignored."""
    for k, v in settings.items():
        if k not in SEARCH_DEFAULTS:
            raise SettingsError(_errors.unknown_key("search setting", k, SEARCH_DEFAULTS, ""))
        why = check_setting(k, v) if v is not None else ""
        if why:
            raise SettingsError(f"search setting '{k}' {why}")
    token = _SCOPE.set({**_SCOPE.get(), **{k: v for k, v in settings.items() if v is not None}})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def resolve_settings(config: Optional[str] = None, **explicit: Any) -> dict:
    """Merge defaults, $TASO_TVM_CONFIG, `config`, an enclosing `search_scope` and explicit (non-None) settings
    into one flat dict with keys alpha, budget, time_limit, region_size, method, cost, rules."""
    out: dict = dict(SEARCH_DEFAULTS, cost=None, rules=None)
    for path in (os.environ.get(CONFIG_ENV), config):
        if path:
            s = read_settings(path)
            out.update(s["search"])
            for k in ("cost", "rules"):
                if s[k] is not None:
                    out[k] = s[k]
    out.update(_SCOPE.get())
    cost = explicit.get("cost")
    if isinstance(cost, str) and isinstance(out["cost"], str) and _is_backend(cost) and not _is_backend(out["cost"]):
        # a backend named on top of a settings file: that file's other cost settings (cache, target...) still hold
        from ..cost.config import load_cost_config

        out["cost"] = load_cost_config(out["cost"], backend=cost)
        explicit = {k: v for k, v in explicit.items() if k != "cost"}
    out.update({k: v for k, v in explicit.items() if v is not None})
    return out


def _is_backend(name: str) -> bool:
    from ..cost.config import BACKENDS

    return name in BACKENDS
