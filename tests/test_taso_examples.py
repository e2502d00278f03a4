"""TASO's own example scripts run unchanged with `import taso` resolved to `taso_tvm.taso` (a one-line `taso`
package on sys.path), with the analytic cost model; and the namespace's operators compute what they should."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import taso_tvm.taso as taso

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT.parent / "shared" / "reference" / "taso_examples"
FAST = ["bert"]
# the rest in the slow suite (inceptionv3 builds and times whole models: graph.run_time())
SLOW = ["nasrnn", "resnet50", "resnext50", "nasnet_a", "batched_resnet", "enas", "inceptionv3", "test_onnx"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not EXAMPLES.is_dir():
        pytest.skip(f"TASO's examples are not at {EXAMPLES}")
    d = tmp_path_factory.mktemp("taso_examples")
    for f in EXAMPLES.iterdir():
        if f.suffix in (".py", ".txt"):
            shutil.copy(f, d / f.name)
    (d / "examples").mkdir()
    shutil.copy(EXAMPLES / "enas_arcs.txt", d / "examples" / "enas_arcs.txt")  # enas.py reads examples/...
    shim = d / "shim" / "taso"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("from taso_tvm.taso import *  # noqa: F401,F403\n")
    (d / "taso.yaml").write_text("cost: {backend: analytic}\n")
    return d


def _run(workdir: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir / "shim"), str(ROOT)]),
               TASO_TVM_CONFIG=str(workdir / "taso.yaml"))
    return subprocess.run([sys.executable, script, *args], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_taso_example_runs_unchanged(workdir, name):
    args = []
    if name == "test_onnx":
        from taso_tvm import zoo

        path = workdir / "squeezenet.onnx"
        path.write_bytes(zoo.get_model("squeezenet").SerializeToString())
        args = ["-f", str(path)]
    res = _run(workdir, f"{name}.py", *args)
    assert res.returncode == 0, res.stderr[-3000:]
    if name == "test_onnx":
        assert "optimized_cost" in res.stdout and (workdir / "squeezenet.onnx.taso.onnx").exists()


def test_taso_operators_compute_what_numpy_computes():
    g = taso.new_graph()
    x = g.new_input(dims=(2, 8, 4, 4))
    w = g.new_weight(dims=(8, 8, 3, 3))
    c = g.conv2d(input=x, weight=w, strides=(1, 1), padding="SAME", activation="RELU")
    s = g.reduce_sum(input=c, axes=(2, 3), keepdims=False)
    m = g.max(s, g.ceil(input=s))
    sl = g.slice(m, [0, 2], [2, 6], None, None)
    q = g.squeeze(input=g.unsqueeze(sl, (2,)), axes=(2,))
    gt = g.cast(input=g.greater(x=q, y=g.round(q)), datatype="FLOAT")
    out = g.leakyrelu(g.sub(x=gt, y=g.reduce_mean(input=q, axes=(1,), keepdims=True)), 0.1)
    g.mark_output(out, g.reduce_argmax(input=q, axes=(1,), keepdims=False), g.shape(x))
    xv = np.random.default_rng(0).standard_normal((2, 8, 4, 4)).astype(np.float32)
    wv = next(n.value for n in g.to_tensor_graph().topo_order() if n.op == "weight" and n.types[0].ndim == 4)
    conv = np.maximum(0, _conv_same(xv, np.asarray(wv)))
    sv = conv.sum(axis=(2, 3))
    qv = np.maximum(sv, np.ceil(sv))[0:2, 2:6]
    gv = (qv > np.round(qv)).astype(np.float32) - qv.mean(axis=1, keepdims=True)
    want = [np.where(gv > 0, gv, 0.1 * gv), qv.argmax(axis=1), np.array([2, 8, 4, 4])]
    got = g.evaluate({"input0": xv})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    best = taso.optimize(g, budget=4)  # opaque operators travel through the search and the export
    onnx_model = taso.export_onnx(best)
    import onnxruntime as ort

    res = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input0": xv})
    for a, b in zip(res, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert g.cost() > 0 and best.cost() <= g.cost() + 1e-9


def test_taso_api_errors_are_one_line():
    g = taso.new_graph()
    x = g.new_input(dims=(2, 3))
    with pytest.raises(taso.TasoApiError, match="cast: unknown data type 'FLOAT33'"):
        g.cast(input=x, datatype="FLOAT33")
    with pytest.raises(taso.TasoApiError, match="reduce_argmax: one axis"):
        g.reduce_argmax(input=x, axes=(0, 1))


def _conv_same(x, w):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    out = np.zeros((n, o, h, wd), np.float32)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out
