"""Fuzzing the readers (issue #29) with hypothesis: valid inputs (an ONNX model, a rule file, a settings file, a
generator checkpoint) mutated by byte flips, truncations, insertions and deletions, through the real entry points
(`graph MODEL`, `rules list FILE`, the settings reader, the checkpoint reader). Every outcome is a result or exit
1/2 with one line: never exit 3, an uncaught exception or a signal, never a changed input, each in seconds.
tests/test_fuzz_cli.py mutates models structurally and runs whole commands; this file mutates bytes at the readers.
The default run is small; `-m slow` runs many more examples."""
from __future__ import annotations

import os
import resource
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from reliability_util import run_main

REPO = Path(__file__).resolve().parents[1]
FAST = dict(max_examples=25, deadline=5000, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SLOW = dict(FAST, max_examples=400, derandomize=False)
MEMORY_KIB = 1 << 20  # growth of the test process over a whole run (TVM's import included)
TOKENS = [b"&a ", b"*a", b"[", b"]", b"{", b"}", b": ", b"\n", b"- ", b"!!python/object/apply:os.system ['true']",
          b"!!binary", b"9" * 5000, b"2001-13-45", b"\x00", b"\xff\xfe", b"\"", b"'"]


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """`seed` with one to four byte-level edits."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=8))
        else:
            del data[i:i + draw(st.integers(1, 32))]
    return bytes(data)


def _model_bytes() -> bytes:
    from taso_tvm import zoo

    return zoo.get_model("seed_example").SerializeToString()


RULE_SEED = (REPO / "taso_tvm" / "rules" / "library" / "fusion.yaml").read_bytes()
SETTINGS_SEED = (REPO / "configs" / "cpu.yaml").read_bytes() + b"search: {alpha: 1.05, budget: 3}\nrules: [library]\n"


def _checkpoint_seed() -> tuple:
    """(bytes of a finished checkpoint, its settings' digest, its units)."""
    from taso_tvm.rules.generate.checkpoint import Checkpoint
    from taso_tvm.rules.generate.driver import _no_progress, enumerate_all, make_settings

    s = make_settings(2, ops=["relu", "add"], kinds=["mat"])
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.ckpt"
        enumerate_all(s, 1, Checkpoint(path, s.digest()), _no_progress)
        data = path.read_bytes()
        ck = Checkpoint(path, s.digest())
        units = ck.load()
        ck.close()
    return data, s.digest(), units


_CKPT: dict = {}


def _ckpt() -> tuple:
    if not _CKPT:
        _CKPT["seed"] = _checkpoint_seed()
    return _CKPT["seed"]


class _Run:
    """One mutated file in a private folder, and the checks of an outcome."""

    def __init__(self, data: bytes, name: str):
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / name
        self.path.write_bytes(data)
        self.data, self.stat = data, os.stat(self.path)

    def unchanged(self) -> None:
        st = os.stat(self.path)
        assert self.path.read_bytes() == self.data and st.st_mtime_ns == self.stat.st_mtime_ns
        assert sorted(os.listdir(self.dir.name)) == [self.path.name]  # nothing written beside it

    def close(self) -> None:
        self.dir.cleanup()


def _cli_outcome(argv: list, capsys) -> None:
    rc, err, _ = run_main(argv, capsys)
    assert rc in (0, 1, 2), (rc, err)
    if rc:
        assert len(err) == 1 and "Traceback" not in err[0], err


def _check_model(data: bytes, capsys) -> None:
    r = _Run(data, "m.onnx")
    try:
        _cli_outcome(["graph", r.path], capsys)
        r.unchanged()
    finally:
        r.close()


def _check_rules(data: bytes, capsys) -> None:
    r = _Run(data, "rules.yaml")
    try:
        _cli_outcome(["rules", "list", r.path], capsys)
        r.unchanged()
    finally:
        r.close()


def _check_settings(data: bytes) -> None:
    from taso_tvm.errors import TasoError
    from taso_tvm.relay_pass.settings import resolve_settings

    r = _Run(data, "cfg.yaml")
    try:
        try:
            resolve_settings(str(r.path))
        except TasoError as e:
            assert e.exit_code in (1, 2) and "\n" not in str(e).strip(), str(e)
        r.unchanged()
    finally:
        r.close()


def _check_checkpoint(data: bytes) -> None:
    """The reader never raises on a regular file: it resumes a prefix of the units (the damaged rest is redone)
    or starts afresh, and the file it leaves is a valid checkpoint of those units."""
    from taso_tvm.rules.generate.checkpoint import Checkpoint

    _seed, digest, units = _ckpt()
    r = _Run(data, "g.ckpt")
    try:
        ck = Checkpoint(r.path, digest)
        got = ck.load()
        ck.close()
        assert got == units[:len(got)]
        ck = Checkpoint(r.path, digest)
        assert ck.load() == got  # what it kept reads back the same
        ck.close()
    finally:
        r.close()


def _sample_seed() -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, b=np.ones((2, 3), np.float32), a=np.arange(6, dtype=np.float32).reshape(2, 3))
    return buf.getvalue()


SAMPLE_SEED = _sample_seed()
SIGNATURE_SEED = (b'{"format": "taso-tvm-library/1", "target": "llvm", "size": 16, "sha256": "00", "inputs": '
                  b'[{"name": "a", "shape": [2, "N"], "dtype": "float32"}], "outputs": ["y"], '
                  b'"example_shapes": {"a": [2, 3]}, "integer_high": {}}')


def _check_sample(data: bytes) -> None:
    """A sample is read as data and matched by name: the result, or a one-line SampleError."""
    from taso_tvm.runtime.samples import InputSpec, SampleError, match_sample, read_sample

    r = _Run(data, "s.npz")
    try:
        try:
            got = match_sample(read_sample(str(r.path)), [InputSpec("a", (2, 3), "float32"),
                                                          InputSpec("b", (2, "N"), "float32")], "inputs")
            assert list(got) == ["a", "b"]
        except SampleError as e:
            assert e.exit_code == 2 and "\n" not in str(e).strip(), str(e)
        r.unchanged()
    finally:
        r.close()


def _check_signature(data: bytes) -> None:
    """A signature file beside a library is read as data: parsed, or one line (the library is never loaded)."""
    from taso_tvm.runtime.library import LibraryError, check_library

    r = _Run(data, "m.so.inputs.json")
    lib = r.path.parent / "m.so"
    lib.write_bytes(b"\x7fELF\x02" + b"\0" * 11)
    try:
        with pytest.raises(LibraryError) as err:  # the stand-in library matches no signature
            check_library(str(lib))
        assert "\n" not in str(err.value).strip()
        assert r.path.read_bytes() == r.data
    finally:
        lib.unlink()
        r.close()


@pytest.fixture(scope="module", autouse=True)
def _memory_bound():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < MEMORY_KIB


MODEL_SEED = _model_bytes()


@settings(**FAST)
@given(data=mutated(MODEL_SEED))
def test_fuzz_model_reader(data, capsys):
    _check_model(data, capsys)


@settings(**FAST)
@given(data=mutated(RULE_SEED))
def test_fuzz_rule_reader(data, capsys):
    _check_rules(data, capsys)


@pytest.mark.slow  # room in the default suite (issue 35): the model and rule readers' fuzz stays
@settings(**FAST)
@given(data=mutated(SETTINGS_SEED))
def test_fuzz_settings_reader(data):
    _check_settings(data)


@settings(**FAST)
@given(data=st.data())
def test_fuzz_checkpoint_reader(data):
    _check_checkpoint(data.draw(mutated(_ckpt()[0])))


@settings(**FAST)
@given(data=mutated(SAMPLE_SEED))
def test_fuzz_sample_reader(data):
    _check_sample(data)


@settings(**FAST)
@given(data=mutated(SIGNATURE_SEED))
def test_fuzz_signature_reader(data):
    _check_signature(data)


@pytest.mark.slow
@settings(**SLOW)
@given(data=mutated(SAMPLE_SEED) | mutated(SIGNATURE_SEED))
def test_fuzz_sample_and_signature_long(data):
    _check_sample(data)
    _check_signature(data)


@pytest.mark.slow
@settings(**SLOW)
@given(data=mutated(MODEL_SEED))
def test_fuzz_model_reader_long(data, capsys):
    _check_model(data, capsys)


@pytest.mark.slow
@settings(**SLOW)
@given(data=mutated(RULE_SEED))
def test_fuzz_rule_reader_long(data, capsys):
    _check_rules(data, capsys)


@pytest.mark.slow
@settings(**SLOW)
@given(data=mutated(SETTINGS_SEED))
def test_fuzz_settings_reader_long(data):
    _check_settings(data)


@pytest.mark.slow
@settings(**SLOW)
@given(data=st.data())
def test_fuzz_checkpoint_reader_long(data):
    _check_checkpoint(data.draw(mutated(_ckpt()[0])))
