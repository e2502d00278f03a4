"""Files are data (issue #29): a checkpoint cannot name code, the CUDA stand-in is loaded only from a private folder,
hostile files (alias bombs, deep nesting, /dev/zero, FIFOs, folders) are one line and exit 2, and numeric flags are
range-checked before any work."""
from __future__ import annotations

import os
import pickle
import resource
import threading
import time
from pathlib import Path

import pytest
from reliability_util import FAST, pair_model, run_main, save, snapshot

GEN = ["rules", "generate", "--max-ops", "1", "--ops", "relu", "--kinds", "mat", "--jobs", "1"]


# ------------------------------------------------------------------------------------------ checkpoints
def _exploit(marker: Path) -> bytes:
    """An old-style (pickle) checkpoint whose loading runs `touch marker`: protocol 4 resolves the dotted name
    `os.system` inside a module under taso_tvm.rules.generate, which the old allow-list accepted."""
    def s(text: str) -> bytes:
        b = text.encode()
        return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE

    return (b"\x80\x04" + s("taso_tvm.rules.generate.checkpoint") + s("os.system") + b"\x93"  # STACK_GLOBAL
            + s(f"touch {marker}") + b"\x85R.")  # TUPLE1 REDUCE STOP


def test_pickle_checkpoint_exploit_does_not_run(tmp_path, capsys, caplog):
    """The exploit is live under pickle; as a checkpoint it is ignored with a warning, the run starts afresh and
    the command never runs."""
    marker = tmp_path / "pwned"
    payload = _exploit(marker)
    import taso_tvm.rules.generate.checkpoint  # noqa: F401 (the module the dotted name goes through)
    pickle.loads(payload)  # proof that the bytes run a command when unpickled
    assert marker.exists()
    marker.unlink()
    out = tmp_path / "gen.yaml"
    (tmp_path / "gen.yaml.ckpt").write_bytes(payload)
    rc, err, _ = run_main(GEN + ["-o", out], capsys)
    assert rc == 0 and out.exists() and not marker.exists()
    assert "not a checkpoint of this version" in caplog.text + "\n".join(err)


def test_checkpoint_resume_round_trip(tmp_path):
    """A run interrupted after some units resumes from the JSON-lines file (a cut-off last line redone) to the
    same rules as an uninterrupted run; the file is plain JSON lines."""
    import json

    from taso_tvm.rules.generate.driver import generate_rules

    kw = dict(ops=["relu", "add"], kinds=["mat"], jobs=1, use_cache=True)
    ref = generate_rules(2, **kw)

    class Stop(Exception):
        pass

    class Bar:
        def __init__(self, total, desc):
            self.desc, self.n = desc, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1, note=""):
            self.n += 1
            if self.desc == "enumerating" and self.n == 3:
                raise Stop

    out = tmp_path / "g.yaml"
    with pytest.raises(Stop):
        generate_rules(2, out=str(out), progress=Bar, **kw)
    ck = tmp_path / "g.yaml.ckpt"
    lines = ck.read_text().splitlines()
    assert len(lines) >= 2 and all(isinstance(json.loads(x.rpartition("\t")[0] or x), dict) for x in lines)
    ck.write_bytes(ck.read_bytes()[:-7])  # the last unit cut off while written
    again = generate_rules(2, out=str(out), **kw)
    assert again.counts["units_resumed"] == len(lines) - 2 and again.text == ref.text
    assert not ck.exists()


def test_checkpoint_records_round_trip_and_refuse_foreign_values():
    from taso_tvm.rules.generate.checkpoint import CheckpointDataError, parse_unit_line, unit_line
    from taso_tvm.rules.generate.enumerate import Record
    from taso_tvm.rules.generate.graphs import DimSum, GNode, ShapeForm

    recs = [Record((GNode("concat", (("axis", 1),), (("i", "a"), ("i", "b"))),
                    GNode("reshape", (("shape", ShapeForm("flatten")), ("d", DimSum((("a", 0),)))), (("n", 0, 0),))),
                   (("n", 1, 0),), (b"\x00\xff",), ("a", "b"))]
    assert parse_unit_line(unit_line(("2d", 3), recs)) == (("2d", 3), recs)
    import hashlib

    line = unit_line(("2d", 3), recs)
    with pytest.raises(CheckpointDataError, match="checksum"):
        parse_unit_line(line.replace('"a"', '"c"', 1))  # valid JSON, other graphs: the checksum tells
    for bad in ['{"unit": ["2d", 0], "records": [[[{"os.system": "x"}], [], [], []]]}',
                '{"unit": ["2d", 0], "records": [[[], [], [{"bytes": "zz"}], []]]}', "[" * 100000,
                '{"unit": ["2d", 0.5], "records": []}']:
        with pytest.raises(CheckpointDataError):
            parse_unit_line(f"{bad}\t{hashlib.sha256(bad.encode()).hexdigest()[:16]}\n")


