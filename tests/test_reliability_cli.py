"""Issue #15's table, row by row: each mistake gets one line and its exit status, and nothing is written or
moved. All in process through `taso_tvm.cli.main` (the console script is exercised in test_fuzz_cli)."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from reliability_util import FAST, assert_one_line, leftovers, pair_model, run_main, save, snapshot

WRONG_RULE = """\
- name: add_is_mul
  family: wrong
  doc: x + y = x * y (false)
  source:
    z: add(x, y)
  target:
    z: mul(x, y)
  verify:
    shapes: {x: [N], y: [N]}
"""


@pytest.fixture
def work(tmp_path):
    save(pair_model(), tmp_path / "m.onnx")
    return tmp_path


def _optimize(work, capsys, *extra, config=None):
    argv = ["optimize", work / "m.onnx", "-o", work / "out.onnx"] + FAST
    if config is not None:
        (work / "c.yaml").write_text(config)
        argv += ["--config", work / "c.yaml"]
    before = snapshot(work)
    rc, err, out = run_main(argv + list(extra), capsys)
    return rc, err, out, before


def _nothing_written(work, before):
    assert snapshot(work) == before, "a file was written, changed or moved"
    assert leftovers(work) == []


@pytest.mark.parametrize("config,words", [
    ("cost:\n  colour: red\n", ["unknown cost setting 'colour'"]),
    ("cost:\n  repeat: lots\n", ["'repeat'", "integer >= 1", "'lots'"]),
    ("cost:\n  threds: 2\n", ["'threds'", "did you mean 'threads'"]),
    ("serach: {budget: 0}\n", ["unknown setting 'serach'", "did you mean 'search'"]),
    ("frobnicate: 3\n", ["unknown setting 'frobnicate'"]),
    ("search: {budgte: 3}\n", ["'budgte'", "did you mean 'budget'"]),
    ("search: {budget: -1}\n", ["'budget'", ">= 0"]),
    ("search: {alpha: .nan}\n", ["'alpha'"]),
    ("threads: -3\n", ["'threads'", ">= 0", "-3"]),
    ("cost:\n  threads: -3\n", ["'threads'", ">= 0"]),
    ("cost:\n  min_repeat_ms: .inf\n", ["'min_repeat_ms'", "finite"]),
    ("cost:\n  roofline: {llvm: {peak_gflop: 3}}\n", ["did you mean 'peak_gflops'"]),
    ("[1, 2]\n", ["must be a mapping"]),
    ("search: [\n", ["invalid YAML"]),
    ("rules: 3\n", ["'rules' must be"]),
])
def test_bad_settings_one_line_exit_2(work, capsys, config, words):
    rc, err, _, before = _optimize(work, capsys, config=config)
    assert rc == 2
    assert_one_line(err, "error:", *words)
    _nothing_written(work, before)


def test_rule_file_problems(work, capsys):
    (work / "wrong.yaml").write_text(WRONG_RULE)
    (work / "unknown_op.yaml").write_text(WRONG_RULE.replace("mul(x, y)", "frobnicate(x, y)"))
    (work / "broken.yaml").write_text("- name: x\n  source: [[[\n")
    cases = [("rules: [missing.yaml]\n", ["missing.yaml", "does not exist"]),
             ("rules: broken.yaml\n", ["broken.yaml", "YAML"]),
             ("rules: unknown_op.yaml\n", ["unknown_op.yaml", "unknown operator 'frobnicate'"]),
             # refuted: an error with its counterexample, not a log line and a search with no rules
             ("rules: wrong.yaml\n", ["rule add_is_mul", "wrong.yaml:1", "refuted", "source", "target"]),
             ("rules: .\n", ["is not a file"])]
    for config, words in cases:
        rc, err, _, before = _optimize(work, capsys, config=config)
        assert rc == 2, (config, err)
        assert_one_line(err, *words)
        _nothing_written(work, before)


@pytest.mark.parametrize("extra,words", [
    (["-o", "nodir/out.onnx"], ["nodir", "does not exist"]),
    (["--report", "nodir/r.json"], ["nodir", "does not exist"]),
    (["--input-shapes", "x:[1,-3,8,8]"], ["x:[1,-3,8,8]", ">= 1"]),
    (["--input-shapes", "x:[0,3,8,8]"], [">= 1"]),
    (["--input-shapes", "x:[1,3,8,8],x:[1,3,8,8]"], ["'x' is given twice"]),
    (["--input-shapes", "y:[1,3,8,8]"], ["'y'", "not a graph input"]),
])
def test_bad_flags_one_line_exit_2(work, capsys, extra, words):
    cwd = os.getcwd()
    os.chdir(work)
    try:
        rc, err, _, before = _optimize(work, capsys, *extra)
    finally:
        os.chdir(cwd)
    assert rc == 2
    assert_one_line(err, *words)
    _nothing_written(work, before)


@pytest.mark.parametrize("extra,words", [
    (["--rtol", "nan", "--atol", "nan"], ["--rtol", "finite"]),
    (["--atol", "-1"], ["--atol", ">= 0"]),
    (["--alpha", "7"], ["--alpha", "[1, 3]"]),
])
def test_bad_numeric_flags_are_usage_errors(work, capsys, extra, words):
    """Numeric flags are range-checked while parsing (cli/argtypes.py): argparse's usage error, exit 2."""
    rc, err, _, before = _optimize(work, capsys, *extra)
    assert rc == 2 and "error: argument" in err[-1] and all(w in err[-1] for w in words), err
    _nothing_written(work, before)


