"""Tutorial 8: compile and run a model from Python only, as with tvmc's Python API (tvmc left TVM with Relay).

load -> compile -> export -> run, each a library call: no `taso-tvm` command, no shelling out.

    python tutorials/08_python_compile.py
"""
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

import taso_tvm
from taso_tvm import zoo

folder = tempfile.mkdtemp()
path = os.path.join(folder, "seed.onnx")
onnx.save(zoo.get_model("seed_example"), path)  # TASO's README graph: conv3x3 conv3x3 + conv1x1, add, relu

# 1. load: an ONNX file (or ModelProto, a Relax IRModule, a TASO graph); `shapes` binds symbolic dims
model = taso_tvm.load(path)
print("inputs:", [(s.name, s.dims, s.dtype) for s in model.inputs], "outputs:", model.outputs)

# 2. compile: the TASO search (settings resolved once: here the analytic cost model, no kernels measured), the CPU
#    schedules, the optimized build checked against the original and timed against it (the faster one is kept)
package = taso_tvm.compile(model, "llvm", settings={"cost": "analytic", "budget": 20}, time_cap=2)
r = package.report
print(f"rules applied: {dict(r.search.total.rules_applied)}, search stopped: {r.search.total.stopped_by}")
print(f"kept: {r.decision or 'the optimized module'}; TVM runtime threads: {r.threads}")

# 3. export: the library and its signature file (inputs, outputs, sha256), written together
so = package.export(os.path.join(folder, "seed.so"))

# 4. run, from the path (the signature is checked before the library is loaded); inputs and outputs by name
x = np.random.default_rng(0).standard_normal(model.inputs[0].dims).astype(np.float32)
result = taso_tvm.run(so, {model.inputs[0].name: x}, repeat=5)
name = model.outputs[0]
print(f"{name}: shape {result.outputs[name].shape}, median {result.timing.median * 1e3:.2f} ms "
      f"over {result.timing.repeat} runs")

# the same function as the original in ONNX Runtime
want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {model.inputs[0].name: x})[0]
np.testing.assert_allclose(result.outputs[name], want, rtol=1e-3, atol=1e-4)
print("equal to ONNX Runtime")
