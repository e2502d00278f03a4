"""Giving memory back to the system (Linux, glibc): big models' weights pass through several native libraries
(TVM, ONNX Runtime, NumPy) whose large blocks glibc would otherwise keep in its heap after they are freed, so that
the process's resident memory never went down between phases."""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from typing import Any, Iterator, Optional

MMAP_THRESHOLD = 4 << 20  # blocks from this size on get their own mapping, returned to the system when freed
MMAP_THRESHOLD_AFTER = 32 << 20  # glibc's own threshold once it has adapted (its dynamic maximum on 64-bit)
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
_LIBC: Any = None
_ACTIVE = 0  # depth of `returning_memory` blocks


def _libc() -> Optional[Any]:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _LIBC = False
    return _LIBC or None


@contextlib.contextmanager
def returning_memory(on: bool = True) -> Iterator[None]:
    """Within the block (when `on`: a big model's weights pass through), large blocks get their own memory mapping,
    so that freeing them gives the memory back at once, and `trim` gives the heap's free pages back. Both cost
    time (a fresh mapping per large block, a full garbage collection per trim), so only big models pay it."""
    global _ACTIVE
    lib = _libc() if on else None
    if lib is None:
        yield
        return
    if _ACTIVE == 0:
        lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    _ACTIVE += 1
    try:
        yield
    finally:
        _ACTIVE -= 1
        if _ACTIVE == 0:  # glibc's thresholds no longer adapt once set: set them where they would have settled
            lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_AFTER)
            lib.mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_AFTER)


def trim() -> None:
    """Inside `returning_memory`: collect Python's cycles and give the heap's free pages back to the system."""
    if not _ACTIVE:
        return
    gc.collect()
    lib = _libc()
    if lib is not None:
        lib.malloc_trim(0)


__all__ = ["returning_memory", "trim"]
