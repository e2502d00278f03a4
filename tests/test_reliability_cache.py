"""The cost cache touches only what is its own: a damaged cache file it made may be moved aside; a directory, a
path below a file, a file that is not SQLite or another application's database is an error naming the path, and
is left byte for byte as it was."""
from __future__ import annotations

import sqlite3

import pytest
from reliability_util import assert_one_line, pair_model, run_main, save, snapshot

from taso_tvm.cost.cache import CostCache, CostCacheError
from taso_tvm.errors import CostError, TasoError

SCOPE = ("tvm", '{"kind": "llvm"}', "cpu:test:2t", "tvm=0.27")


def _refused(path, *words):
    with pytest.raises(CostCacheError) as e:
        CostCache(path).get_many(SCOPE, ["k"])
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    for w in words:
        assert w in msg
    assert isinstance(e.value, CostError) and isinstance(e.value, TasoError)


def test_a_directory_is_not_renamed(tmp_path):
    d = tmp_path / "costs.sqlite"
    d.mkdir()
    (d / "mine.txt").write_text("keep")
    before = snapshot(tmp_path)
    _refused(d, "is a directory")
    assert snapshot(tmp_path) == before


def test_below_a_regular_file(tmp_path):
    (tmp_path / "f").write_text("x")
    before = snapshot(tmp_path)
    _refused(tmp_path / "f" / "costs.sqlite", "is a file")
    assert snapshot(tmp_path) == before


def test_a_file_that_is_not_sqlite_is_left_alone(tmp_path):
    p = tmp_path / "costs.sqlite"
    p.write_bytes(b"my thesis draft\n" * 100)
    before = snapshot(tmp_path)
    _refused(p, "not a cost cache")
    assert snapshot(tmp_path) == before and p.read_bytes() == b"my thesis draft\n" * 100


def test_another_applications_database_is_left_alone(tmp_path):
    p = tmp_path / "app.db"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE contacts (name TEXT)")
    conn.execute("INSERT INTO contacts VALUES ('ada')")
    conn.commit()
    conn.close()
    data = p.read_bytes()
    _refused(p, "another application's", "contacts")
    assert p.read_bytes() == data and sorted(x.name for x in tmp_path.iterdir()) == ["app.db"]


def test_a_damaged_cache_file_is_moved_aside(tmp_path):
    p = tmp_path / "costs.sqlite"
    c = CostCache(p)
    c.put_many(SCOPE, [("k", "x", 1.0, "ok", "")])
    c.close()
    raw = bytearray(p.read_bytes())
    raw[100:4096] = b"\xff" * (4096 - 100)  # keep the SQLite header, damage the rest
    p.write_bytes(bytes(raw))
    c = CostCache(p)
    assert c.get_many(SCOPE, ["k"]) == {}
    c.put_many(SCOPE, [("k", "x", 2.0, "ok", "")])
    assert c.get_many(SCOPE, ["k"]) == {"k": 2.0}
    c.close()
    assert list(tmp_path.glob("costs.sqlite.corrupt-*"))


def test_an_empty_file_and_a_new_folder_are_fine(tmp_path):
    (tmp_path / "empty.sqlite").write_bytes(b"")
    for p in (tmp_path / "empty.sqlite", tmp_path / "new" / "deeper" / "c.sqlite"):
        c = CostCache(p)
        c.put_many(SCOPE, [("k", "x", 1.0, "ok", "")])
        assert c.get_many(SCOPE, ["k"]) == {"k": 1.0}
        c.close()


def test_the_cost_command_reports_a_bad_cache_in_one_line(tmp_path, capsys):
    save(pair_model(), tmp_path / "m.onnx")
    (tmp_path / "d").mkdir()
    rc, err, _ = run_main(["cost", tmp_path / "m.onnx", "--backend", "analytic", "--cache", tmp_path / "d"], capsys)
    assert rc == 2 and len(err) == 1 and "is a directory" in err[0]
    (tmp_path / "c.yaml").write_text("colour: red\n")
    rc, err, _ = run_main(["cost", tmp_path / "m.onnx", "--config", tmp_path / "c.yaml"], capsys)
    assert rc == 2 and len(err) == 1 and "unknown cost setting 'colour'" in err[0]


def test_compile_with_a_cache_directory(tmp_path, capsys):
    save(pair_model(), tmp_path / "m.onnx")
    (tmp_path / "d").mkdir()
    (tmp_path / "c.yaml").write_text(f"cost:\n  cache: {tmp_path / 'd'}\n")
    before = snapshot(tmp_path)
    rc, err, _ = run_main(["compile", tmp_path / "m.onnx", "--target", "llvm", "-o", tmp_path / "m.so", "--config",
                           tmp_path / "c.yaml"], capsys)
    assert rc == 2
    assert_one_line(err, "is a directory")
    assert snapshot(tmp_path) == before
