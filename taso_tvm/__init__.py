"""taso-tvm: TASO, the Tensor Algebra SuperOptimizer, as a pass package for Apache TVM Relax.

    import taso_tvm as taso
    g = taso.new_graph()
    x = g.new_input(dims=(1, 64, 56, 56))
    ...
    mod = g.to_relax()                       # a Relax IRModule
    mod = taso.load_onnx("model.onnx")       # ONNX -> Relax

    model = taso.load("model.onnx")          # tvmc's Python API: load, compile, tune, run
    package = taso.compile(model, "llvm")
    result = taso.run(package, {"input": x})
"""
from .api import Graph, Tensor, export_onnx, new_graph, optimize
from .graph import GraphError, TensorGraph, TensorType
from .onnx_io import ModelLoadError, load_onnx
from .relay_pass import Settings, TasoOptimize  # also registers the "taso" Relax pipeline
from .search import StopReason
from .tvmc import CompileReport, Model, Package, Result, compile, load, run, tune

__version__ = "0.1.0"

__all__ = ["Graph", "Tensor", "new_graph", "optimize", "export_onnx", "GraphError", "TensorGraph", "TensorType",
           "ModelLoadError", "load_onnx", "TasoOptimize", "Settings", "StopReason", "load", "compile", "tune", "run",
           "Model", "Package", "CompileReport", "Result"]
