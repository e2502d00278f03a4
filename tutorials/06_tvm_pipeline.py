"""Tutorial 6: the TASO pass inside TVM's pipeline, built for llvm (run here) and for cuda (built here, run where
a GPU is).

    python tutorials/06_tvm_pipeline.py
"""
import os
import tempfile

import numpy as np
import onnxruntime as ort
import tvm
from tvm import relax

import taso_tvm as taso
from taso_tvm import zoo
from taso_tvm.relay_pass import TasoOptimize

model = zoo.get_model("squeezenet")  # any ONNX model: taso.load_onnx("model.onnx", shapes={...})
feeds = zoo.random_inputs(model)
ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]

# Settings for relax_pipeline="taso", which takes no arguments, come from $TASO_TVM_CONFIG.
cfg = os.path.join(tempfile.mkdtemp(), "taso.yaml")
with open(cfg, "w") as f:
    f.write("search: {budget: 16}\ncost: {backend: analytic}\n")
os.environ["TASO_TVM_CONFIG"] = cfg

# 1. llvm: the "taso" pipeline = TasoOptimize, then the target's own pipeline.
mod = taso.load_onnx(model)
ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}), relax_pipeline="taso")
vm = relax.VirtualMachine(ex, tvm.cpu())
got = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
print("llvm: max difference vs ONNX Runtime:", float(np.abs(got - ref).max()))
assert np.allclose(got, ref, rtol=1e-3, atol=1e-4)

# 2. The pass is a tvm.transform module pass: put it in any Sequential, with its own settings.
seq = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                TasoOptimize(budget=16, cost="analytic", target="cuda")])
optimized = seq(taso.load_onnx(model))

# 3. cuda: build here (nvcc is enough; no GPU needed), ship the library, run it on the GPU machine with
#    `relax.VirtualMachine(tvm.runtime.load_module("squeezenet_cuda.so"), tvm.cuda())`.
#    enable_cuda_codegen() makes TVM compile the kernels now (cubins), so the GPU machine needs only its driver;
#    nvcc reads the architecture from the target in scope.
from taso_tvm.runtime.cuda_build import device_code_formats, enable_cuda_codegen

cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
lib_path = os.path.join(tempfile.mkdtemp(), "squeezenet_cuda.so")
try:
    enable_cuda_codegen()
    with cuda:
        ex_cuda = tvm.compile(optimized, cuda, relax_pipeline="default")
    ex_cuda.export_library(lib_path)
    print("cuda library:", lib_path, os.path.getsize(lib_path) // 1024, "KiB,", device_code_formats(lib_path))
except Exception as e:  # no CUDA toolkit on this machine
    print("cuda build skipped:", str(e).splitlines()[-1])
if tvm.cuda().exist:
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cuda())
    got = vm["main"](*[tvm.runtime.tensor(v, tvm.cuda()) for v in feeds.values()]).numpy()
    print("cuda: max difference vs ONNX Runtime:", float(np.abs(got - ref).max()))