# ------------------------------------------------------------------------------------------ the CUDA stand-in
def test_cuda_standin_builds_privately_and_loads(tmp_path, monkeypatch):
    """The default stand-in folder is under $XDG_CACHE_HOME, made 0700; the library built there loads."""
    import ctypes
    import stat

    from taso_tvm.runtime.cuda_build import DRIVER, standin_dir, standin_library

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = standin_library()
    assert path == standin_dir() / DRIVER and path.parent.is_relative_to(tmp_path / "cache")
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700 and path.is_file()
    lib = ctypes.CDLL(str(path))
    assert lib.cuModuleUnload() == 100  # CUDA_ERROR_NO_DEVICE
    assert standin_library() == path  # built once, checked every time


@pytest.mark.parametrize("case", ["folder mode", "folder owner", "library owner", "library writable", "link"])
def test_cuda_standin_not_ours_is_refused(tmp_path, case):
    """A stand-in folder or library someone else could have placed is refused in one line, never loaded."""
    from taso_tvm.errors import TasoError
    from taso_tvm.runtime.cuda_build import DRIVER, CudaBuildError, standin_library

    folder = tmp_path / "standin"
    folder.mkdir(mode=0o700)
    lib = folder / DRIVER
    lib.write_bytes(b"\x7fELF not a library: loading it would fail loudly")
    if case == "folder mode":
        folder.chmod(0o777)
    elif case == "folder owner":
        os.chown(folder, 12345, -1)
    elif case == "library owner":
        os.chown(lib, 12345, -1)
    elif case == "library writable":
        lib.chmod(0o666)
    else:
        lib.unlink()
        lib.symlink_to(tmp_path / "elsewhere.so")
    with pytest.raises(CudaBuildError, match="refusing the CUDA driver stand-in") as e:
        standin_library(folder)
    assert isinstance(e.value, TasoError) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------ hostile files
