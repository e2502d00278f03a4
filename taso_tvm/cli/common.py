"""What the model commands (`model.py`: optimize, convert; `compile.py`: compile, run) share: `CLIError`, the search
settings and the target from the arguments, reading and writing ONNX models, the tolerances."""
from __future__ import annotations

import argparse
from typing import Any, Optional

from ..runtime.check import CheckError, check_tolerances
from .. import errors as _errors


class CLIError(_errors.SettingsError):
    """A user error: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------- settings
def search_settings(args: argparse.Namespace) -> Any:
    """The call's `Settings` from --config and the search flags (flags win), resolved once."""
    from ..relay_pass.settings import Settings, SettingsError

    rules = None
    if getattr(args, "rules", None):  # added to the library (a settings file's `rules:` list may replace it)
        from ..relay_pass.settings import load_named_rules, rule_paths
        from ..rules.ruleset import LIBRARY_ENTRY

        rules = load_named_rules(rule_paths([LIBRARY_ENTRY] + list(args.rules)))
    target = parse_target(args.target) if getattr(args, "target", None) else None
    try:
        return Settings.resolve(getattr(args, "config", None), overrides=dict(
            alpha=getattr(args, "alpha", None), budget=getattr(args, "budget", None),
            time_limit=getattr(args, "time_limit", None), cost=getattr(args, "cost_backend", None), rules=rules,
            method=getattr(args, "search", None), target=target))
    except (SettingsError, ValueError) as e:
        raise CLIError(str(e)) from None


def parse_target(text: Any) -> Any:
    """The library's `make_target`, its errors as CLIError (one line, exit 2)."""
    from ..errors import SettingsError
    from ..tvmc.target import make_target

    try:
        return make_target(text)
    except SettingsError as e:
        raise CLIError(str(e)) from None


def _writable(*paths: Optional[str]) -> None:
    from ..fileio import writable_target

    for path in paths:
        if path:
            why = writable_target(path)
            if why:
                raise CLIError(why)


def check_paths(reads: list, writes: list) -> None:
    """Refuse (one line, exit 2, before any work) when a path the command writes names a file it reads or another
    path it writes: `reads` and `writes` are (label, path) pairs; empty paths are skipped."""
    from ..fileio import path_collision

    why = path_collision([(label, p) for label, p in reads if p], [(label, p) for label, p in writes if p])
    if why:
        raise CLIError(why)


def setting_reads(args: argparse.Namespace) -> list:
    """(label, path) of the settings files a model command reads: --config, each --rules, --inputs."""
    reads = [("--config", getattr(args, "config", None))]
    reads += [("--rules", r) for r in (getattr(args, "rules", None) or [])]
    return reads + [("--inputs", getattr(args, "inputs", None))]


def save_model(model: Any, path: str, external_data: str = "auto", source: Any = None) -> None:
    """Write an ONNX model atomically (temporary files renamed into place), its weights in one data file beside
    it (PATH.data) as `external_data` says (auto: when `source`, the model read, had external data, or the
    model is over 1.8 GB)."""
    from ..onnx_io.weights import has_data_files, save
    from ..progress import Progress, phase

    with phase("writing"), Progress(len(model.graph.initializer), "writing weights", unit="tensors") as p:
        save(model, path, external_data, source is not None and has_data_files(source), progress=p)


def read_model(path: str, keep_invalid: bool = False) -> tuple[Any, str]:
    """(the model, '') or, with `keep_invalid`, (the model, why ONNX's checker refuses it); a model the checker
    refuses is bad input otherwise (exit 2, one line)."""
    from ..onnx_io import ModelLoadError, read_onnx
    from ..onnx_io.sanity import checker_problem
    from ..progress import phase

    with phase("reading"):
        proto, label = read_onnx(path)
    with phase("onnx.checker"):
        why = checker_problem(proto)
    if why and not keep_invalid:
        raise ModelLoadError(f"{label} is not a valid ONNX model (onnx.checker): {why}")
    return proto, why


def _tolerances(args: argparse.Namespace) -> None:
    try:
        check_tolerances(args.rtol, args.atol)
    except CheckError as e:
        raise CLIError(str(e)) from None
