"""Tutorial 4: a Keras model -> tf2onnx -> taso-tvm -> ONNX Runtime.

Needs TensorFlow and tf2onnx (`pip install tensorflow-cpu tf2onnx`; the test suite skips this tutorial without
them).

    python tutorials/04_keras.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter

import numpy as np
import onnxruntime as ort
import tensorflow as tf
import tf2onnx

from taso_tvm.onnx_opt import optimize_onnx

tf.keras.utils.set_random_seed(0)

# A small Keras CNN with two parallel branches (NHWC, as Keras writes it; tf2onnx inserts the transposes).
inp = tf.keras.Input(shape=(32, 32, 16), name="image")
a = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
b = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
y = tf.keras.layers.Concatenate()([a, b])
y = tf.keras.layers.GlobalAveragePooling2D()(y)
out = tf.keras.layers.Dense(10, name="logits")(y)
net = tf.keras.Model(inp, out)

# tf2onnx keeps Keras's batch dim symbolic.
spec = (tf.TensorSpec((None, 32, 32, 16), tf.float32, name="image"),)
model, _ = tf2onnx.convert.from_keras(net, input_signature=spec, opset=17)
print("exported:", len(model.graph.node), "nodes:", sorted({n.op_type for n in model.graph.node}))

optimized, report = optimize_onnx(model, shapes={"image": [1, 32, 32, 16]}, time_check=False)
print(f"{report.searchable} of {report.nodes} nodes searched; rules applied: {dict(report.rules_applied)}")

sess = ort.InferenceSession(optimized.SerializeToString(), providers=["CPUExecutionProvider"])
name = sess.get_inputs()[0].name
for batch in (1, 3):
    x = np.random.default_rng(batch).standard_normal((batch, 32, 32, 16)).astype(np.float32)
    want = net(x).numpy()
    got = sess.run(None, {name: x})[0]
    print(f"batch {batch}: max difference vs Keras {float(np.abs(got - want).max()):.2e}")
    assert np.allclose(got, want, rtol=1e-3, atol=1e-4)
