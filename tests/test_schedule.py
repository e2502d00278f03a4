"""CPU schedule pass (taso_tvm/schedule): every kernel kind the zoo produces, built with the "taso-schedule"
pipeline, computes what the unscheduled build computes; each is scheduled by the intended rule, never the
fallback; the pipeline is registered; the thread count is set and reported."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from taso_tvm.runtime.check import compare_arrays
from taso_tvm.schedule import CpuSchedule, schedule_module, schedule_pipeline
from taso_tvm.schedule.common import vector_split
from taso_tvm.schedule.conv_layout import conv_weights_ihwo
from taso_tvm.schedule.pad_width import pad_conv_width

TARGET = tvm.target.Target({"kind": "llvm"})
RTOL, ATOL = 1e-5, 1e-5
rng = np.random.default_rng(0)


def _const(*shape):
    return relax.const(rng.standard_normal(shape).astype("float32"))


def _module(shapes, body):
    """A Relax module main(x0, x1, ...) whose dataflow block is body(bb, params)."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, params))
        bb.emit_func_output(out)
    return bb.get()


def _run(ex, inputs):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


def _check(mod, shapes, rules):
    """Build scheduled and unscheduled, compare, and check which rules scheduled the kernels."""
    sched = CpuSchedule(TARGET)
    ex = tvm.compile(mod, target=TARGET, relax_pipeline=schedule_pipeline(TARGET, sched))
    ref = tvm.compile(mod, target=TARGET, relax_pipeline=relax.get_default_pipeline(TARGET))
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes]
    compare_arrays("output", _run(ex, inputs), _run(ref, inputs), RTOL, ATOL)
    assert sched.report.fallback == []
    assert set(sched.report.rules) == set(rules), sched.report.rules


