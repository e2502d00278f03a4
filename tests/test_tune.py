"""`taso-tvm compile --tune`: MetaSchedule tuning on top of the CPU schedules (taso_tvm.schedule.tune).

The fast tests check the command line's settings and one-line errors; the slow one tunes a 64x64 matmul + relu
end to end with a few real trials."""
import os
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.cli import main
from taso_tvm.schedule.tune import BASELINES_FILE, TaskResult, TuneError, prepare_db_dir

N = 64


def matmul_relu(path, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((N, N)).astype("float32")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                          "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, N])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [N, N])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return w


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mm.onnx"
    matmul_relu(path)
    return path


def one_line_error(capsys, needle):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    return err


@pytest.mark.parametrize("bad", ["many", "-3", "2.5"])
def test_bad_trial_counts_are_usage_errors(model, tmp_path, bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", str(model), "--target", "llvm", "--tune", bad, "-o", str(tmp_path / "m.so")])
    assert e.value.code == 2
    assert "--tune" in capsys.readouterr().err


def test_tune_on_a_non_llvm_target_is_one_line(model, tmp_path, capsys):
    assert main(["compile", str(model), "--target", "cuda", "--tune", "4", "-o", str(tmp_path / "m.so")]) == 2
    one_line_error(capsys, "--tune supports llvm targets only")
    assert not (tmp_path / "m.so").exists()


def test_tune_with_no_schedule_and_db_without_tune_are_one_line(model, tmp_path, capsys):
    so = str(tmp_path / "m.so")
    assert main(["compile", str(model), "--target", "llvm", "--tune", "4", "--no-schedule", "-o", so]) == 2
    one_line_error(capsys, "drop --no-schedule")
    assert main(["compile", str(model), "--target", "llvm", "--tuning-db", str(tmp_path / "db"), "-o", so]) == 2
    one_line_error(capsys, "--tuning-db goes with --tune")


def test_missing_metaschedule_dependency_is_one_line(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "xgboost", None)  # `import xgboost` now fails as if it were not installed
    assert main(["compile", str(model), "--target", "llvm", "--tune", "4", "-o", str(tmp_path / "m.so")]) == 2
    err = one_line_error(capsys, "pip install 'taso-tvm[tune]'")
    assert err.startswith("taso-tvm: error: --tune needs MetaSchedule's dependencies (missing: xgboost")
    assert not (tmp_path / "m.so").exists()


def test_database_folder_is_created_or_refused(tmp_path):
    made = prepare_db_dir(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir() and made == str(tmp_path / "a" / "b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TuneError, match="is not a folder"):
        prepare_db_dir(str(tmp_path / "file"))


def test_a_task_uses_the_tuned_schedule_only_when_it_measured_faster():
    assert TaskResult("t", 1, baseline=2e-5, best_tuned=1e-5).uses_tuned
    assert not TaskResult("t", 1, baseline=1e-5, best_tuned=2e-5).uses_tuned
    assert not TaskResult("t", 1, baseline=1e-5, best_tuned=1e-5).uses_tuned
    assert not TaskResult("t", 1, baseline=1e-5).uses_tuned


@pytest.mark.slow
def test_tuning_end_to_end_on_a_matmul(tmp_path, capsys):
    """A few real trials: the database holds measured records, the build applies them, outputs match NumPy, and a
    second compile with the same database runs no trial."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm_ffi import structural_equal

    from taso_tvm.runtime.check import compare
    from taso_tvm.tvmc import vm_outputs
    from taso_tvm.cli.common import parse_target
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.schedule.tune import apply_database, build_tuned, fused_module, tuned_target

    path, db = tmp_path / "mm.onnx", tmp_path / "db"
    w = matmul_relu(path)
    mod = load_onnx(str(path))
    target = parse_target("llvm")
    t0 = time.monotonic()
    ex, report = build_tuned(mod, target, 4, str(db), threads=2)
    first = time.monotonic() - t0
    assert report.trials_run >= 4 and [t.trials for t in report.tasks] == [report.trials_run]
    sub = report.db_dir  # the folder for this CPU and thread count inside the database folder
    assert os.path.dirname(sub) == str(db) and os.path.basename(sub).endswith("-2c")
    records = ms.database.JSONDatabase(work_dir=sub).get_all_tuning_records()
    measured = [r for r in records if r.run_secs is not None and max(float(s) for s in r.run_secs) < 1e9]
    assert len(measured) >= 2  # our schedule's record and at least one measured MetaSchedule candidate
    assert os.path.exists(os.path.join(sub, BASELINES_FILE)) and report.tasks[0].baseline is not None

    # the build applies the database: every PrimFunc is the best record's schedule, none is left to CpuSchedule
    tt = tuned_target(target, 2)
    fused = fused_module(mod, tt)
    with tt:
        applied = apply_database(sub)(fused)
    db_obj = ms.database.JSONDatabase(work_dir=sub)
    tasks = ms.relax_integration.extract_tasks(fused, tt)
    assert len(tasks) == 1
    for task in tasks:
        func = applied[task.task_name]
        assert int(func.attrs["tirx.is_scheduled"])
        best = db_obj.query_ir_module(task.dispatched[0], tt, task.task_name)
        assert best is not None
        assert structural_equal(best["main"].body, func.body, map_free_vars=True)
        assert not structural_equal(task.dispatched[0]["main"].body, func.body, map_free_vars=True)

    x = np.random.default_rng(1).standard_normal((N, N)).astype("float32")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    compare(["z"], [vm["main"](tvm.runtime.tensor(x)).numpy()], [np.maximum(x @ w, 0)], 1e-4, 1e-4)

    capsys.readouterr()
    so = tmp_path / "mm.so"
    t0 = time.monotonic()
    assert main(["compile", str(path), "--target", "llvm", "--no-optimize", "--threads", "2", "--tune", "4",
                 "--tuning-db", str(db), "-o", str(so)]) == 0
    second = time.monotonic() - t0
    out = capsys.readouterr().out
    assert "0 trial(s) run now, 4 in the database" in out, out
    assert len(ms.database.JSONDatabase(work_dir=sub).get_all_tuning_records()) == len(records)
    assert second < first
    lib = relax.VirtualMachine(tvm.runtime.load_module(str(so)), tvm.cpu())
    compare(["z"], [lib["main"](tvm.runtime.tensor(x)).numpy()], [np.maximum(x @ w, 0)], 1e-4, 1e-4)


def test_an_unreadable_database_is_one_line(tmp_path):
    from taso_tvm.schedule.tune import open_database

    (tmp_path / "database_workload.json").write_text("not json\n")
    (tmp_path / "database_tuning_record.json").write_text("")
    with pytest.raises(TuneError, match="cannot read the tuning database in"):
        open_database(str(tmp_path))
    assert open_database(prepare_db_dir(str(tmp_path / "new"))) is not None  # a fresh folder: an empty database


def test_each_cpu_and_thread_count_has_its_own_records(tmp_path):
    from taso_tvm.cli.common import parse_target
    from taso_tvm.schedule.tune import target_db_dir, tuned_target

    llvm = parse_target("llvm")
    one, two = (target_db_dir(str(tmp_path), tuned_target(llvm, n)) for n in (1, 2))
    assert one != two and os.path.isdir(one) and os.path.isdir(two)
    assert target_db_dir(str(tmp_path), tuned_target(llvm, 2)) == two
    assert int(tuned_target(parse_target('{"kind": "llvm", "num-cores": 4}'), 2).attrs["num-cores"]) == 4
