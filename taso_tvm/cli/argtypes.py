"""argparse `type=` functions shared by every command: numbers range-checked while the command line is parsed, so
a bad flag is a usage error (exit 2) before any work starts."""
from __future__ import annotations

import argparse
import math
from typing import Callable

MAX_DIGITS = 18  # an integer flag longer than this is a typo or an attack (and int() of 5000 digits is slow)
MAX_FLOAT_TEXT = 64
ALPHA_RANGE = (1.0, 3.0)  # search.config.check_setting's range for alpha


def _int(text: str) -> int:
    t = str(text).strip()
    if len(t.lstrip("+-")) > MAX_DIGITS:
        raise argparse.ArgumentTypeError(f"'{t[:20]}...' has more than {MAX_DIGITS} digits")
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not '{t}'") from None


def _float(text: str) -> float:
    t = str(text).strip()
    if len(t) > MAX_FLOAT_TEXT:
        raise argparse.ArgumentTypeError(f"'{t[:20]}...' is not a number")
    try:
        v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not '{t}'") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, not '{t}'")
    return v


def int_at_least(low: int) -> Callable[[str], int]:
    """A whole number >= `low` (at most MAX_DIGITS digits)."""
    def parse(text: str) -> int:
        v = _int(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, not {v}")
        return v

    parse.__name__ = f"int_at_least_{low}"
    return parse


positive_int = int_at_least(1)
positive_int.__doc__ = "A whole number >= 1."
nonneg_int = int_at_least(0)
nonneg_int.__doc__ = "A whole number >= 0."


def finite_float(text: str) -> float:
    """A finite number (no nan or inf)."""
    return _float(text)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    v = _float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text.strip()}")
    return v


def nonneg_float(text: str) -> float:
    """A finite number >= 0."""
    v = _float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text.strip()}")
    return v


def alpha(text: str) -> float:
    """The search's relaxation: a finite number in ALPHA_RANGE."""
    v = _float(text)
    lo, hi = ALPHA_RANGE
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"must be in [{lo:g}, {hi:g}], not {text.strip()}")
    return v


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (the flag, what is wrong, where help is) and exit status 2, instead
    of the whole usage text: a bad value is bad input like any other."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"taso-tvm: error: {message} (see '{self.prog} --help')\n")