def _conv(ci, co, hw, k, stride, pad, groups, epilogue):
    def body(bb, ps):
        y = bb.emit(relax.op.nn.conv2d(ps[0], _const(co, ci // groups, k, k), strides=stride, padding=pad,
                                       groups=groups))
        if "bias" in epilogue:
            y = bb.emit(relax.op.add(y, _const(1, co, 1, 1)))
        if "residual" in epilogue:
            y = bb.emit(relax.op.add(y, ps[1]))
        if "relu" in epilogue:
            y = bb.emit(relax.op.nn.relu(y))
        return y

    out = (hw + 2 * pad - k) // stride + 1
    shapes = [(1, ci, hw, hw)] + ([(1, co, out, out)] if "residual" in epilogue else [])
    return _module(shapes, body), shapes


CONVS = {  # output channels in whole vector halves take the IHWO path, 12 and grouped ones the widened OIHW one
    "3x3 odd width, bias+relu": (8, 16, 13, 3, 1, 1, 1, ("bias", "relu")),
    "3x3 odd width, 12 channels (OIHW)": (8, 12, 13, 3, 1, 1, 1, ("bias", "relu")),
    "strided, 12 channels (OIHW)": (8, 12, 15, 3, 2, 1, 1, ()),
    "3x3 width 16": (8, 16, 16, 3, 1, 1, 1, ("bias",)),
    "strided 3x3": (8, 16, 15, 3, 2, 1, 1, ("relu",)),
    "7x7 stride 2 pad 3": (3, 16, 23, 7, 2, 3, 1, ("bias", "relu")),
    "1x1 width 7, residual": (16, 32, 7, 1, 1, 0, 1, ("bias", "residual", "relu")),
    "grouped": (8, 16, 12, 3, 1, 1, 2, ()),
    "depthwise": (16, 16, 9, 3, 1, 1, 16, ("relu",)),
    "width 2 (not widened)": (8, 8, 2, 1, 1, 0, 1, ()),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_conv2d(case):
    mod, shapes = _conv(*CONVS[case])
    _check(mod, shapes, {"contraction"})  # the width slice and the epilogue fuse into the conv kernel


MATMULS = {
    "small odd": ((5, 7), (7, 100), ("bias",)),
    "dense 64x32x48 relu": ((64, 32), (32, 48), ("bias", "relu")),
    "vector-matrix": ((1, 64), (64, 96), ("bias",)),
    "batched": ((2, 16, 8), (8, 24), ("relu",)),
}


@pytest.mark.parametrize("case", list(MATMULS))
def test_matmul(case):
    a, w, epilogue = MATMULS[case]

    def body(bb, ps):
        y = bb.emit(relax.op.matmul(ps[0], _const(*w)))
        if "bias" in epilogue:
            y = bb.emit(relax.op.add(y, _const(w[-1])))
        if "relu" in epilogue:
            y = bb.emit(relax.op.nn.relu(y))
        return y

    _check(_module([a], body), [a], {"contraction"})


def test_batch_matmul_two_inputs():
    shapes = [(3, 8, 16), (3, 16, 12)]
    _check(_module(shapes, lambda bb, ps: relax.op.matmul(ps[0], ps[1])), shapes, {"contraction"})


POOLS = {
    "max 3x3 s2": lambda x: relax.op.nn.max_pool2d(x, pool_size=3, strides=2),
    "max 3x3 s1 pad 1": lambda x: relax.op.nn.max_pool2d(x, pool_size=3, strides=1, padding=1),
    "avg 3x3 s1 pad 1": lambda x: relax.op.nn.avg_pool2d(x, pool_size=3, strides=1, padding=1),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_pooling(case):
    shapes = [(1, 8, 13, 13)]
    _check(_module(shapes, lambda bb, ps: POOLS[case](ps[0])), shapes, {"contraction"})


def test_row_reductions():
    shapes = [(1, 8, 7, 7), (4, 10, 24)]

    def body(bb, ps):
        m = bb.emit(relax.op.mean(ps[0], axis=[2, 3], keepdims=True))
        s = bb.emit(relax.op.nn.softmax(ps[1], axis=-1))
        ln = bb.emit(relax.op.nn.layer_norm(s, _const(24), _const(24), axes=[-1]))
        return relax.Tuple([m, ln])

    mod = _module(shapes, body)
    sched = CpuSchedule(TARGET)
    ex = tvm.compile(mod, target=TARGET, relax_pipeline=schedule_pipeline(TARGET, sched))
    ref = tvm.compile(mod, target=TARGET, relax_pipeline=relax.get_default_pipeline(TARGET))
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes]
    vm, vm0 = (relax.VirtualMachine(e, tvm.cpu()) for e in (ex, ref))
    got = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    want = vm0["main"](*[tvm.runtime.tensor(a) for a in inputs])
    for i in range(2):
        compare_arrays(f"output {i}", got[i].numpy(), want[i].numpy(), RTOL, ATOL)
    assert sched.report.fallback == [] and sched.report.rules["reduction"] >= 2


def test_injective_layout_ops():
    shapes = [(2, 6, 10, 5), (2, 6, 10, 3)]

    def body(bb, ps):
        c = bb.emit(relax.op.concat([ps[0], ps[1]], axis=3))
        t = bb.emit(relax.op.permute_dims(c, [0, 2, 1, 3]))
        r = bb.emit(relax.op.reshape(t, (2, 10, 48)))
        return relax.op.multiply(relax.op.sigmoid(r), relax.op.tanh(r))

    _check(_module(shapes, body), shapes, {"injective"})


def test_vector_split_whole_registers():
    assert vector_split(768, 16) == 32 and vector_split(56, 16) == 8 and vector_split(16, 16) == 16
    assert vector_split(13, 16) == 13  # short: one odd vector (a single row, no register tile)
    assert vector_split(149, 16) is None  # long and prime: split by lanes with a tail


def test_pad_conv_width_widens_and_slices():
    mod, _ = _conv(8, 16, 13, 3, 1, 1, 1, ())
    wide, n = pad_conv_width(mod, 8)
    assert n == 1
    text = wide.script()
    assert "strided_slice" in text and "(1, 16, 13, 16)" in text


def test_conv_weights_ihwo_only_where_channels_fill_vectors():
    wide, n = conv_weights_ihwo(_conv(8, 16, 13, 3, 2, 1, 1, ())[0], 8)
    assert n == 1 and 'kernel_layout="IHWO"' in wide.script()
    assert conv_weights_ihwo(_conv(8, 12, 13, 3, 1, 1, 1, ())[0], 8)[1] == 0  # 12 channels: not whole vectors
    assert conv_weights_ihwo(_conv(8, 16, 12, 3, 1, 1, 2, ())[0], 8)[1] == 0  # grouped: stays OIHW


def test_registered_pipeline_builds():
    import taso_tvm.schedule  # noqa: F401 - registers the pipeline

    mod, shapes = _conv(4, 8, 9, 3, 1, 1, 1, ("relu",))
    ex = tvm.compile(mod, target=TARGET, relax_pipeline="taso-schedule")
    ref = tvm.compile(mod, target=TARGET, relax_pipeline=relax.get_default_pipeline(TARGET))
    x = [rng.standard_normal(shapes[0]).astype("float32")]
    compare_arrays("output", _run(ex, x), _run(ref, x), RTOL, ATOL)


def test_non_llvm_target_left_alone():
    mod, _ = _conv(4, 8, 9, 3, 1, 1, 1, ())
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    with cuda:
        legal = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.FuseOps(),
                                          relax.transform.FuseTIR()])(mod)
    sched = CpuSchedule(cuda)
    out = sched(legal)
    assert sum(sched.report.rules.values()) == 0 and tvm_ffi.structural_equal(out, legal)


def test_thread_count_set_and_reported():
    code = ("from taso_tvm.schedule import set_num_threads, num_threads\n"
            "print(set_num_threads(2), num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]


def test_zoo_kernels_all_matched_by_a_rule():
    """Every PrimFunc kind the zoo produces is scheduled by a rule; the fallback list must stay empty."""
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx

    left = {}
    for name in zoo.list_models():
        model = zoo.get_model(name, **({"layers": 1} if name == "bert" else {}))
        _, report = schedule_module(load_onnx(model), TARGET)
        if report.fallback:
            left[name] = report.fallback
    assert left == {}, f"PrimFuncs left to the fallback schedule: {left}"
