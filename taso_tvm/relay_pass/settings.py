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
from typing import Any, Iterator, Mapping, Optional

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


SEARCH_KEYS = tuple(SEARCH_DEFAULTS)  # the search settings users set: alpha, budget, time_limit, region_size, method


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting of one call (the search's, the cost model, the rules, the target), resolved once and passed
    down: the pass, the ONNX optimizer and the faces read this object instead of the files again.

    `cost` is what the user named (a backend name, a cost settings file, a merged `CostConfig`, a cost model or a
    callable); `rules` a RuleSet, rule file path(s) or None (the shipped library); `target` a tvm Target, a target
    dict or name, or None. `resolve_cost` / `resolve_rules` turn them into the objects the search uses."""

    alpha: float = SEARCH_DEFAULTS["alpha"]
    budget: int = SEARCH_DEFAULTS["budget"]
    time_limit: Optional[float] = SEARCH_DEFAULTS["time_limit"]
    region_size: int = SEARCH_DEFAULTS["region_size"]
    method: str = SEARCH_DEFAULTS["method"]
    cost: Any = None
    rules: Any = None
    target: Any = None

    @classmethod
    def resolve(cls, config: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                overrides: Optional[Mapping[str, Any]] = None) -> "Settings":
        """Merge the defaults, the file named by `env`'s $TASO_TVM_CONFIG (`env` defaults to os.environ), the
        `config` file, an enclosing `search_scope` and the non-None `overrides`; validated (SettingsError)."""
        explicit = dict(overrides or {})
        unknown = [k for k in explicit if k not in SETTING_KEYS]
        if unknown:
            raise SettingsError(_errors.unknown_key("setting", unknown[0], SETTING_KEYS, ""))
        out = _merged(config, os.environ if env is None else env, explicit)
        settings = cls(**out)
        try:
            settings.search_config()
        except ValueError as e:
            raise SettingsError(str(e)) from None
        return settings

    def replace(self, **changes: Any) -> "Settings":
        """A copy with the non-None `changes` applied."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def search_config(self, **extra: Any) -> SearchConfig:
        """The search's `SearchConfig` (validated; ValueError names a setting out of range)."""
        return SearchConfig(**{k: getattr(self, k) for k in SEARCH_KEYS}, **extra).validate()

    def as_dict(self) -> dict:
        """{setting: value} (the keys of `resolve_settings`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def resolve_rules(self) -> Any:
        """The RuleSet to search with (`resolve_rules`)."""
        return resolve_rules(self.rules)

    def resolve_cost(self, target: Any = None, runtime: str = "tvm") -> tuple[Any, bool]:
        """(cost model, owned) measuring on `target` (default: this object's) for `runtime` (`resolve_cost`)."""
        return resolve_cost(self.cost, target if target is not None else self.target, runtime)


SETTING_KEYS = tuple(f.name for f in dataclasses.fields(Settings))


def resolve_settings(config: Optional[str] = None, **explicit: Any) -> dict:
    """`Settings.resolve(config, os.environ, explicit)` as a flat dict with keys alpha, budget, time_limit,
    region_size, method, cost, rules, target (not validated: a caller may still adjust it)."""
    return _merged(config, os.environ, explicit)


def _merged(config: Optional[str], env: Mapping[str, str], explicit: Mapping[str, Any]) -> dict:
    """Defaults < $TASO_TVM_CONFIG's file (read from `env`) < `config` < an enclosing `search_scope` < the
    non-None `explicit` settings."""
    out: dict = dict(SEARCH_DEFAULTS, cost=None, rules=None, target=None)
    for path in (env.get(CONFIG_ENV), config):
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


def resolve_rules(rules: Any) -> Any:
    """A RuleSet from a RuleSet (returned as is), rule file path(s), or None (the shipped library)."""
    from ..rules import load_rules

    if rules is None:
        return load_rules()
    if isinstance(rules, (str, list, tuple)) and not hasattr(rules, "matches"):
        return load_rules(rules)
    return rules


def target_kind(target: Any) -> Optional[str]:
    """'cuda' or 'llvm' for a tvm Target, a target dict or name; None for None."""
    if target is None:
        return None
    if isinstance(target, str):
        kind = target
    elif isinstance(target, dict):
        kind = target.get("kind")
    else:
        kind = target.kind.name
    return "cuda" if kind == "cuda" else "llvm"


def resolve_cost(cost: Any, target: Any = None, runtime: str = "tvm") -> tuple[Any, bool]:
    """(cost, owned): a cost model or callable for the search, and whether we made it (and must close it).

    `cost` is a cost model (with `graph_cost`), a callable graph -> float, a backend name (`cost.config.BACKENDS`),
    a cost config file, a `CostConfig`, or None (the default config, measuring on `target`). `auto` measures on
    `runtime`: "onnx" (ONNX Runtime kernels) or "tvm" (TVM kernels on the target)."""
    if hasattr(cost, "graph_cost") or callable(cost):
        return cost, False
    from ..cost import CostModel, load_cost_config
    from ..cost.config import BACKENDS, CostConfig, resolve_backend

    spec = target_kind(target)
    if isinstance(cost, CostConfig):  # settings already merged (a file plus a backend named on top of it)
        cfg = dataclasses.replace(cost, target=spec) if spec is not None else cost
        return CostModel(resolve_backend(cfg, runtime)), True
    overrides = {"target": spec} if spec is not None else {}
    if cost is None:
        cfg = load_cost_config(**overrides)
    elif isinstance(cost, str) and cost in BACKENDS:
        cfg = load_cost_config(backend=cost, **overrides)
    else:
        cfg = load_cost_config(cost, **overrides)
    return CostModel(resolve_backend(cfg, runtime)), True


def _is_backend(name: str) -> bool:
    from ..cost.config import BACKENDS

    return name in BACKENDS
