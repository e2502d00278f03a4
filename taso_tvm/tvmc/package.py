"""`Package`: a built module, its signature (inputs, outputs, target) and the compile report; `export` writes the
library and its signature file together (tvmc's TVMCPackage)."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..runtime.library import Signature, load_library, signature_path, write_library

log = logging.getLogger(__name__)


@dataclass
class CompileReport:
    """What `compile` did. `search`: the pass's report (None without optimize); `timing`: the never-slower
    comparison of the original and the optimized build (llvm); `decision`: which build was kept, when the
    timing chose; `tuning`: MetaSchedule's report (with `tune`); `tuning_timing`: tuned against untuned;
    `tuning_decision`: which of them was kept; `threads`: the TVM runtime threads the checks, timings and
    tuning used; `schedule`: the CPU schedules were used (llvm); `seconds`: the whole call."""

    search: Any = None
    timing: Any = None
    decision: str = ""
    tuning: Any = None
    tuning_timing: Any = None
    tuning_decision: str = ""
    threads: int = 0
    schedule: bool = True
    seconds: float = 0.0

    @property
    def rewritten(self) -> bool:
        """The search applied at least one rule."""
        tot = self.search.total if self.search is not None else None
        return tot is not None and bool(tot.rules_applied)


@dataclass
class Package:
    """A compiled model: `executable` (a `tvm.compile` result, or the runtime module loaded from a file),
    `signature` (its inputs by name, outputs, target), `target`, `report` (None when loaded from a file) and
    `path` (where it was exported or loaded from)."""

    executable: Any
    signature: Signature
    target: Any = None
    report: Optional[CompileReport] = None
    path: Optional[str] = field(default=None)

    def export(self, path: "str | os.PathLike[str]") -> str:
        """Write the library to `path` and its signature file beside it (`PATH.inputs.json`), together: the
        library is renamed into place first, then the signature, so a library never loads unchecked. Refuses a
        path that names the signature's or an existing non-file. Returns `path`.

        >>> package.export("model.so")     # doctest: +SKIP
        """
        from ..fileio import path_collision, writable_target

        path = os.fspath(path)
        why = path_collision([], [("the library", path), ("the signature file", signature_path(path))]) \
            or writable_target(path)
        if why:
            from ..errors import SettingsError

            raise SettingsError(why)
        write_library(self.executable, path, self.signature)
        self.path = path
        return path

    @classmethod
    def load(cls, path: "str | os.PathLike[str]") -> "Package":
        """A package from a library `export` wrote, loaded only if its signature file vouches for it (size,
        sha256, ELF header)."""
        path = os.fspath(path)
        lib, sig = load_library(path)
        return cls(lib, sig, sig.target, None, path)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.signature.inputs]

    @property
    def output_names(self) -> list[str]:
        """The model's output names (from the signature; `output_i` where it names none)."""
        names = self.signature.extra.get("outputs")
        if isinstance(names, list) and len(set(names)) == len(names) and all(isinstance(n, str) and n for n in names):
            return list(names)
        return []


def library_signature(model: Any, target: Any, feeds: Optional[dict] = None) -> Signature:
    """The signature written beside a library: the model's inputs (dims as built: bound shapes where given,
    else the model's, symbolic ones by name), an example shape of each, and for integer inputs the range that the
    compile checks drew from (token ids within their table)."""
    feeds = model.random_inputs() if feeds is None else feeds
    example = {k: list(v.shape) for k, v in feeds.items()}
    high = {k: int(v.max()) + 1 if v.size else 1 for k, v in feeds.items() if np.issubdtype(v.dtype, np.integer)}
    specs = [type(s)(s.name, s.dims, str(feeds[s.name].dtype)) if s.name in feeds else s for s in model.inputs]
    return Signature(specs, str(target), extra={"outputs": list(model.outputs), "example_shapes": example,
                                                "integer_high": high})
