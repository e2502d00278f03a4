"""Lift and lower: every registry operator's Relax form equals its NumPy semantics, the lift/lower round trip is
the identity on structure (opaque operators, several blocks, tuples, If and symbolic shapes survive), and every
zoo and ONNX 'light' model computes the same after the round trip."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from taso_tvm import load_onnx, zoo
from taso_tvm.graph import NodeStore, TensorGraph, TensorType
from taso_tvm.relay_pass.lift import lift_function
from taso_tvm.relay_pass.lower import lower_to_function
from taso_tvm.relay_pass.rewrite import rewrite_module
from util import assert_close, ort_run, tvm_run

RNG = np.random.default_rng(0)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# (op, input shapes (None = weight given), attrs)
OP_CASES = [
    ("conv2d", [(1, 4, 9, 9), (6, 4, 3, 3)], dict(strides=(2, 2), padding=(1, 0, 1, 2), activation="relu")),
    ("conv2d", [(1, 4, 8, 8), (8, 2, 3, 3)], dict(padding="SAME", groups=2, dilation=(2, 2))),
    ("conv2d", [(1, 4, 8, 8), (4, 4, 1, 1)], dict(activation="sigmoid")),
    ("matmul", [(2, 3, 5, 4), (4, 6)], dict(activation="tanh")),
    ("matmul", [(5,), (5, 3)], {}),
    ("add", [(2, 3, 4), (3, 1)], {}), ("sub", [(2, 3), (3,)], {}), ("mul", [(2, 3), (2, 3)], {}),
    ("div", [(2, 3), (1, 3)], {}),
    ("relu", [(3, 4)], {}), ("sigmoid", [(3, 4)], {}), ("tanh", [(3, 4)], {}), ("gelu", [(3, 4)], {}),
    ("erf", [(3, 4)], {}), ("exp", [(3, 4)], {}), ("neg", [(3, 4)], {}),
    ("concat", [(2, 3), (2, 5), (2, 1)], dict(axis=-1)),
    ("split", [(2, 9)], dict(axis=1, sizes=(2, 3, 4))),
    ("transpose", [(2, 3, 4)], dict(perm=(2, 0, 1))),
    ("reshape", [(2, 3, 4)], dict(shape=(4, -1))),
    ("maxpool2d", [(1, 3, 9, 9)], dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
    ("maxpool2d", [(1, 3, 8, 8)], dict(kernel=(3, 3), strides=(2, 2), ceil_mode=True)),
    ("avgpool2d", [(1, 3, 9, 9)], dict(kernel=(3, 3), strides=(1, 1), padding="SAME", count_include_pad=False)),
    ("avgpool2d", [(1, 3, 9, 9)], dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("batchnorm", [(1, 4, 5, 5), (4,), (4,), (4,), (4,)], dict(epsilon=1e-3)),
    ("softmax", [(2, 7)], dict(axis=1)),
    ("layernorm", [(2, 3, 8), (8,), (8,)], dict(axes=(-1,), epsilon=1e-5)),
    ("mean", [(1, 4, 5, 5)], dict(axes=(2, 3), keepdims=True)),
    ("enlarge", [(4, 3, 1, 1)], dict(kernel=(3, 3))),
    ("merge_gconv", [(8, 2, 3, 3)], dict(count=2, groups=4)),
]


@pytest.mark.parametrize("op,shapes,attrs", OP_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(OP_CASES)])
def test_relax_lowering_matches_numpy(op, shapes, attrs):
    """Each operator lowered to Relax and built by TVM computes what its NumPy definition says."""
    s = NodeStore()
    feeds = {}
    refs = []
    for i, shape in enumerate(shapes):
        data = _w(*shape)
        if op == "batchnorm" and i == 4:
            data = np.abs(data) + 0.5  # variance
        feeds[f"x{i}"] = data
        refs.append(s.input(f"x{i}", TensorType(shape)))
    outs = s.add(op, refs, **attrs)
    g = TensorGraph(s, outs)
    expected = g.evaluate(feeds)
    mod = tvm.IRModule({"main": lower_to_function(g, params=list(feeds))})
    assert_close(tvm_run(mod, list(feeds.values())), expected, rtol=1e-4, atol=1e-5)


@I.ir_module
class OpaqueModule:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), y: R.Tensor((2, 4), "float32"), c: R.Tensor((), "bool")):
        with R.dataflow():
            a = R.nn.relu(y)
            b = R.cumsum(a, axis=1)
            t = (a, b)
            t0 = t[0]
            s = R.add(x, x)
            lv = R.add(t0, b)
            R.output(lv, s, t)
        if c:
            r = R.multiply(lv, lv)
        else:
            r = R.add(lv, lv)
        with R.dataflow():
            z = R.nn.relu(r)
            sp = R.split(z, [2], axis=1)
            z0 = sp[0]
            z1 = sp[1]
            w = R.concat((z1, z0), axis=1)
            q = R.nn.log_softmax(w, axis=1)
            R.output(q)
        return (q, s, t)


def _canon(mod):
    seq = tvm.transform.Sequential([relax.transform.EliminateCommonSubexpr(), relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])
    return seq(mod)


def test_lift_lower_identity_with_opaque_operators():
    blocks = lift_function(OpaqueModule["main"])
    assert len(blocks) == 2
    ops = [[n.op for n in b.graph.ops()] for b in blocks]
    assert "opaque" in ops[0] and "opaque" in ops[1]  # cumsum, tuple, symbolic add, log_softmax
    assert "split" in ops[1] and "concat" in ops[1] and "relu" in ops[1]
    out = rewrite_module(OpaqueModule)
    assert relax.analysis.check_well_formed(out)
    assert tvm_ffi.structural_equal(_canon(out), _canon(OpaqueModule)), \
        tvm_ffi.get_first_structural_mismatch(_canon(out), _canon(OpaqueModule))


def test_opaque_module_runs_the_same():
    x, y = _w(3, 4), _w(2, 4)
    for cond in (True, False):
        c = np.array(cond)
        assert_close(tvm_run(rewrite_module(OpaqueModule), [x, y, c]), tvm_run(OpaqueModule, [x, y, c]), rtol=1e-6)


# Untuned TVM CPU code is slow: the biggest models (20-65 s each) run with `pytest -m slow`.
# ResNeXt-50 and the light ResNet-50 repeat what the zoo's ResNet-50 proves.
SLOW = {"inception_v3", "nasnet_a", "light_vgg19", "light_densenet121", "light_inception_v1", "light_inception_v2",
        "light_zfnet512", "resnext50", "light_resnet50"}


def _param(name, *values):
    return pytest.param(*values, id=name, marks=[pytest.mark.slow] if name in SLOW else [])


ZOO = [_param(n, n, {"layers": 2} if n == "bert" else {}) for n in zoo.list_models()]
LIGHT = [_param(p.rsplit("/", 1)[-1].replace(".onnx", ""), p) for p in zoo.light_models()]


@pytest.mark.parametrize("name,kwargs", ZOO)
def test_zoo_round_trip(name, kwargs):
    model = zoo.get_model(name, **kwargs)
    feeds = zoo.random_inputs(model)
    mod = load_onnx(model)
    lifted = lift_function(mod["main"])
    assert lifted and lifted[0].num_opaque <= 2  # flatten/reshape-like leftovers at most
    out = rewrite_module(mod)
    assert tvm_ffi.structural_equal(_canon(out), _canon(mod))
    assert_close(tvm_run(out, feeds), ort_run(model, feeds), rtol=1e-4)


@pytest.mark.parametrize("path", LIGHT)
def test_light_model_round_trip(path):
    model = zoo.load_light(path)
    feeds = zoo.random_inputs(model)
    out = rewrite_module(load_onnx(model))
    assert_close(tvm_run(out, feeds), ort_run(model, feeds), rtol=1e-4)


@pytest.mark.parametrize("zero_shape, op, left, removed", [
    ((), "add", False, True), ((4,), "add", True, True), ((1, 1, 4), "add", False, False),  # the last broadcasts x
    ((), "subtract", False, True), ((), "subtract", True, False)])  # 0 - x is not x
def test_adding_a_zero_constant_lifts_as_its_other_operand(zero_shape, op, left, removed):
    """paddle2onnx writes `scale` as x * s + 0: the lift takes x + 0 (and x - 0) as x where the zero does not
    broadcast x to a larger shape; the round trip still computes the same."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 4), "float32"))
    zero = relax.const(np.zeros(zero_shape, np.float32))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = bb.emit(relax.op.multiply(x, relax.const(_w(4))))
            a, b = (zero, m) if left else (m, zero)
            y = bb.emit_output(relax.op.nn.relu(getattr(relax.op, op)(a, b)))
        bb.emit_func_output(y)
    func = bb.get()["main"]
    (block,) = lift_function(func)
    ops = [n.op for n in block.graph.ops()]
    assert (ops == ["mul", "relu"]) == removed, ops
    mod = tvm.IRModule({"main": func})
    feed = _w(2, 4)
    assert_close(tvm_run(rewrite_module(mod), [feed]), tvm_run(mod, [feed]))


@pytest.mark.parametrize("dtype, removed", [("float32", True), ("float16", False)])
def test_a_cast_to_the_dtype_it_has_lifts_as_its_operand(dtype, removed):
    """torch's TorchScript exporter casts each RMS norm's input and output to float32 in a float32 model: such a cast
    lifts as its operand (no opaque node between the norm's pieces); a cast that changes the dtype stays opaque."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = bb.emit(relax.op.multiply(x, relax.const(_w(4))))
            c = bb.emit(relax.op.astype(m, dtype))
            y = bb.emit_output(relax.op.astype(relax.op.nn.relu(c), "float32") if dtype != "float32"
                               else relax.op.nn.relu(c))
        bb.emit_func_output(y)
    func = bb.get()["main"]
    (block,) = lift_function(func)
    ops = [n.op for n in block.graph.ops()]
    assert (ops == ["mul", "relu"]) == removed and ("opaque" in ops) != removed, ops
    mod = tvm.IRModule({"main": func})
    feed = _w(2, 4)
    assert_close(tvm_run(rewrite_module(mod), [feed]), tvm_run(mod, [feed]))
