"""The converter table: Relax operator name -> ``convert(ctx, call, attrs, args) -> ONNX value``.

The ``converters_*`` modules fill it with :func:`register`; the driver (``exporter``) reads it.
This module imports neither, so the two never import each other.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

# a converter returns the ONNX value of the call: a tensor name, or a (nested) list of them for tuples
Converter = Callable[..., Any]

CONVERTERS: Dict[str, Converter] = {}


def register(*names: str) -> Callable[[Converter], Converter]:
    """Decorator: register the function as the converter of each Relax operator in ``names``."""
    def deco(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return deco
