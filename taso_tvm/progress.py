"""A tiny progress bar on a terminal (stderr), a log line otherwise (kernels measured, regions searched)."""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Iterator, Optional, TextIO

log = logging.getLogger(__name__)

PHASE_NOTE_S = 3.0  # a phase that runs longer than this says so on a terminal


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


def _status_mb(key: str) -> float:
    """A memory line of /proc/self/status (`VmHWM`, `VmRSS`) in MB, 0.0 where it cannot be read (not Linux)."""
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key + ":")), 0) / 1024
    except (OSError, ValueError):
        return 0.0


def peak_rss_mb(reset: bool = False) -> float:
    """The process's peak resident memory in MB since the last reset (Linux: VmHWM; `reset` starts a new peak),
    0.0 where it cannot be read."""
    hwm = _status_mb("VmHWM")
    if reset:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
    return hwm


def rss_mb() -> float:
    """The process's resident memory now in MB (Linux: VmRSS), 0.0 where it cannot be read."""
    return _status_mb("VmRSS")


@contextlib.contextmanager
def phase(name: str, stream: Optional[TextIO] = None, into: Optional[dict] = None,
          label: Optional[str] = None) -> Iterator[None]:
    """One phase of a long command: a line on a terminal while it runs (when it takes over PHASE_NOTE_S), and a
    log line with its time and peak memory (`peak_rss_mb`) when it ends. `into`: its seconds are added to
    `into[label or name]` (a command's account of where the time went)."""
    stream = stream if stream is not None else sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    peak_rss_mb(reset=True)
    t0 = time.perf_counter()
    timer = None
    if tty:
        import threading

        def note() -> None:
            stream.write(f"\r{name}...".ljust(60)[:100])
            stream.flush()

        timer = threading.Timer(PHASE_NOTE_S, note)
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        from .memory import trim

        trim()  # what the phase freed goes back to the system before the next one starts
        if timer is not None:
            timer.cancel()
            if time.perf_counter() - t0 >= PHASE_NOTE_S:
                stream.write(f"\r{name}: {time.perf_counter() - t0:.1f} s".ljust(60)[:100] + "\n")
                stream.flush()
        elapsed = time.perf_counter() - t0
        if into is not None:
            key = label or name
            into[key] = into.get(key, 0.0) + elapsed
        log.info("phase %s: %.2f s, peak RSS %.0f MB, %.0f MB at its end", name, elapsed, peak_rss_mb(), rss_mb())
