"""The ONNX path: work on what TVM can import, pass the rest through node for node.

    model, report = optimize_onnx(onnx.load("in.onnx"), settings={"budget": 10})
"""
from .driver import OnnxReport, optimize_onnx
from .prepare import PrepareError

__all__ = ["OnnxReport", "optimize_onnx", "PrepareError"]
