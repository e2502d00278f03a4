"""Relax -> ONNX export.

``export_relax(mod_or_func, opset=None, input_names=None, output_names=None, name_prefix="")`` returns an
``onnx.ModelProto`` for a Relax ``IRModule`` (its ``main``) or ``relax.Function``.  It maps
every Relax operator that ``tvm.relax.frontend.onnx.from_onnx`` emits back to ONNX (see
``CONVERTERS``), writes constants as initializers, keeps input/output names, element types
and symbolic dimensions, and picks the lowest opset (>= 13) that expresses the graph.
Operators without an ONNX form raise :class:`ExportError` with a one-line message naming
the operator and the binding.
"""
from .context import ExportError
from .exporter import export_relax
from . import converters as _converters  # noqa: F401  (registers the converters)
from .exporter import CONVERTERS
from .opset import DEFAULT_MIN_OPSET

__all__ = ["export_relax", "ExportError", "CONVERTERS", "DEFAULT_MIN_OPSET"]
