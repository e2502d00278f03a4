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
    assert len(lines) >= 2 and all(isinstance(json.loads(x), dict) for x in lines)
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
    for bad in ['{"unit": ["2d", 0], "records": [[[{"os.system": "x"}], [], [], []]]}',
                '{"unit": ["2d", 0], "records": [[[], [], [{"bytes": "zz"}], []]]}', "[" * 100000,
                '{"unit": ["2d", 0.5], "records": []}']:
        with pytest.raises(CheckpointDataError):
            parse_unit_line(bad)
