"""Settings files for the pass and the CLI: YAML with a `search:` section, a `cost:` section (the cost model's
settings, see configs/cpu.yaml) and an optional `rules:` list of rule files.

Precedence: defaults < the file named by $TASO_TVM_CONFIG < a `config=` file < explicit keyword arguments. The
environment variable is how `tvm.compile(mod, target, relax_pipeline="taso")`, which takes no arguments, is
configured.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import yaml
from .. import errors as _errors

CONFIG_ENV = "TASO_TVM_CONFIG"
SEARCH_DEFAULTS = {"alpha": 1.05, "budget": 10, "time_limit": None, "region_size": 32}


class SettingsError(_errors.SettingsError, ValueError):
    """An unreadable or malformed settings file; one line naming the file and the problem."""


def read_settings(path: str) -> dict:
    """{"search": {...}, "cost": path or None, "rules": [...] or None} from one YAML file."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise SettingsError(f"cannot read config '{path}': {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SettingsError(f"config '{path}'{where} is not valid YAML") from None
    if not isinstance(data, dict):
        raise SettingsError(f"config '{path}' must be a mapping of settings")
    search = data.get("search") or {}
    if not isinstance(search, dict):
        raise SettingsError(f"config '{path}': 'search' must be a mapping")
    unknown = set(search) - set(SEARCH_DEFAULTS)
    if unknown:
        raise SettingsError(f"config '{path}': unknown search setting(s) {sorted(unknown)}")
    rules = data.get("rules")
    if rules is not None:
        if isinstance(rules, str):
            rules = [rules]
        base = os.path.dirname(os.path.abspath(path))
        rules = [r if os.path.isabs(r) else os.path.join(base, r) for r in rules]
    has_cost = any(k not in ("search", "rules") for k in data)
    return {"search": dict(search), "cost": path if has_cost else None, "rules": rules}


def resolve_settings(config: Optional[str] = None, **explicit: Any) -> dict:
    """Merge defaults, $TASO_TVM_CONFIG, `config` and explicit (non-None) settings into one flat dict with keys
    alpha, budget, time_limit, region_size, cost, rules."""
    out: dict = dict(SEARCH_DEFAULTS, cost=None, rules=None)
    for path in (os.environ.get(CONFIG_ENV), config):
        if path:
            s = read_settings(path)
            out.update(s["search"])
            for k in ("cost", "rules"):
                if s[k] is not None:
                    out[k] = s[k]
    out.update({k: v for k, v in explicit.items() if v is not None})
    return out
