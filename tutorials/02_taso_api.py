"""Tutorial 2: TASO's own example with `import taso_tvm as taso`.

Build TASO's README graph, optimize it, check it computes the same, and export it to ONNX.

    python tutorials/02_taso_api.py
"""
import numpy as np
import onnxruntime as ort

import taso_tvm as taso

# TASO's example block at a small size (1x16x8x8), where kernel launches dominate the cost.
graph = taso.new_graph()
input = graph.new_input(dims=(1, 16, 8, 8))
w1 = graph.new_weight(dims=(16, 16, 3, 3))
w2 = graph.new_weight(dims=(16, 16, 1, 1))
w3 = graph.new_weight(dims=(16, 16, 3, 3))
left = graph.conv2d(input=input, weight=w1, strides=(1, 1), padding="SAME", activation="RELU")
left = graph.conv2d(input=left, weight=w3, strides=(1, 1), padding="SAME")
right = graph.conv2d(input=input, weight=w2, strides=(1, 1), padding="SAME", activation="RELU")
output = graph.relu(graph.add(left, right))

# The analytic cost model with the GPU roofline of configs/cuda.yaml: instant, no device needed.
new_graph = taso.optimize(graph, cost="analytic", target="cuda", budget=64)
before = [n.op for n in graph.to_tensor_graph().ops()]
after = [n.op for n in new_graph.to_tensor_graph().ops() if n.op not in ("concat", "enlarge")]
print("operators before:", before)
print("operators after (weight preparation folded away):", after)

x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
ref = graph.evaluate({"input0": x})[0]
onnx_model = taso.export_onnx(new_graph)
sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
got = sess.run(None, {"input0": x})[0]
print("max difference vs the original:", float(np.abs(got - ref).max()))
assert np.allclose(got, ref, rtol=1e-4, atol=1e-4)
