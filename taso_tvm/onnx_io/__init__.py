"""ONNX in and out: `load_onnx` (ONNX → Relax) and `export_onnx` (Relax → ONNX)."""
from .load import ModelLoadError, load_onnx, parse_shapes, read_onnx

__all__ = ["ModelLoadError", "load_onnx", "parse_shapes", "read_onnx"]
