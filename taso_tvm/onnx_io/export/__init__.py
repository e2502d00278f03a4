"""Relax -> ONNX export.

``export_relax(mod_or_func, opset=None, input_names=None, output_names=None, name_prefix="",
origins=None)`` returns an ``onnx.ModelProto`` for a Relax ``IRModule`` (its ``main``) or
``relax.Function``.  It maps every Relax operator that ``tvm.relax.frontend.onnx.from_onnx``
emits back to ONNX (see ``CONVERTERS``; ``call_tir`` PrimFuncs in ``converters_tir``), writes
constants as initializers, keeps input/output names, element types and symbolic dimensions.

* Opset: by default the lowest opset (>= 13) that expresses the graph; ``opset=N`` writes a
  model valid at exactly N (axes/split attributes vs inputs, Resize-11's required inputs,
  attributes that appeared later, ...) or raises :class:`ExportError` naming the operator
  that has no form at N (the repository's ``tests/onnx_opset_sweep.py`` checks the ONNX node
  suite at any list of opsets).
* Outputs: a tensor returned twice, a returned graph input and a returned constant each get
  an ``Identity`` so every graph output is produced by a node under its own name.
* Splicing: ``name_prefix`` prefixes every node, intermediate tensor and initializer name
  (not graph inputs/outputs).
* Errors: one line, ``cannot export <relax op> in binding '<var>' [(from ONNX node '<n>')]:
  <reason>``; ``origins`` maps binding names to ONNX node names when the caller knows them.
"""
from .context import ExportError
from .exporter import export_relax
from .registry import CONVERTERS
from .opset import DEFAULT_MIN_OPSET
from .converters_fused import below_opset, fused_opset

__all__ = ["export_relax", "ExportError", "CONVERTERS", "DEFAULT_MIN_OPSET", "below_opset", "fused_opset"]
