"""Small readers for Relax call attributes, used by the operators' lift functions."""
from __future__ import annotations

from typing import Any, Optional

from ..types import Dim, TensorType


def ints(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    return tuple(int(x) for x in v)


def tensor_type(ty: Any) -> Optional[TensorType]:
    """TensorType of a Relax tensor type, or None if it is not a tensor of known rank."""
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values") and not hasattr(shape, "__len__"):
        return None
    try:
        dims: list[Dim] = []
        for d in shape:
            dims.append(int(d) if hasattr(d, "value") or isinstance(d, int) else str(d))
    except TypeError:
        return None
    dtype = str(getattr(ty, "dtype", ""))
    if not dtype or dtype == "void":
        return None
    return TensorType(tuple(dims), dtype)
