"""TASO's NASRNN: the NAS recurrent cell unrolled over several time steps.

As in TASO's ``nasrnn.py`` every cell combines the step input ``x_t`` and the
state with eight ``x @ W + h @ U`` products that feed a tree of
Relu/Sigmoid/Tanh, Add and Mul; the initial state is a weight.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from .builder import GraphBuilder


class _Weights:
    """Hands out ``[hidden, hidden]`` matrices, fresh or shared across steps."""

    def __init__(self, b: GraphBuilder, hidden: int, share: bool) -> None:
        self.b, self.hidden, self.share = b, hidden, share
        self.cache: list[str] = []
        self.i = 0

    def reset(self) -> None:
        self.i = 0

    def next(self) -> str:
        if self.share and self.i < len(self.cache):
            w = self.cache[self.i]
        else:
            w = self.b.weight("rnn.weight", (self.hidden, self.hidden), 1.0 / math.sqrt(self.hidden))
            self.cache.append(w)
        self.i += 1
        return w


def _cell(b: GraphBuilder, ws: _Weights, h: str, x: str) -> str:
    ws.reset()
    t = [b.add(b.matmul(x, ws.next()), b.matmul(h, ws.next())) for _ in range(8)]
    m0 = b.add(b.relu(t[0]), b.sigmoid(t[3]))
    m1 = b.add(b.sigmoid(t[1]), b.tanh(t[2]))
    m2 = b.mul(b.sigmoid(t[4]), b.tanh(t[5]))
    m3 = b.mul(b.sigmoid(t[6]), b.relu(t[7]))
    m4 = b.add(b.sigmoid(m1), b.tanh(m2))
    m5 = b.mul(b.tanh(m0), b.tanh(m3))
    m6 = b.mul(b.tanh(m4), b.tanh(m5))
    return b.tanh(m6)


def nasrnn(seed: int = 0, steps: int = 5, hidden: int = 512, share_weights: bool = False) -> onnx.ModelProto:
    """NASRNN over ``steps`` inputs ``x_0..x_{steps-1}`` of shape [1, hidden]; outputs the last state.

    ``share_weights=False`` (TASO's choice) gives every step its own weights.
    """
    b = GraphBuilder("nasrnn", seed)
    xs = [b.input(f"x_{i}", (1, hidden)) for i in range(steps)]
    ws = _Weights(b, hidden, share_weights)
    h = b.param("h0", b.normal((1, hidden), 1.0).clip(-1, 1).astype(np.float32))
    for x in xs:
        h = _cell(b, ws, h, x)
    return b.build(h, doc=f"NASRNN, {steps} steps, hidden {hidden}")
