"""The TASO-compatible builder: TASO's own example builds verbatim and computes what NumPy says."""
import numpy as np
import pytest

import taso_tvm as taso
from util import assert_close, tvm_run


def _seed_example():
    # TASO's README example, verbatim apart from the import
    graph = taso.new_graph()
    input = graph.new_input(dims=(1, 128, 56, 56))
    w1 = graph.new_weight(dims=(128, 128, 3, 3))
    w2 = graph.new_weight(dims=(128, 128, 1, 1))
    w3 = graph.new_weight(dims=(128, 128, 3, 3))
    left = graph.conv2d(input=input, weight=w1, strides=(1, 1), padding="SAME", activation="RELU")
    left = graph.conv2d(input=left, weight=w3, strides=(1, 1), padding="SAME")
    right = graph.conv2d(input=input, weight=w2, strides=(1, 1), padding="SAME", activation="RELU")
    output = graph.add(left, right)
    output = graph.relu(output)
    return graph, output


def test_seed_example_builds_and_runs():
    graph, output = _seed_example()
    assert output.dim(1) == 128 and output.nDim == 4
    g = graph.to_tensor_graph()
    assert [n.op for n in g.ops()] == ["conv2d", "conv2d", "conv2d", "add", "relu"]
    x = np.random.default_rng(0).standard_normal((1, 128, 56, 56)).astype(np.float32)
    mod = graph.to_relax()
    assert_close(tvm_run(mod, [x]), graph.evaluate({"input0": x}), rtol=1e-4)


def test_builder_operators_lower_and_run():
    g = taso.new_graph()
    x = g.new_input(dims=(1, 8, 10, 10))
    w = g.new_weight(dims=(8, 8, 3, 3))
    c = g.conv2d(input=x, weight=w, strides=(2, 2), padding="VALID", activation="TANH")
    p = g.maxpool2d(x, kernels=(2, 2), strides=(2, 2), padding="VALID")
    a = g.avgpool2d(input=x, kernels=(3, 3), strides=(1, 1), padding="SAME", activation="RELU")
    s1, s2 = g.split(p, 1, [3, 5])
    cat = g.concat(1, [s2, s1])
    t = g.transpose(cat, (0, 2, 3, 1), shuffle=True)
    r = g.reshape(t, (25, 8))
    m = g.matmul(r, g.new_weight(dims=(8, 4)), activation="SIGMOID")
    scale, bias = g.new_weight(dims=(8,)), g.new_weight(dims=(8,))
    mean, var = g.new_weight(dims=(8,)), g.new_weight(dims=(8,), data=np.full(8, 0.7))
    bn = g.batchnorm(a, scale, bias, mean, var)
    d = g.div(x=g.sub(x=c, y=c), y=g.add(c, g.exp(input=c)))
    g.mark_output(m, bn, d, g.softmax(g.mul(c, c), axis=1))
    xv = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    assert_close(tvm_run(g.to_relax(), [xv]), g.evaluate({"input0": xv}), rtol=1e-4)


def test_builder_errors_are_clear():
    g = taso.new_graph()
    x = g.new_input(dims=(1, 3, 8, 8))
    with pytest.raises(ValueError, match="unknown activation 'GELU'"):
        g.conv2d(input=x, weight=g.new_weight(dims=(4, 3, 3, 3)), strides=(1, 1), padding="SAME", activation="GELU")
    with pytest.raises(taso.GraphError, match="inner dimensions"):
        g.matmul(g.new_input(dims=(2, 3)), g.new_weight(dims=(4, 5)))
    with pytest.raises(ValueError, match="needs? 8 elements|need 8"):
        g.new_weight(dims=(2, 4), data=[1.0, 2.0])
    with pytest.raises(TypeError, match="Tensor of this graph"):
        g.relu(taso.new_graph().new_input(dims=(2,)))
