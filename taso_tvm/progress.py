"""A tiny progress bar on a terminal (stderr), a log line otherwise (kernels measured, regions searched)."""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional, TextIO

log = logging.getLogger(__name__)


class Progress:
    """`with Progress(total, "measuring") as p: p.update(note=...)`."""

    def __init__(self, total: int, desc: str, enabled: bool = True, stream: Optional[TextIO] = None,
                 unit: str = "kernels") -> None:
        self.total, self.desc, self.done, self.unit = total, desc, 0, unit
        self.stream = stream if stream is not None else sys.stderr
        self.bar = enabled and total > 0 and bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def __enter__(self) -> "Progress":
        self._draw("")
        return self

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        self._draw(note)

    def _draw(self, note: str) -> None:
        if not self.bar:
            return
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        line = f"\r{self.desc} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} " \
               f"{time.perf_counter() - self.t0:5.1f}s {note[:40]}"
        self.stream.write(line.ljust(100)[:100])
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.t0
        if self.bar:
            self.stream.write("\n")
            self.stream.flush()
        if self.total:
            log.info("%s: %d/%d %s in %.1f s", self.desc, self.done, self.total, self.unit, elapsed)
