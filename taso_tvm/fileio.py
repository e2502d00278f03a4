"""Safe writes: every file goes to a temporary file beside its target and is renamed into place, so a crash or an
interrupt never leaves half a file, and writing over the input is safe."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

_PENDING: set = set()  # temporary files being written now (removed by `remove_pending` on a hard exit)


def remove_pending() -> None:
    """Delete the temporary files of writes still in progress (before an immediate exit)."""
    for tmp in list(_PENDING):
        try:
            os.unlink(tmp)
        except OSError:
            pass


def new_file_mode(path: str) -> int:
    """The permission bits a written file gets: those of the file it replaces, else what a plain `open(path, "w")`
    gives (0666 less the umask). mkstemp's 0600 would otherwise survive the rename: a model written for a server
    running as another user could not be read by it."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)  # the only way to read the umask; set back at once
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write(path: str, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Call `write(f)` on a temporary file in `path`'s directory, then rename it to `path` (with the mode of the
    file it replaces, or the umask's)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".part", dir=folder)
    _PENDING.add(tmp)
    try:
        os.fchmod(fd, new_file_mode(path))
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        _PENDING.discard(tmp)


def atomic_write_bytes(path: str, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str, text: str) -> None:
    atomic_write(path, lambda f: f.write(text), mode="w")


def writable_target(path: str) -> str:
    """Why `path` cannot be written (its folder is missing, not a folder, not writable, or it is a folder), or ''."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return f"'{path}' is a directory"
    if not os.path.exists(folder):
        return f"cannot write '{path}': directory '{folder}' does not exist"
    if not os.path.isdir(folder):
        return f"cannot write '{path}': '{folder}' is not a directory"
    if not os.access(folder, os.W_OK):
        return f"cannot write '{path}': directory '{folder}' is not writable"
    return ""
