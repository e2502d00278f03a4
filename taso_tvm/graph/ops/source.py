"""Operators without computation: graph inputs, weights/constants, and opaque Relax calls."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import OpDef, register
from ..types import TensorType


def _no_infer(in_types: Sequence[TensorType], attrs: dict) -> list[TensorType]:
    raise TypeError("source nodes carry their type")


def _no_numpy(inputs: Sequence[np.ndarray], attrs: dict) -> list[np.ndarray]:
    raise TypeError("source nodes carry their value")


# A graph input; attrs: name (unique within the graph).
INPUT = register(OpDef("input", 0, _no_infer, _no_numpy, attrs={"name": None}, doc="graph input"))
# A weight or constant; attrs: key (unique id within the node store). The array lives on the node.
WEIGHT = register(OpDef("weight", 0, _no_infer, _no_numpy, attrs={"key": None}, doc="weight / constant tensor"))
# A Relax binding the registry does not model; attrs: key (unique). The node keeps the original expression.
OPAQUE_OP = register(OpDef("opaque", None, _no_infer, _no_numpy, attrs={"key": None}, doc="Relax expression kept as it is"))
