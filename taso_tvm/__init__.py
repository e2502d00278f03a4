"""taso-tvm: TASO, the Tensor Algebra SuperOptimizer, as a pass package for Apache TVM Relax.

    import taso_tvm as taso
    g = taso.new_graph()
    x = g.new_input(dims=(1, 64, 56, 56))
    ...
    mod = g.to_relax()                       # a Relax IRModule
    mod = taso.load_onnx("model.onnx")       # ONNX -> Relax
"""
from .api import Graph, Tensor, export_onnx, new_graph, optimize
from .graph import GraphError, TensorGraph, TensorType
from .onnx_io import ModelLoadError, load_onnx
from .relay_pass import TasoOptimize  # also registers the "taso" Relax pipeline

__version__ = "0.1.0"

__all__ = ["Graph", "Tensor", "new_graph", "optimize", "export_onnx", "GraphError", "TensorGraph", "TensorType", "ModelLoadError", "load_onnx", "TasoOptimize"]
