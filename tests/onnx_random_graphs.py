"""Random ONNX graphs full of rewrite opportunities: parallel convs and matmuls on shared inputs, conv + BN,
concat/split, transpose pairs, several outputs (some of them the same tensor), optionally a symbolic batch."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int, symbolic: bool):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0
        self.symbolic = symbolic

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def weight(self, shape, scale=0.3) -> str:
        n = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), n))
        return n

    def const(self, arr) -> str:
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(self, op, inputs, n_out=1, **attrs) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op + "_"), **attrs))
        return outs

    # ------------------------------------------------------------------ 4-D blocks (N, C, H, W)
    def conv(self, x, c_in, c_out, k=3, act=True, bias=True):
        ins = [x, self.weight((c_out, c_in, k, k))] + ([self.weight((c_out,), 0.1)] if bias else [])
        (y,) = self.node("Conv", ins, pads=[k // 2] * 4)
        return self.node("Relu", [y])[0] if act else y

    def parallel_convs(self, x, c):
        outs = [self.conv(x, c, c, k=int(self.rng.choice([1, 3])), act=bool(self.rng.integers(2))) for _ in range(2)]
        return self.node("Add", outs)[0]

    def conv_bn(self, x, c):
        y = self.conv(x, c, c, act=False, bias=bool(self.rng.integers(2)))
        scale, bias = self.weight((c,), 0.5), self.weight((c,), 0.1)
        mean = self.weight((c,), 0.1)
        var = self.const((np.abs(self.rng.standard_normal(c)) + 0.5).astype(np.float32))
        (z,) = self.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        return self.node("Relu", [z])[0]

    def concat_split(self, x, c):
        a = self.conv(x, c, c, k=1)
        b = self.conv(x, c, c, k=1)
        (cat,) = self.node("Concat", [a, b], axis=1)
        r = self.node("Relu", [cat])[0]
        s1, s2 = self.node("Split", [r, self.const(np.array([c, c], np.int64))], n_out=2, axis=1)
        return self.node("Add", [s1, s2])[0]

    def transpose_pair(self, x):
        (t,) = self.node("Transpose", [x], perm=[0, 2, 3, 1])
        return self.node("Transpose", [t], perm=[0, 3, 1, 2])[0]

    # ------------------------------------------------------------------ 3-D blocks (N, S, D)
    def parallel_matmuls(self, x, d):
        outs = []
        for _ in range(int(self.rng.integers(2, 4))):
            (m,) = self.node("MatMul", [x, self.weight((d, d))])
            outs.append(self.node("Add", [m, self.weight((d,), 0.1)])[0])
        y = outs[0]
        for o in outs[1:]:
            y = self.node("Add", [y, o])[0]
        return y


def random_model(seed: int, symbolic: bool = False) -> onnx.ModelProto:
    """A valid opset-17 model with two inputs (an image and a sequence) and 2-4 outputs."""
    b = _Builder(seed, symbolic)
    rng = b.rng
    c, hw, s, d = 4, 6, 5, 8
    batch = "N" if symbolic else 2
    x = "image"
    for _ in range(int(rng.integers(2, 5))):
        kind = rng.choice(["parallel_convs", "conv_bn", "concat_split", "transpose_pair"])
        x = getattr(b, kind)(x, c) if kind != "transpose_pair" else b.transpose_pair(x)
    t = "tokens"
    for _ in range(int(rng.integers(1, 3))):
        t = b.parallel_matmuls(t, d)
        if rng.integers(2):
            (tp,) = b.node("Transpose", [t], perm=[0, 2, 1])
            t = b.node("Transpose", [tp], perm=[0, 2, 1])[0]
    outputs = [(x, [batch, c, hw, hw]), (t, [batch, s, d])]
    if rng.integers(2):  # a second output that becomes the same tensor after a rewrite
        (tp,) = b.node("Transpose", [t], perm=[0, 2, 1])
        outputs.append((b.node("Transpose", [tp], perm=[0, 2, 1])[0], [batch, s, d]))
    if rng.integers(2):
        outputs.append((b.node("Relu", [x])[0], [batch, c, hw, hw]))
    g = helper.make_graph(
        b.nodes, f"random{seed}",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, c, hw, hw]),
         helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [batch, s, d])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs], b.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model
