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


def _identity(path: str) -> tuple:
    """What a path names: its (device, inode) when it exists (so hard links and symlinks to one file agree), else
    its absolute path with every symlink in it resolved."""
    real = os.path.realpath(os.fspath(path))
    try:
        st = os.stat(real)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.normcase(real))


def path_collision(reads: "list[tuple[str, str]]", writes: "list[tuple[str, str]]") -> str:
    """Why the (label, path) pairs a command writes cannot be written: one names a file it reads, or two name one
    file (after symlinks, hard links and `..` are resolved); '' when every path is distinct. Call it before any
    work, so that nothing is written when it says no."""
    seen: dict = {}
    for label, path in reads:
        if path:
            seen.setdefault(_identity(path), ("reads", label, path))
    for label, path in writes:
        if not path:
            continue
        key = _identity(path)
        if key in seen:
            kind, other, other_path = seen[key]
            role = "which this command reads" if kind == "reads" else "which this command also writes"
            return (f"{label} '{path}' is the same file as {other} '{other_path}', {role}: refusing to run "
                    f"(nothing written)")
        seen[key] = ("writes", label, path)
    return ""