def test_output_into_a_missing_folder_is_refused_before_the_search(work, capsys, monkeypatch):
    import taso_tvm.onnx_opt

    def no_search(*a, **k):
        raise AssertionError("the search ran")

    monkeypatch.setattr(taso_tvm.onnx_opt, "optimize_onnx", no_search)
    for cmd in (["optimize", work / "m.onnx", "-o", work / "no" / "o.onnx"] + FAST,
                ["compile", work / "m.onnx", "--target", "llvm", "-o", work / "no" / "o.so"]):
        before = snapshot(work)
        rc, err, _ = run_main(cmd, capsys)
        assert rc == 2
        assert_one_line(err, "does not exist")
        _nothing_written(work, before)


def test_output_equal_to_the_input_is_refused(work, capsys):
    """Issue #29: an output that names the input is refused before anything runs (it was written over it)."""
    before = snapshot(work)
    rc, err, out = run_main(["optimize", work / "m.onnx", "-o", work / "m.onnx"] + FAST, capsys)
    assert rc == 2
    assert_one_line(err, "is the same file as the model")
    _nothing_written(work, before)


def test_cost_cache_is_a_directory(work, capsys):
    cache = work / "mycache"
    cache.mkdir()
    (cache / "precious.txt").write_text("mine")
    rc, err, _, before = _optimize(work, capsys, config=f"cost:\n  cache: {cache}\n")
    assert rc == 2
    assert_one_line(err, str(cache), "is a directory")
    _nothing_written(work, before)  # the directory was not renamed to *.corrupt-...


def test_cost_cache_below_a_regular_file(work, capsys):
    (work / "afile").write_text("x")
    rc, err, _, before = _optimize(work, capsys, config=f"cost:\n  cache: {work / 'afile' / 'c.sqlite'}\n")
    assert rc == 2
    assert_one_line(err, "afile", "is a file")
    _nothing_written(work, before)


def test_cost_cache_that_is_not_ours(work, capsys, monkeypatch):
    """Through the environment variable too (the default config, the TVM cost backend)."""
    (work / "notes.txt").write_text("my notes, not a database\n")
    monkeypatch.setenv("TASO_TVM_COST_CACHE", str(work / "notes.txt"))
    before = snapshot(work)
    rc, err, _ = run_main(["optimize", work / "m.onnx", "-o", work / "out.onnx", "--cost-backend", "tvm",
                           "--no-time-check"], capsys)
    assert rc == 2
    assert_one_line(err, "notes.txt", "not a cost cache")
    _nothing_written(work, before)


def test_check_failure_is_exit_1(work, capsys, monkeypatch):
    import taso_tvm.cli.model
    from taso_tvm.runtime import check

    def refuse(*a, **k):
        raise check.CheckFailed("output 'y' differs from the original at 3 of 512 elements")

    monkeypatch.setattr(taso_tvm.cli.model, "compare", refuse)
    rc, err, _, before = _optimize(work, capsys, "--no-search")
    assert rc == 1
    assert_one_line(err, "check failed", "output 'y'")
    _nothing_written(work, before)


