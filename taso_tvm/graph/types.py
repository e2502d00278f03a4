"""Tensor types and attribute normalisation shared by the operator registry and TensorGraph."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from .. import errors as _errors

Dim = Union[int, str]  # a static size, or the name of a symbolic dimension


class GraphError(_errors.ModelError, ValueError):
    """An operator was given inputs or attributes it cannot accept (shape mismatch, bad attribute)."""


@dataclass(frozen=True)
class TensorType:
    """Shape and element type of one tensor. Symbolic dimensions are strings."""

    shape: tuple[Dim, ...]
    dtype: str = "float32"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            if not isinstance(d, int):
                raise GraphError(f"size of a tensor with symbolic shape {self.shape}")
            n *= d
        return n

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def freeze(value: Any) -> Any:
    """Turn an attribute value into a hashable, canonical form (lists → tuples, numpy scalars → Python)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        value = value.item()
    return value


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise GraphError(f"{what} {axis} out of range for rank {ndim}")
    return axis % ndim
