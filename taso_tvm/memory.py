"""Giving memory back to the system (Linux, glibc): big models' weights pass through several native libraries
(TVM, ONNX Runtime, NumPy) whose large blocks glibc would otherwise keep in its heap after they are freed, so that
the process's resident memory never went down between phases."""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any, Optional

MMAP_THRESHOLD = 4 << 20  # blocks from this size on get their own mapping, returned to the system when freed
_M_MMAP_THRESHOLD = -3
_LIBC: Any = None
_LIMITED = False


def _libc() -> Optional[Any]:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _LIBC = False
    return _LIBC or None


def limit_heap() -> None:
    """Large blocks (weights, prepacked weights, Relax constants) get their own memory mapping from now on, so
    that freeing them gives the memory back at once (glibc raises its threshold to 32 MB as blocks are freed;
    this fixes it). Once per process; nothing where glibc is not the allocator."""
    global _LIMITED
    lib = _libc()
    if lib is not None and not _LIMITED:
        _LIMITED = True
        lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim() -> None:
    """Collect Python's cycles and give the heap's free pages back to the system."""
    gc.collect()
    lib = _libc()
    if lib is not None:
        lib.malloc_trim(0)


__all__ = ["limit_heap", "trim"]
