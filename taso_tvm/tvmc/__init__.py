"""tvmc's Python API for Relax: load, compile, tune and run as library calls (the `taso-tvm compile` and `run`
commands are a thin face over these).

    import taso_tvm
    model = taso_tvm.load("model.onnx", shapes={"input": [1, 3, 224, 224]})   # tvmc.load
    package = taso_tvm.compile(model, "llvm")                                 # tvmc.compile -> TVMCPackage
    package.export("model.so")                                                # the .so and its signature file
    result = taso_tvm.run("model.so", {"input": x}, repeat=10)               # tvmc.run -> TVMCResult
    result.outputs["output"], result.timing.median

The package is a face: it imports the passes, the ONNX path and the runtime helpers; nothing below imports it.
"""
from .build import build, build_pipeline, check_tune, compile, resolve_settings, search, tune
from .execute import Result, Timing, run, signature_feeds, vm_outputs
from .model import Model, import_for_tvm, load
from .package import CompileReport, Package, library_signature
from .target import TargetError, make_target

__all__ = ["load", "compile", "tune", "run", "Model", "Package", "CompileReport", "Result", "Timing",
           "make_target", "TargetError", "build", "build_pipeline", "check_tune", "search", "resolve_settings",
           "library_signature", "signature_feeds", "vm_outputs", "import_for_tvm"]
