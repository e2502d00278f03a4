"""Ctrl-C at fixed points of a real `optimize` run: one line, exit 130, no output and no temporary file left,
no worker left running; during the search the best graph so far is written (exit 0). Plus one real SIGINT sent
to a `taso-tvm` process group while its kernel-build workers run."""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from reliability_util import FAST, assert_one_line, leftovers, pair_model, run_main, save

REPO = Path(__file__).resolve().parents[1]


def _interrupt(*_a, **_k):
    raise KeyboardInterrupt


def _points():
    """(name, module, attribute) of the functions an interrupt is raised from, in the order a run reaches them."""
    import taso_tvm.runtime.check
    import taso_tvm.fileio
    import taso_tvm.onnx_io
    import taso_tvm.onnx_io.export
    import taso_tvm.relay_pass.rewrite
    import taso_tvm.rules.verify.verdict

    return {
        "loading": (taso_tvm.onnx_io, "read_onnx"),
        "verifying": (taso_tvm.rules.verify.verdict, "verify_rules"),
        "checking regions": (taso_tvm.runtime.check, "run_onnx"),
        "lowering": (taso_tvm.relay_pass.rewrite, "lower_graph"),  # inside TVM's pass callback
        "exporting": (taso_tvm.onnx_io.export, "export_relax"),
        "checking the model": (taso_tvm.runtime.check, "check_onnx"),
        "writing": (taso_tvm.fileio.os, "fsync"),
    }


@pytest.mark.parametrize("point", list(_points()))
def test_interrupt_at_each_point(point, tmp_path, monkeypatch, capsys):
    model = save(pair_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    module, attr = _points()[point]
    monkeypatch.setattr(module, attr, _interrupt)
    rc, err, _ = run_main(["optimize", model, "-o", out, "--report", tmp_path / "r.json"] + FAST, capsys)
    monkeypatch.undo()
    assert rc == 130, (point, err)
    assert_one_line(err, "interrupted")
    assert not out.exists() and not (tmp_path / "r.json").exists()
    assert leftovers(tmp_path) == []
    assert multiprocessing.active_children() == []


def test_interrupt_while_building_kernels(tmp_path, monkeypatch, capsys):
    """The TVM cost backend: an interrupt in a kernel build stops the build, removes the kernels' temporary
    folder and leaves no worker."""
    import taso_tvm.cost.backends.tvm_backend as tb

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tb, "build_kernel", _interrupt)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cost:\n  cache: ''\n  build_jobs: 1\n")
    model = save(pair_model(), tmp_path / "m.onnx")
    rc, err, out = run_main(["optimize", model, "-o", tmp_path / "out.onnx", "--config", cfg, "--cost-backend",
                             "tvm", "--no-time-check"], capsys)
    if rc == 130:  # a build for the first cost, before the search
        assert_one_line(err, "interrupted")
        assert not (tmp_path / "out.onnx").exists()
    else:  # kernels are built as the search costs candidates: an interrupt there ends the search, best so far
        assert rc == 0 and "stopped: interrupt" in out and (tmp_path / "out.onnx").exists(), (rc, err)
    assert list((tmp_path / "tmp").iterdir()) == []  # the kernels' folder is gone
    assert leftovers(tmp_path) == []
    assert multiprocessing.active_children() == []


def test_interrupt_during_the_search_writes_the_best_so_far(tmp_path, monkeypatch, capsys):
    from taso_tvm.cost.model import CostModel

    calls = []
    real = CostModel.graph_cost

    def cost(self, graph):
        calls.append(1)
        if len(calls) == 4:  # one Ctrl-C, in the middle of the search
            raise KeyboardInterrupt
        return real(self, graph)

    monkeypatch.setattr(CostModel, "graph_cost", cost)
    model = save(pair_model(), tmp_path / "m.onnx")
    rc, err, out = run_main(["optimize", model, "-o", tmp_path / "out.onnx"] + FAST, capsys)
    assert rc == 0, err
    assert "stopped: interrupt" in out
    assert (tmp_path / "out.onnx").exists() and leftovers(tmp_path) == []


