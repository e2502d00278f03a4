"""Fuzzing the command line: mutated models (truncations, bit flips, broken graphs, wrong dtypes, cycles), settings
files and rule files, run through `taso_tvm.cli.main` in process (a handful through the real `taso-tvm` console
script). Never a traceback or a bug report (exit 3), always one line for an error, never a partial or invalid
output file. The default share is small and fast; `-m slow` runs a larger corpus."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from reliability_util import FAST, leftovers, pair_model, run_main

REPO = Path(__file__).resolve().parents[1]
FLAGS = FAST + ["--budget", "3"]

GOOD_RULE = """\
- name: relu_twice
  family: fuzz
  doc: relu(relu(x)) = relu(x)
  source:
    y: relu(relu(x))
  target:
    y: relu(x)
  verify:
    shapes: {x: [N]}
"""


# ----------------------------------------------------------------------------------------- model mutations
def _seed_models() -> list:
    from taso_tvm import zoo

    return [pair_model(), zoo.get_model("seed_example")]


def _graph_mutations(m: onnx.ModelProto, rng: np.random.Generator) -> list:
    """(name, model) pairs of structurally broken variants of `m`."""
    out = []
    g = m.graph

    def variant(name, fn):
        c = copy.deepcopy(m)
        fn(c.graph, c)
        out.append((name, c))

    n = len(g.node)
    i = int(rng.integers(n))
    variant("drop node", lambda g, c: g.node.remove(g.node[i]))
    variant("dangling input", lambda g, c: g.node[i].input.__setitem__(0, "nowhere"))
    variant("cycle", lambda g, c: g.node[0].input.__setitem__(0, g.node[-1].output[0]))
    variant("self loop", lambda g, c: g.node[i].input.__setitem__(0, g.node[i].output[0]))
    variant("duplicate output", lambda g, c: g.node[-1].output.__setitem__(0, g.node[0].output[0]))
    variant("unknown op", lambda g, c: setattr(g.node[i], "op_type", "Frobnicate"))
    variant("custom domain op", lambda g, c: (setattr(g.node[i], "domain", "com.example")))
    variant("no outputs", lambda g, c: g.ClearField("output"))
    variant("no nodes", lambda g, c: g.ClearField("node"))
    variant("output not produced", lambda g, c: setattr(g.output[0], "name", "ghost"))
    for dt in (TensorProto.INT64, TensorProto.STRING, TensorProto.BOOL, TensorProto.UNDEFINED, TensorProto.FLOAT16,
               TensorProto.COMPLEX64):
        variant(f"input dtype {dt}", lambda g, c, dt=dt: setattr(g.input[0].type.tensor_type, "elem_type", dt))
    if g.initializer:
        variant("initializer dtype", lambda g, c: setattr(g.initializer[0], "data_type", TensorProto.DOUBLE))
        variant("initializer dims", lambda g, c: g.initializer[0].dims.__setitem__(0, 999))
        variant("initializer truncated data", lambda g, c: setattr(g.initializer[0], "raw_data",
                                                                  g.initializer[0].raw_data[:7]))
    variant("negative input dim", lambda g, c: setattr(g.input[0].type.tensor_type.shape.dim[0], "dim_value", -4))
    variant("zero input dim", lambda g, c: setattr(g.input[0].type.tensor_type.shape.dim[-1], "dim_value", 0))
    variant("rank-less input", lambda g, c: g.input[0].type.tensor_type.ClearField("shape"))
    variant("opset 1", lambda g, c: setattr(c.opset_import[0], "version", 1))
    variant("opset 99", lambda g, c: setattr(c.opset_import[0], "version", 99))
    variant("no opset", lambda g, c: c.ClearField("opset_import"))
    variant("ir version 99", lambda g, c: setattr(c, "ir_version", 99))
    variant("float attribute", lambda g, c: g.node[i].attribute.append(helper.make_attribute("pads", [0.5, 1.5])))
    variant("bad axis", lambda g, c: g.node[i].attribute.append(helper.make_attribute("axis", 17)))
    variant("empty input name", lambda g, c: g.node[i].input.__setitem__(0, ""))
    return out


def _byte_mutations(data: bytes, rng: np.random.Generator, count: int) -> list:
    out = [("empty", b""), ("one byte", data[:1]), ("text", b"ir_version: 8\ngraph {\n")]
    for k in range(count):
        kind = k % 3
        b = bytearray(data)
        if kind == 0:
            cut = int(rng.integers(1, len(b)))
            out.append((f"truncated at {cut}", bytes(b[:cut])))
            continue
        if kind == 1:
            for _ in range(int(rng.integers(1, 8))):
                pos = int(rng.integers(len(b)))
                b[pos] ^= 1 << int(rng.integers(8))
            out.append(("bit flips", bytes(b)))
            continue
        pos = int(rng.integers(0, min(len(b), 400)))  # the header: field tags and lengths
        b[pos:pos + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        out.append((f"header bytes at {pos}", bytes(b)))
    return out


# mutations that kill the process in native code (not catchable in Python): run apart, in a subprocess
NATIVE_CRASHES = {"empty input name": "TVM's ONNX frontend segfaults importing a Concat whose input name is empty; "
                                      "the partition refuses such nodes before probing them (checked in a subprocess)"}


def model_corpus(n_bytes: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for m in _seed_models():
        out += [(name, c.SerializeToString()) for name, c in _graph_mutations(m, rng) if name not in NATIVE_CRASHES]
        out += _byte_mutations(m.SerializeToString(), rng, n_bytes)
    return out


# ----------------------------------------------------------------------------------------- settings and rules
def config_corpus(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    keys = ["search", "cost", "rules", "serach", "budget", "alpha", "threads", "repeat", "cache", "backend",
            "target", "roofline", "time_limit", "region_size", "colour", "progress", "number"]
    values = ["0", "-1", "3", "1.5", ".nan", ".inf", "lots", "true", "null", "[]", "{}", "[1, 2]", "{budget: 2}",
              "llvm", "cuda", "analytic", "'{\"kind\": \"rocm\"}'", "''", "/", "/dev/null", "missing.yaml",
              "{llvm: {peak_gflops: -1}}", "{alpha: 9}", "{region_size: 2}", "{time_limit: 0}"]
    out = ["", "{}", "search:\n", "search: {budget: 2}\n", ": : :\n", "search: [\n", "\x00\x01\x02", "- 1\n- 2\n",
           "cost:\n  backend: analytic\n"]
    for _ in range(n):
        lines = []
        for _ in range(int(rng.integers(1, 4))):
            k = keys[int(rng.integers(len(keys)))]
            if rng.random() < 0.4:
                k2 = keys[int(rng.integers(len(keys)))]
                lines.append(f"{k}:\n  {k2}: {values[int(rng.integers(len(values)))]}")
            else:
                lines.append(f"{k}: {values[int(rng.integers(len(values)))]}")
        out.append("\n".join(lines) + "\n")
    return out


def rule_corpus(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    swaps = [("relu(x)", "frob(x)"), ("relu(relu(x))", "relu(relu(x)"), ("y:", "y"), ("x: [N]", "x: [-1]"),
             ("relu(x)", "sigmoid(x)"), ("name: relu_twice", "name: 3"), ("source:", "sauce:"),
             ("relu(x)", "conv2d(x, x, groups=0)"), ("{x: [N]}", "{x: [N, N, N, N, N, N, N, N, N]}"),
             ("relu(x)", "add(x, 1 / 0)"), ("relu(x)", "relu(z)"), ("- name", "name")]
    out = [GOOD_RULE, "", "[]", "- 3\n", GOOD_RULE + GOOD_RULE]
    for _ in range(n):
        text = GOOD_RULE
        for _ in range(int(rng.integers(1, 3))):
            a, b = swaps[int(rng.integers(len(swaps)))]
            text = text.replace(a, b, 1)
        if rng.random() < 0.3:
            text = text[:int(rng.integers(1, len(text)))]
        out.append(text)
    return out


# ----------------------------------------------------------------------------------------- the checks
def _valid(path: Path) -> bool:
    try:
        onnx.checker.check_model(onnx.load(str(path)))
        return True
    except Exception:  # noqa: BLE001  (the checker raises several types)
        return False


def _check_outcome(rc: int, err: list, folder: Path, out: Path, what: str, tally: Counter,
                   model: Path = None) -> None:
    tally[rc] += 1
    assert rc in (0, 1, 2), f"{what}: exit {rc}: {err}"
    assert not any("Traceback" in line for line in err), f"{what}: {err}"
    err = [line for line in err if not line.startswith("WARNING ")]  # a warning of ours is one log line
    if rc != 0:
        assert len(err) == 1 and err[0].startswith("taso-tvm: "), f"{what}: {err}"
        assert not out.exists(), f"{what}: exit {rc} but {out.name} was written"
    else:
        onnx.load(str(out))  # whole
        if model is None or _valid(model):  # valid in, valid out (an invalid model we pass through stays so)
            assert _valid(out), f"{what}: the output is not valid ONNX"
        else:
            tally["invalid input passed through"] += 1
            same = onnx.load_model_from_string(out.read_bytes()) == onnx.load_model_from_string(model.read_bytes())
            assert same, f"{what}: an invalid model was changed"
        out.unlink()
    assert leftovers(folder) == [], f"{what}: temporary files left"


def _fuzz_models(tmp_path: Path, capsys, corpus: list) -> Counter:
    tally: Counter = Counter()
    out = tmp_path / "out.onnx"
    for k, (name, data) in enumerate(corpus):
        model = tmp_path / "m.onnx"
        model.write_bytes(data)
        rc, err, _ = run_main(["optimize", model, "-o", out] + FLAGS, capsys)
        _check_outcome(rc, err, tmp_path, out, f"model #{k} ({name})", tally, model)
    return tally


def _fuzz_settings(tmp_path: Path, capsys, configs: list, rules: list) -> Counter:
    tally: Counter = Counter()
    model = tmp_path / "m.onnx"
    model.write_bytes(pair_model().SerializeToString())
    out = tmp_path / "out.onnx"
    for k, text in enumerate(configs):
        (tmp_path / "c.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
        rc, err, _ = run_main(["optimize", model, "-o", out, "--config", tmp_path / "c.yaml"] + FLAGS, capsys)
        _check_outcome(rc, err, tmp_path, out, f"config #{k} {text!r}", tally)
    for k, text in enumerate(rules):
        (tmp_path / "r.yaml").write_text(text)
        (tmp_path / "c.yaml").write_text("rules: r.yaml\n")
        rc, err, _ = run_main(["optimize", model, "-o", out, "--config", tmp_path / "c.yaml"] + FLAGS, capsys)
        _check_outcome(rc, err, tmp_path, out, f"rule file #{k} {text!r}", tally)
    return tally


def test_fuzz_models(tmp_path, capsys):
    corpus = model_corpus(n_bytes=40)
    tally = _fuzz_models(tmp_path, capsys, corpus)
    print(f"\n{len(corpus)} mutated models: exit statuses {dict(tally)}")
    assert sum(tally[rc] for rc in (0, 1, 2)) == len(corpus) >= 120


@pytest.mark.slow  # room in the default suite (issue 35); test_fuzz_models stays
def test_fuzz_settings_and_rules(tmp_path, capsys):
    configs, rules = config_corpus(40), rule_corpus(12)
    tally = _fuzz_settings(tmp_path, capsys, configs, rules)
    print(f"\n{len(configs)} configs, {len(rules)} rule files: exit statuses {dict(tally)}")
    assert tally[2] > len(configs) // 2


def _console_script() -> str:
    exe = shutil.which("taso-tvm") or str(Path(sys.executable).with_name("taso-tvm"))
    if not os.path.exists(exe):
        pytest.skip("the taso-tvm console script is not installed")
    return exe


@pytest.mark.slow  # the console script's wiring is tested by test_cli; this re-runs the fuzz cases through it
def test_fuzz_through_the_console_script(tmp_path):
    """A handful through the real entry point (a fresh process, real stderr, TVM's C++ logging on fd 2)."""
    exe = _console_script()
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's package, whatever the install points at
    rng = np.random.default_rng(7)
    data = pair_model().SerializeToString()
    cases = [("truncated", data[:len(data) // 2]), ("bit flips", _byte_mutations(data, rng, 2)[-1][1]),
             ("cycle", [c for n, c in _graph_mutations(pair_model(), rng) if n == "cycle"][0].SerializeToString()),
             ("input dtype", [c for n, c in _graph_mutations(pair_model(), rng)
                              if n == f"input dtype {TensorProto.STRING}"][0].SerializeToString()),
             ("fine", data)]
    out = tmp_path / "out.onnx"
    tally: Counter = Counter()
    for name, blob in cases:
        (tmp_path / "m.onnx").write_bytes(blob)
        p = subprocess.run([exe, "optimize", str(tmp_path / "m.onnx"), "-o", str(out)] + FLAGS, env=env,
                           capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
        err = [line for line in p.stderr.splitlines() if line.strip()]
        _check_outcome(p.returncode, err, tmp_path, out, f"console script: {name}", tally, tmp_path / "m.onnx")
    assert tally[0] >= 1 and tally[2] >= 2, tally


@pytest.mark.slow  # room in the default suite (issue 35)
def test_native_crash_cases_in_a_subprocess(tmp_path):
    exe = _console_script()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rng = np.random.default_rng(0)
    for name, m in _graph_mutations(pair_model(), rng):
        if name not in NATIVE_CRASHES:
            continue
        (tmp_path / "m.onnx").write_bytes(m.SerializeToString())
        p = subprocess.run([exe, "optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx")] + FLAGS,
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 2), f"{name}: exit {p.returncode}"
        assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_fuzz_bigger_corpus(tmp_path, capsys):
    corpus = model_corpus(n_bytes=300, seed=1)
    tally = _fuzz_models(tmp_path, capsys, corpus)
    tally += _fuzz_settings(tmp_path, capsys, config_corpus(300, seed=1), rule_corpus(150, seed=1))
    print(f"\nexit statuses {dict(tally)}")
