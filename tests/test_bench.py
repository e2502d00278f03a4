"""`taso-tvm bench`: one run times the ONNX variants and the TVM builds of a real file, checks each against ONNX
Runtime, and writes the table, JSON and a chart."""
import json

import pytest

from reliability_util import pair_model, run_main, save


def test_bench_times_every_variant_of_a_file(tmp_path, capsys):
    path = save(pair_model(), tmp_path / "pair.onnx")
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    argv = ["bench", path, "--time-cap", "2", "--guard-cap", "2", "--cost-backend", "analytic",
            "--json", out_json]
    try:
        import matplotlib  # noqa: F401
        argv += ["--plot", out_png]
    except ImportError:
        out_png = None
    rc, err, table = run_main(argv, capsys)
    assert rc == 0, err
    assert "| pair |" in table and "ORT taso+onnxsim" in table and "TVM default" in table
    row = json.loads(out_json.read_text())["rows"][0]
    assert row["model"] == "pair" and row["nodes"] == 5 and row["searched_share"] == 1.0
    for name in ("original", "onnxsim", "taso", "taso+onnxsim"):
        col = row["ort"][name]
        assert col["note"] == "" and col["median_ms"] > 0, (name, col)
    assert row["ort"]["original"]["ratio"] == 1.0
    assert row["ort_rounds"] >= 2 and row["search_cold_s"] > 0 and row["search_warm_s"] > 0
    tvm = row["tvm"]
    assert tvm["default"]["median_ms"] > 0 and tvm["taso"]["median_ms"] > 0, tvm
    assert tvm["taso"]["note"] == ""  # built, ran and matched ONNX Runtime
    for name in ("default", "taso-schedule", "taso"):  # each timed against the original in ONNX Runtime
        assert tvm[name]["ratio"] > 0 and tvm[name]["ci"] != [1.0, 1.0], (name, tvm[name])
    if out_png is not None:
        assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_names_a_bad_model_in_one_line(tmp_path, capsys):
    rc, err, _ = run_main(["bench", tmp_path / "missing.onnx", "--no-tvm"], capsys)
    assert rc == 2 and len(err) == 1 and "missing.onnx" in err[0] and "neither a zoo model" in err[0]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    rc, err, _ = run_main(["bench", bad, "--no-tvm"], capsys)
    assert rc == 2 and "bad.onnx" in err[0] and "not a readable ONNX file" in err[0]


@pytest.mark.slow
def test_bench_runs_two_zoo_models_end_to_end(tmp_path, capsys):
    out_json = tmp_path / "b.json"
    rc, err, table = run_main(["bench", "seed_example", "nasrnn", "--time-cap", "1", "--guard-cap", "1",
                               "--cost-backend", "analytic", "--json", out_json], capsys)
    assert rc == 0, err
    rows = {r["model"]: r for r in json.loads(out_json.read_text())["rows"]}
    assert set(rows) == {"seed_example", "nasrnn"} and "| nasrnn |" in table
    for r in rows.values():
        for runtime in ("ort", "tvm"):
            for name, col in r[runtime].items():
                assert col["note"] == "" and col["median_ms"] > 0, (r["model"], runtime, name, col)
    assert rows["nasrnn"]["ops_before"] > rows["nasrnn"]["ops_after"]  # the matmul merges are found
