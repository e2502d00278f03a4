"""Keep TVM's and ONNX's chatter (Python prints, C++ log lines on fd 1/2, warnings) away from the user."""
from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from typing import Iterator


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Silence stdout/stderr at the Python and the file-descriptor level (C++ logs) inside the block."""
    if not enabled:
        yield
        return
    saved = None
    try:
        fds = (sys.stdout.fileno(), sys.stderr.fileno())
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(fd) for fd in fds]
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in fds:
            os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no real fds (captured streams)
        saved = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, s in zip((sys.stdout.fileno(), sys.stderr.fileno()), saved):
                os.dup2(s, fd)
                os.close(s)


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while worker processes are started: they inherit the blocked signal (through
    fork and exec), so a Ctrl-C reaches only this process, which stops them; here it is delivered on exit."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def native_stderr_off(enabled: bool = True) -> Iterator[None]:
    """Send what C++ libraries (TVM's LOG lines, ONNX Runtime) write on fd 2 to /dev/null inside the block, while
    Python's `sys.stderr` (our messages and log lines) keeps reaching the terminal through a duplicate of it.
    Worker processes started inside inherit the silenced fd 2."""
    if not enabled:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        real = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # captured (pytest): keep it
        real = False
    old = sys.stderr
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    if real:
        sys.stderr = open(saved, "w", buffering=1, encoding=old.encoding, errors="backslashreplace", closefd=False)
    try:
        yield
    finally:
        if real:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            sys.stderr = old
        os.dup2(saved, 2)
        os.close(saved)
