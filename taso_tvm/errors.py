"""The project's exception family: every error a user can cause is a `TasoError` with a one-line message, and its
class says which exit status the command line gives it (see `exit_code`).

    TasoError                     exit 2 unless a subclass says otherwise
    +-- InputError                bad input or settings (exit 2)
    |   +-- ModelError            onnx_io.ModelLoadError, onnx_opt.PrepareError, graph.GraphError (CycleError,
    |   |                         TypeMismatch)
    |   +-- RuleFileError         rules.RuleError, rules.YamlError, rules.ExprError; a refuted or unproven rule
    |   |                         in a file the user named
    |   +-- SettingsError         relay_pass.settings.SettingsError, cost.config.CostConfigError, cli.common.CLIError
    |   +-- CostError             cost.cache.CostCacheError (a cache path that is not ours)
    +-- ExportError               onnx_io.export.ExportError (exit 2)
    +-- CheckRefused              check.CheckFailed, check.CheckError: the check refused the result (exit 1)
    +-- Interrupted               Ctrl-C (exit 130); also a KeyboardInterrupt, or an error TVM made of one

    Exit statuses: 0 done, 1 the check refused the result, 2 bad input or settings, 130 interrupted, 3 anything
    else (a bug: one line on the screen, the traceback in a crash file).

Modules keep their own names for their errors (ModelLoadError, RuleError, ...) and derive them from these
classes, also keeping the builtin base they had (ValueError, RuntimeError), so existing `except` clauses still
work. This module imports nothing from the project: anything may import it.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK = 1
EXIT_INPUT = 2
EXIT_BUG = 3
EXIT_INTERRUPTED = 130


class TasoError(Exception):
    """An error the user can act on; `str()` is one line naming the file, node, rule or setting at fault."""

    exit_code = EXIT_INPUT


class InputError(TasoError):
    """Bad input or settings."""


class ModelError(InputError):
    """The model cannot be read, is malformed, or uses what we cannot handle."""


class RuleFileError(InputError):
    """A rule file that cannot be read or parsed, uses an unknown operator, or holds a rule the verifier refutes."""


class SettingsError(InputError):
    """A setting (config file, flag, output path) that is wrong."""


class CostError(InputError):
    """The cost model cannot run as configured."""


class ExportError(TasoError):
    """A module that cannot be written as ONNX."""


class CheckRefused(TasoError):
    """The optimized model does not compute what the original computes (or cannot be checked)."""

    exit_code = EXIT_CHECK


class Interrupted(TasoError):
    """The user pressed Ctrl-C (or TVM reported a KeyboardInterrupt raised inside one of our callbacks)."""

    exit_code = EXIT_INTERRUPTED


def exit_code(err: BaseException) -> int:
    """The command line's exit status for an exception: 130 for an interrupt (also when TVM wrapped it in a
    RuntimeError), the family's code for a TasoError, EXIT_BUG for anything else."""
    if is_interrupt(err):
        return EXIT_INTERRUPTED
    if isinstance(err, TasoError):
        return err.exit_code
    return EXIT_BUG


def is_interrupt(err: BaseException) -> bool:
    """KeyboardInterrupt, or an exception TVM made of one (its FFI turns a KeyboardInterrupt raised in a Python
    callback into an error whose text names it)."""
    if isinstance(err, (KeyboardInterrupt, Interrupted)):
        return True
    seen = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        if not isinstance(e, TasoError) and "KeyboardInterrupt" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def one_line(err: BaseException) -> str:
    """The first non-empty line of an exception's text (its class name if it has none)."""
    for line in str(err).splitlines():
        if line.strip():
            return line.strip()
    return type(err).__name__


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` to a misspelled `word`, or ''."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_key(what: str, key: str, choices, where: str = "") -> str:
    """One line for an unknown setting: its name, a near miss if there is one, and the settings there are."""
    return (f"unknown {what} '{key}'{where}{did_you_mean(key, choices)}; known: "
            f"{', '.join(sorted(str(c) for c in choices))}")