def test_a_bug_is_a_short_report_with_the_traceback_in_a_file(work, capsys, monkeypatch):
    import taso_tvm.onnx_opt

    def bug(*a, **k):
        return {}["no such key"]

    monkeypatch.setattr(taso_tvm.onnx_opt, "optimize_onnx", bug)
    monkeypatch.setenv("TASO_TVM_CRASH_DIR", str(work / "crashes"))
    before = snapshot(work)
    rc, err, _ = run_main(["optimize", work / "m.onnx", "-o", work / "out.onnx"] + FAST, capsys)
    assert rc == 3
    assert_one_line(err, "internal error", "KeyError", "crash-")
    crashes = list((work / "crashes").glob("crash-*.txt"))
    assert len(crashes) == 1
    text = crashes[0].read_text()
    assert "Traceback" in text and "def bug" not in err[0] and "in bug" in text
    assert not (work / "out.onnx").exists() and leftovers(work) == []
    del before


def test_numpy_warnings_stay_quiet_unless_verbose(work, capsys, monkeypatch):
    import taso_tvm.onnx_opt

    real = taso_tvm.onnx_opt.optimize_onnx

    def noisy(*a, **k):
        np.array([0.0]) / np.array([0.0])  # RuntimeWarning: invalid value encountered in divide
        warnings.warn("a library's warning")
        return real(*a, **k)

    monkeypatch.setattr(taso_tvm.onnx_opt, "optimize_onnx", noisy)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc, err, _ = run_main(["optimize", work / "m.onnx", "-o", work / "out.onnx"] + FAST, capsys)
    assert rc == 0 and err == [] and seen == [], (err, seen)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc, err, _ = run_main(["-v", "optimize", work / "m.onnx", "-o", work / "out2.onnx"] + FAST, capsys)
    assert rc == 0 and {w.category for w in seen} >= {RuntimeWarning, UserWarning}  # asked for: shown


def test_zoo_export_is_atomic_and_checked(tmp_path, capsys):
    rc, err, _ = run_main(["zoo", "export", "seed_example", "-o", tmp_path / "no" / "s.onnx"], capsys)
    assert rc == 2
    assert_one_line(err, "does not exist")
    rc, err, out = run_main(["zoo", "export", "seed_example", "-o", tmp_path / "s.onnx"], capsys)
    assert rc == 0 and (tmp_path / "s.onnx").stat().st_size > 0 and leftovers(tmp_path) == []
    rc, err, _ = run_main(["zoo", "export", "nosuchmodel", "-o", tmp_path / "t.onnx"], capsys)
    assert rc == 2 and len(err) == 1 and not (tmp_path / "t.onnx").exists()


def test_run_is_quiet_and_writes_outputs_atomically(tmp_path, capfd):
    """`taso-tvm run`: no TVM log lines before the result; --outputs written whole (a temporary file renamed)."""
    from taso_tvm.cli import main

    save(pair_model(), tmp_path / "m.onnx")
    assert main(["compile", str(tmp_path / "m.onnx"), "--target", "llvm", "--no-optimize",
                 "-o", str(tmp_path / "m.so")]) == 0
    capfd.readouterr()
    assert main(["run", str(tmp_path / "m.so"), "--outputs", str(tmp_path / "o.npz")]) == 0
    got = capfd.readouterr()
    assert got.err == "", got.err
    assert got.out.startswith("output 0: shape (1, 8, 8, 8)")
    assert np.load(tmp_path / "o.npz")[pair_model().graph.output[0].name].shape == (1, 8, 8, 8)
    assert leftovers(tmp_path) == []
    assert main(["run", str(tmp_path / "m.onnx")]) == 2  # not a TVM module: one line
    assert len(capfd.readouterr().err.strip().splitlines()) == 1


def test_run_outputs_into_a_missing_folder_and_an_os_error(tmp_path, capsys, monkeypatch):
    save(pair_model(), tmp_path / "m.onnx")
    rc, err, _ = run_main(["compile", tmp_path / "m.onnx", "--target", "llvm", "--no-optimize", "-o",
                           tmp_path / "m.so"], capsys)
    assert rc == 0, err
    rc, err, _ = run_main(["run", tmp_path / "m.so", "--outputs", tmp_path / "no" / "o.npz"], capsys)
    assert rc == 2
    assert_one_line(err, "does not exist")

    import taso_tvm.fileio

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "o.npz"))

    monkeypatch.setattr(taso_tvm.fileio, "atomic_write", full)
    rc, err, _ = run_main(["run", tmp_path / "m.so", "--outputs", tmp_path / "o.npz"], capsys)
    assert rc == 2
    assert_one_line(err, "No space left on device", "o.npz")