def test_tvm_wrapped_interrupt_is_an_interrupt():
    """TVM turns a KeyboardInterrupt raised in a Python callback into an error whose text names it."""
    from taso_tvm.cli import report_error
    from taso_tvm.errors import EXIT_INTERRUPTED, exit_code

    assert exit_code(RuntimeError("Traceback ...\nKeyboardInterrupt")) == EXIT_INTERRUPTED
    try:
        raise RuntimeError("wrapped") from KeyboardInterrupt()
    except RuntimeError as e:
        assert report_error(e) == EXIT_INTERRUPTED


def _session_procs(sid: int) -> list:
    """Processes of session `sid` still alive (the command and anything it started)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            out.append(int(d))
    return out


def _has_worker(procs: list) -> bool:
    for pid in procs:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_real_sigint_to_the_process_group_during_kernel_builds(tmp_path):
    """Ctrl-C as a terminal sends it: SIGINT to the whole process group, while spawned build workers run."""
    from taso_tvm import zoo

    model = save(zoo.get_model("squeezenet"), tmp_path / "m.onnx")  # enough kernels for the build pool
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cost:\n  cache: ''\n  build_jobs: 2\n  build_timeout_s: 120\n")
    out = tmp_path / "out.onnx"
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "taso_tvm.cli", "optimize", str(model), "-o", str(out), "--config",
                          str(cfg), "--cost-backend", "tvm", "--no-time-check"], cwd=str(REPO), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and not _has_worker(_session_procs(p.pid)):
        time.sleep(0.1)
    assert p.poll() is None and _has_worker(_session_procs(p.pid)), "no build worker started"
    time.sleep(0.5)
    os.killpg(p.pid, signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    time.sleep(0.5)
    assert _session_procs(p.pid) == [], "a worker outlived the command"
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    if p.returncode == 130:
        assert lines == ["taso-tvm: interrupted"], stderr
        assert not out.exists()
    else:  # the interrupt landed in the search: the best graph so far was written
        assert p.returncode == 0 and out.exists(), (p.returncode, stderr)
    assert leftovers(tmp_path) == []
    assert not list(tmp_path.glob("taso_tvm_kernels_*")), "the kernels' temporary folder was left"


SLOW_CLEANUP = """
import sys, time
from pathlib import Path
import taso_tvm.onnx_io

def read_onnx(*a, **k):
    Path(sys.argv[1]).write_text("loading")
    try:
        time.sleep(60)  # the first Ctrl-C lands here
    finally:
        Path(sys.argv[1]).write_text("cleaning up")
        time.sleep(60)  # a slow cleanup: the second Ctrl-C must not wait for it

taso_tvm.onnx_io.read_onnx = read_onnx
from taso_tvm.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    marker = tmp_path / "phase"
    model = save(pair_model(), tmp_path / "m.onnx")
    p = subprocess.Popen([sys.executable, "-c", SLOW_CLEANUP, str(marker), "optimize", str(model), "-o",
                          str(tmp_path / "out.onnx")] + FAST, cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def wait_for(text):
        end = time.monotonic() + 60
        while time.monotonic() < end and p.poll() is None:
            if marker.exists() and marker.read_text() == text:
                return
            time.sleep(0.05)
        raise AssertionError(f"never reached {text!r}")

    wait_for("loading")
    os.killpg(p.pid, signal.SIGINT)
    wait_for("cleaning up")
    t = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    _, stderr = p.communicate(timeout=30)
    assert time.monotonic() - t < 5
    assert p.returncode == 130
    assert stderr.strip().splitlines() == ["taso-tvm: interrupted"]
    assert not (tmp_path / "out.onnx").exists() and leftovers(tmp_path) == []


def test_interrupt_while_compiling(tmp_path, monkeypatch, capsys):
    """`compile`: an interrupt in TVM's build leaves no library and no signature file."""
    import tvm

    monkeypatch.setattr(tvm, "compile", _interrupt)
    model = save(pair_model(), tmp_path / "m.onnx")
    rc, err, _ = run_main(["compile", model, "--target", "llvm", "--no-optimize", "-o", tmp_path / "m.so"], capsys)
    assert rc == 130
    assert_one_line(err, "interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