def _bomb(levels: int = 9) -> str:
    """A YAML alias bomb: `levels` lists of nine aliases of the one before (9**9 strings once expanded)."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    prev = "a"
    for i in range(1, levels):
        name = f"l{i}"
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    return "\n".join(lines) + "\n"


def _deep(levels: int = 400) -> str:
    return "- name: deep\n  source: " + "[" * levels + "x" + "]" * levels + "\n"


def _hostile(tmp_path: Path, kind: str) -> str:
    if kind == "bomb":
        p = tmp_path / "bomb.yaml"
        p.write_text(_bomb())
    elif kind == "deep":
        p = tmp_path / "deep.yaml"
        p.write_text(_deep())
    elif kind == "fifo":
        p = tmp_path / "pipe.onnx"
        os.mkfifo(p)
    elif kind == "dir":
        p = tmp_path / "folder.onnx"
        p.mkdir()
    else:
        return "/dev/zero"
    return str(p)


def _refused(tmp_path, capsys, argv, *words):
    """Exit 2, one line on stderr, nothing written, within seconds and a bounded memory growth."""
    before = snapshot(tmp_path)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    done: dict = {}
    th = threading.Thread(target=lambda: done.update(r=run_main(argv, capsys)), daemon=True)
    th.start()
    th.join(20)
    assert not th.is_alive(), f"{argv} blocked"
    rc, err, _ = done["r"]
    assert time.monotonic() - t0 < 10
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) < 1 << 20  # KiB (imports TVM; a bomb: GBs)
    assert rc == 2, (rc, err)
    assert len(err) == 1 and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0], (w, err)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind,words", [("bomb", ["aliases expand"]), ("deep", ["nested deeper than 64"])])
def test_hostile_rule_files(tmp_path, capsys, kind, words):
    bad = _hostile(tmp_path, kind)
    model = save(pair_model(), tmp_path / "m.onnx")
    _refused(tmp_path, capsys, ["rules", "verify", bad], *words)
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--rules", bad] + FAST, *words)
    (tmp_path / "cfg.yaml").write_text(f"rules: [{bad}]\n")
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--config", tmp_path / "cfg.yaml"]
             + FAST, *words)


def test_hostile_settings_files(tmp_path, capsys):
    bad = tmp_path / "bomb.yaml"
    bad.write_text(_bomb())
    model = save(pair_model(), tmp_path / "m.onnx")
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--config", bad] + FAST,
             "aliases expand", "bomb.yaml")
    bad.write_text("search:\n  budget: " + "[" * 400 + "]" * 400 + "\n")
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--config", bad] + FAST,
             "nested deeper")
    bad.write_text("search:\n  budget: " + "9" * 5000 + "\n")
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--config", bad] + FAST,
             "bad value")
    _refused(tmp_path, capsys, ["optimize", model, "-o", tmp_path / "out.onnx", "--config", "/dev/zero"] + FAST,
             "it is a device")


@pytest.mark.parametrize("kind", ["zero", "fifo", "dir"])
def test_hostile_model_files(tmp_path, capsys, kind):
    """/dev/zero, a FIFO (never opened: nothing blocks) and a folder as the model: refused by type before reading."""
    bad = _hostile(tmp_path, kind)
    why = {"zero": "it is a device", "fifo": "it is a FIFO", "dir": "it is a directory"}[kind]
    _refused(tmp_path, capsys, ["graph", bad], why)
    _refused(tmp_path, capsys, ["optimize", bad, "-o", tmp_path / "out.onnx"] + FAST, why)
    _refused(tmp_path, capsys, ["compile", bad, "--target", "llvm", "-o", tmp_path / "out.so"], why)


# ------------------------------------------------------------------------------------------ numeric flags
@pytest.mark.parametrize("flags", [["--time-cap", "0"], ["--time-cap", "nan"], ["--time-cap", "-1"],
                                   ["--budget", "9" * 5000], ["--alpha", "nan"], ["--alpha", "0.5"],
                                   ["--threads", "-1"], ["--time-limit", "inf"], ["--rtol", "-1"]])
def test_numeric_flags_refused_at_parse_time(tmp_path, capsys, flags):
    model = save(pair_model(), tmp_path / "m.onnx")
    before = snapshot(tmp_path)
    t0 = time.monotonic()
    rc, err, _ = run_main(["optimize", model, "-o", tmp_path / "out.onnx"] + flags, capsys)
    assert rc == 2 and time.monotonic() - t0 < 2
    assert any(flags[0] in line and "error" in line for line in err), err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("flags", [["--jobs", "0"], ["--time-budget", "-3"], ["--max-ops", "0"],
                                   ["--time-budget", "nan"]])
def test_generate_flags_refused_at_parse_time(tmp_path, capsys, flags):
    argv = ["rules", "generate", "--max-ops", "1", "-o", tmp_path / "g.yaml"] + flags
    rc, err, _ = run_main(argv, capsys)
    assert rc == 2 and any(flags[0] in line for line in err), err
    assert list(tmp_path.iterdir()) == []


def test_numeric_flag_types():
    import argparse

    from taso_tvm.cli.argtypes import alpha, nonneg_float, nonneg_int, positive_float, positive_int

    assert positive_int("3") == 3 and nonneg_int("0") == 0 and positive_float("0.5") == 0.5
    assert nonneg_float("0") == 0.0 and alpha("1.05") == 1.05
    for fn, text in [(positive_int, "0"), (nonneg_int, "-1"), (positive_int, "1" * 19), (positive_int, "x"),
                     (positive_float, "0"), (positive_float, "inf"), (nonneg_float, "-0.1"), (nonneg_float, "nan"),
                     (alpha, "0.99"), (alpha, "3.5"), (positive_float, "1" * 100)]:
        with pytest.raises(argparse.ArgumentTypeError):
            fn(text)


@pytest.mark.parametrize("text,words", [
    ("- name: x\n  doc: 2001-13-45\n  source: {y: relu(x)}\n  target: {y: relu(x)}\n", [":2:", "bad value"]),
    ("- &a [*a]\n", [":1:", "contains it"]),
    ("- name: x\n  doc: " + "9" * 5000 + "\n", [":2:", "bad value"]),
])
def test_rule_scalars_and_recursive_aliases(tmp_path, capsys, text, words):
    """Were internal errors (ValueError, RecursionError: exit 3) before the bounded loader."""
    bad = tmp_path / "r.yaml"
    bad.write_text(text)
    _refused(tmp_path, capsys, ["rules", "list", bad], *words)
