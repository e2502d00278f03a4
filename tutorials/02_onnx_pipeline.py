"""Tutorial 2: an ONNX model through the TVM pipeline with the TASO pass.

    python tutorials/02_onnx_pipeline.py
"""
import os
import tempfile

import numpy as np
import onnxruntime as ort
import tvm
from tvm import relax

import taso_tvm as taso
from taso_tvm import zoo

model = zoo.get_model("squeezenet")  # any ONNX model: taso.load_onnx("model.onnx", shapes={...})
feeds = zoo.random_inputs(model)

# Settings for relax_pipeline="taso", which takes no arguments, come from $TASO_TVM_CONFIG.
cfg = os.path.join(tempfile.mkdtemp(), "taso.yaml")
with open(cfg, "w") as f:
    f.write("search: {budget: 16}\ncost: {backend: analytic}\n")
os.environ["TASO_TVM_CONFIG"] = cfg

mod = taso.load_onnx(model)
ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}), relax_pipeline="taso")
vm = relax.VirtualMachine(ex, tvm.cpu())
got = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()

ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
print("max difference vs ONNX Runtime:", float(np.abs(got - ref).max()))
assert np.allclose(got, ref, rtol=1e-3, atol=1e-4)
