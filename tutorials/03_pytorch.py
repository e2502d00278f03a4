"""Tutorial 3: a PyTorch model -> torch.onnx (dynamic batch axis) -> taso-tvm -> ONNX Runtime.

Needs PyTorch (`pip install torch`; the test suite skips this tutorial without it).

    python tutorials/03_pytorch.py
"""
import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from taso_tvm.onnx_opt import optimize_onnx


class Inception(nn.Module):
    """Parallel conv branches on one input, concatenated: the shape of block TASO's rules merge."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.b3 = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(3 * c, 10)

    def forward(self, x):
        y = torch.cat([self.b1(x), self.b2(x), self.b3(x)], dim=1)
        return self.head(y.mean(dim=(2, 3)))


torch.manual_seed(0)
net = Inception().eval()
x = torch.randn(1, 32, 28, 28)

# Export with a symbolic batch dim, as most deployments do (PyTorch's torch.export-based exporter).
program = torch.onnx.export(net, (x,), input_names=["x"], output_names=["logits"],
                            dynamic_shapes={"x": {0: torch.export.Dim("batch")}}, dynamo=True, verbose=False)
model = program.model_proto

# taso-tvm binds the symbolic dim to search (batch 1 here, and a second value to check that nothing it rewrites
# depends on it), and writes the result with the batch dim still symbolic.
optimized, report = optimize_onnx(model, shapes={"x": [1, 32, 28, 28]}, time_check=False)
print(f"{report.searchable} of {report.nodes} nodes searched; rules applied: {dict(report.rules_applied)}")
print("input shape in the output file:", optimized.graph.input[0].type.tensor_type.shape.dim[0].dim_param)

# The optimized file runs at any batch size and computes what PyTorch computes.
sess = ort.InferenceSession(optimized.SerializeToString(), providers=["CPUExecutionProvider"])
for batch in (1, 4):
    xb = torch.randn(batch, 32, 28, 28)
    with torch.no_grad():
        want = net(xb).numpy()
    got = sess.run(None, {"x": xb.numpy()})[0]
    print(f"batch {batch}: max difference vs PyTorch {float(np.abs(got - want).max()):.2e}")
    assert np.allclose(got, want, rtol=1e-3, atol=1e-4)
