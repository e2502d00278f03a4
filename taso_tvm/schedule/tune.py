"""MetaSchedule tuning of llvm builds, on top of the CPU schedules: `taso-tvm compile --tune TRIALS [--tuning-db DIR]`.

    ex, report = build_tuned(mod, target, trials=64, db_dir="tuning-db", threads=2)   # tune, then build
    print(report.summary())

The tasks are the PrimFuncs of the module exactly as `CpuSchedule` sees them (after the layout passes, LegalizeOps,
FuseOps and FuseTIR). The build applies the database (MetaScheduleApplyDatabase) right before `CpuSchedule`,
which then schedules what the database does not cover. Records live in one subfolder of the database folder per
target (CPU and `num-cores`): run times measured for another CPU or thread count are not comparable.

Never slower, per task: before tuning, each task's own CPU schedule is measured with MetaSchedule's builder and
runner (the same ones that measure the tuned candidates) and committed to the database as an ordinary tuning
record (its schedule trace and run time). The database's best record for a task then *is* the faster of our
schedule and every tuned candidate, so the build picks the tuned code only where it measured faster, and the
search also starts from our schedule. (Chosen over comparing whole modules because it decides per kernel: a
model keeps the kernels where tuning won and our schedules elsewhere; the command line also times the whole
tuned module against the untuned one and keeps the untuned one if it is slower.) Which records are baselines is
kept in `taso_baselines.json` beside the database, so that trials are counted without them. Tasks under 1 % of
the model's kernel time get no trials.

Reuse: a task's trials already in the database count towards TRIALS; a second run with the same database and
TRIALS tunes nothing and measures no baseline again (TRIALS 0: build with what the database holds).

Why MetaSchedule recorded nothing here before ("Total trials: 0"): its LocalBuilder's default build function
imports `tvm.s_tir.tensor_intrin`, which parses every tensor intrinsic in TVMScript, the GPU ones included (CUDA
alone: 20-90 s on 2 cores), in every freshly started build worker, for every batch; that runs past the builder's
30 s timeout, so every candidate "fails to build". Here the builder uses a build function without that import,
and the main process (TuneContext imports the package too) registers only the CPU intrinsics.
"""
from __future__ import annotations

import importlib
import json
import logging
import math
import os
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import tvm
from tvm.target import Target

from ..errors import SettingsError
from ..safe_read import JSON_CAP, UnsafeFileError, check_regular_file, read_json
from .apply import schedule_func
from .target import SCHEDULE_VERSION

log = logging.getLogger(__name__)

TUNE_DEPS = ("xgboost", "psutil", "cloudpickle")  # MetaSchedule's cost model and its process pools
FFI_GOOD = "0.1.14.post1"  # apache-tvm-ffi 0.1.15.x segfaults when MetaSchedule saves a trace as JSON
INSTALL_HINT = "pip install 'taso-tvm[tune]'"
BASELINES_FILE = "taso_baselines.json"
LOG_FILE = "taso_tune.log"
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")  # MetaSchedule's JSONDatabase
DEFAULT_DB_ENV = "TASO_TVM_TUNING_DB"
MIN_TASK_SHARE = 0.01  # tasks under 1 % of the model's (weighted) baseline time get no trials
MAX_TRIALS_PER_ITER = 16  # candidates per batch: the cost model relearns between batches
MIN_TRIALS_PER_ITER = 2
INVALID_SECONDS = 1e9  # MetaSchedule records a failed candidate with a run time of 1e10 s


class TuneError(SettingsError):
    """Tuning cannot run as asked (missing dependencies, a bad trial count or database folder, a non-llvm target)."""


# ----------------------------------------------------------------------------------------- set-up
def check_dependencies() -> None:
    """Raise TuneError (one line) unless MetaSchedule's Python dependencies import and tvm-ffi is the good one."""
    missing = []
    for name in TUNE_DEPS:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise TuneError(f"--tune needs MetaSchedule's dependencies (missing: {', '.join(missing)}): {INSTALL_HINT}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        ffi = version("apache-tvm-ffi")
    except PackageNotFoundError:
        return
    if ffi.startswith("0.1.15"):
        raise TuneError(f"--tune needs apache-tvm-ffi=={FFI_GOOD} ({ffi} crashes in MetaSchedule): {INSTALL_HINT}")


def default_db_dir() -> str:
    """$TASO_TVM_TUNING_DB, else ~/.cache/taso_tvm/tuning-db (records are kept per kernel and target, so one
    folder serves every model)."""
    return os.environ.get(DEFAULT_DB_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "taso_tvm", "tuning-db")


def prepare_db_dir(path: str) -> str:
    """Create the database folder if needed; TuneError if it cannot be (a file there, no permission)."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise TuneError(f"tuning database '{path}' is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise TuneError(f"cannot create tuning database folder '{path}': {e.strerror or e}") from None
    if not os.access(path, os.W_OK):
        raise TuneError(f"tuning database folder '{path}' is not writable")
    return path


def target_db_dir(db_dir: str, target: Target) -> str:
    """The folder inside `db_dir` holding the records of one target (CPU and cores): run times measured for
    another CPU or thread count are not comparable, and MetaSchedule's query does not filter by target."""
    import re

    cpu = str(target.attrs.get("mcpu", "") or "generic")
    cores = int(target.attrs.get("num-cores", 0) or 0)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target.kind.name}-{cpu}-{cores}c")
    return prepare_db_dir(os.path.join(db_dir, name))


def tuned_target(target: Target, threads: int) -> Target:
    """`target` with MetaSchedule's `num-cores` (the runtime threads the tuned code will run with); the build uses
    the same target as the tuning."""
    if target.kind.name != "llvm":
        raise TuneError(f"--tune supports llvm targets only, not {target.kind.name}")
    spec = dict(target.export())
    spec.setdefault("num-cores", max(int(threads), 1))  # a target naming its cores keeps them
    return Target(spec)


def _cpu_intrinsics_only() -> None:
    """Register the CPU tensor intrinsics without the GPU ones (see the module doc): the package
    `tvm.s_tir.tensor_intrin` is entered in sys.modules as its bare namespace (its submodules stay importable),
    so MetaSchedule's `import tvm.s_tir.tensor_intrin` finds it loaded."""
    pkg = "tvm.s_tir.tensor_intrin"
    if pkg in sys.modules:
        return
    import tvm.s_tir

    module = types.ModuleType(pkg, "CPU tensor intrinsics only (taso_tvm.schedule.tune)")
    module.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
    sys.modules[pkg] = module
    for sub in ("x86", "arm_cpu"):
        importlib.import_module(f"{pkg}.{sub}")


def _builder_function() -> Any:
    """MetaSchedule's default build minus its tensor-intrinsic import. A nested function, so that cloudpickle
    sends it by value: the builder's workers import only tvm, not this package."""

    def build(mod: Any, target: Any, _params: Any) -> Any:
        from tvm.driver import build as tvm_build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)

    return build


def fused_module(mod: tvm.IRModule, target: Target) -> tvm.IRModule:
    """The module as `CpuSchedule` receives it: layout passes, library dispatch, LegalizeOps, FuseOps, FuseTIR."""
    from tvm.relax.backend.cpu_generic import pipeline as P

    from .fast_erf import legalize_passes
    from .pipeline import graph_passes

    with target:
        return tvm.transform.Sequential(graph_passes(target) + P.library_dispatch_passes(target)
                                        + legalize_passes(target))(mod)


# ----------------------------------------------------------------------------------------- report
@dataclass
class TaskResult:
    """One task: its trials in the database, our schedule's and the best tuned candidate's run time (seconds)."""

    name: str
    weight: int
    trials: int = 0
    baseline: Optional[float] = None
    best_tuned: Optional[float] = None
    note: str = ""

    @property
    def uses_tuned(self) -> bool:
        return self.best_tuned is not None and (self.baseline is None or self.best_tuned < self.baseline)

    @property
    def chosen(self) -> Optional[float]:
        return self.best_tuned if self.uses_tuned else self.baseline


@dataclass
class TuneReport:
    """What `tune_module` did: the tasks, the trials this run spent, the database folder, the time taken."""

    db_dir: str
    trials_asked: int
    tasks: list = field(default_factory=list)  # TaskResult
    trials_run: int = 0
    seconds: float = 0.0
    worth: set = field(default_factory=set)  # the keys of the tasks given to MetaSchedule

    @property
    def tuned_tasks(self) -> list:
        return [t for t in self.tasks if t.uses_tuned]

    def estimate(self, which: str) -> Optional[float]:
        """Sum over tasks of weight x run time ("baseline" or "chosen"); None when a task was not measured."""
        vals = [(t.weight, t.baseline if which == "baseline" else t.chosen) for t in self.tasks]
        if any(v is None for _, v in vals):
            return None
        return sum(w * v for w, v in vals)

    def summary(self) -> str:
        lines = [f"tuning: {len(self.tasks)} task(s), {self.trials_run} trial(s) run now, "
                 f"{sum(t.trials for t in self.tasks)} in the database for these tasks, {self.seconds:.1f} s; "
                 f"database {self.db_dir}"]
        lines.append(f"  {'task':40s}{'weight':>7s}{'trials':>7s}{'ours us':>10s}{'tuned us':>10s}  used")
        for t in self.tasks:
            ours = f"{t.baseline * 1e6:10.1f}" if t.baseline is not None else f"{'-':>10s}"
            tuned = f"{t.best_tuned * 1e6:10.1f}" if t.best_tuned is not None else f"{'-':>10s}"
            used = "tuned" if t.uses_tuned else "ours"
            lines.append(f"  {t.name[:40]:40s}{t.weight:7d}{t.trials:7d}{ours}{tuned}  {used}"
                         + (f" ({t.note})" if t.note else ""))
        before, after = self.estimate("baseline"), self.estimate("chosen")
        if before and after:
            lines.append(f"  kernel time, sum over tasks: ours {before * 1e6:.1f} us, with tuning {after * 1e6:.1f} us "
                         f"({len(self.tuned_tasks)} task(s) tuned faster)")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- database
def open_database(db_dir: str) -> Any:
    """MetaSchedule's JSON database in `db_dir` (created empty if there is none); TuneError if its files do not
    read."""
    from tvm.s_tir import meta_schedule as ms

    for name in DATABASE_FILES:  # read by TVM: regular files of a bounded size, or none
        if os.path.lexists(os.path.join(db_dir, name)):
            try:
                check_regular_file(os.path.join(db_dir, name), "tuning database file", JSON_CAP)
            except UnsafeFileError as e:
                raise TuneError(str(e)) from None
    try:
        return ms.database.JSONDatabase(work_dir=db_dir)
    except Exception as e:  # noqa: BLE001 - TVM reports a bad file as a RuntimeError with the parser's words
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise TuneError(f"cannot read the tuning database in '{db_dir}': {lines[-1] if lines else e} "
                        "(remove the folder or name another with --tuning-db)") from None


class _Ledger:
    """The database folder: MetaSchedule's JSON database plus the list of our baseline records."""

    def __init__(self, db_dir: str):
        self.dir = db_dir
        self.db = open_database(db_dir)
        self.path = os.path.join(db_dir, BASELINES_FILE)
        self.baselines: dict = {}
        if os.path.exists(self.path):
            try:
                self.baselines = read_json(self.path, "tuning baselines")
            except UnsafeFileError as e:
                raise TuneError(str(e)) from None

    @staticmethod
    def key(task_mod: tvm.IRModule, target: Target) -> str:
        from tvm_ffi import structural_hash

        return f"{structural_hash(task_mod) & (2**64 - 1):016x}:{target.kind.name}:{target.attrs.get('mcpu', '')}" \
               f":{int(target.attrs.get('num-cores', 0))}:v{SCHEDULE_VERSION}"

    def save(self) -> None:
        from ..fileio import atomic_write_text

        atomic_write_text(self.path, json.dumps(self.baselines, indent=1, sort_keys=True))

    def records(self) -> dict:
        """Tuning records grouped by workload: structural hash -> [(mean seconds or None, record)]."""
        from tvm_ffi import structural_hash

        out: dict = {}
        seen: dict = {}
        for rec in self.db.get_all_tuning_records():
            workload = rec.workload
            wid = workload.__chandle__()  # the database's own object (a Python wrapper's id() is reused)
            if wid not in seen:
                seen[wid] = structural_hash(workload.mod) & (2**64 - 1)
            secs = [float(s) for s in rec.run_secs] if rec.run_secs is not None else []
            mean = sum(secs) / len(secs) if secs and max(secs) < INVALID_SECONDS else None
            out.setdefault(seen[wid], []).append(mean)
        return out


def _workload_hash(task_mod: tvm.IRModule) -> int:
    from tvm_ffi import structural_hash

    return structural_hash(task_mod) & (2**64 - 1)


# ----------------------------------------------------------------------------------------- tuning
class _Measurer:
    """MetaSchedule's local builder (build workers: the cores, at most max(2, threads)) and runner, started on
    first use (each starts worker processes: seconds), shared by our baselines and the search."""

    def __init__(self, threads: int):
        self.workers = max(1, min(os.cpu_count() or 1, max(2, threads)))
        self._builder = self._runner = None

    @property
    def builder(self) -> Any:
        from tvm.s_tir import meta_schedule as ms

        if self._builder is None:
            self._builder = ms.builder.LocalBuilder(max_workers=self.workers, f_build=_builder_function())
        return self._builder

    @property
    def runner(self) -> Any:
        from tvm.s_tir import meta_schedule as ms

        if self._runner is None:
            config = ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=40)
            self._runner = ms.runner.LocalRunner(evaluator_config=config)
        return self._runner


def _measure(measure: _Measurer, mods: list, target: Target) -> list:
    """Run time (mean seconds) of each PrimFunc module with MetaSchedule's builder and runner, None if it failed."""
    from tvm.s_tir import meta_schedule as ms

    builder, runner = measure.builder, measure.runner
    built = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
    inputs, where = [], []
    out: list = [None] * len(mods)
    for i, (m, b) in enumerate(zip(mods, built)):
        if b.error_msg:
            log.warning("tuning: our schedule of task %d does not build: %s", i, b.error_msg.splitlines()[0])
            continue
        inputs.append(ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_prim_func(m["main"])))
        where.append(i)
    for i, fut in zip(where, runner.run(inputs)):
        res = fut.result()
        if res.error_msg:
            log.warning("tuning: our schedule of task %d fails to run: %s", i, res.error_msg.splitlines()[0])
            continue
        secs = [float(s) for s in res.run_secs]
        out[i] = sum(secs) / len(secs)
    for b in built:  # the artifacts are temporary folders
        if b.artifact_path:
            import shutil

            shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
    return out


def _our_schedule(task_mod: tvm.IRModule, target: Target, name: str) -> Optional[Any]:
    """Our schedule of a task as a traced Schedule, if its trace replays to the same code (it is stored as a trace)."""
    from tvm import s_tir
    from tvm_ffi import structural_equal

    sch, rule = schedule_func(task_mod["main"], target, name)
    replay = s_tir.Schedule(task_mod)
    try:
        sch.trace.apply_to_schedule(replay, remove_postproc=False)
    except Exception as e:  # noqa: BLE001 - a trace MetaSchedule cannot replay: the task is not tuned
        log.info("tuning: our %s schedule of %s does not replay from its trace (%s)", rule, name, e)
        return None
    if not structural_equal(replay.mod, sch.mod):
        log.info("tuning: our %s schedule of %s replays differently from its trace", rule, name)
        return None
    return sch


def _attach_file_log(db_dir: str) -> tuple:
    """MetaSchedule's log (long: every trial) goes to <db>/taso_tune.log, not to the console. Returns what
    `_detach_file_log` restores."""
    handler = logging.FileHandler(os.path.join(db_dir, LOG_FILE))
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s [%(levelname)s] %(message)s"))
    ms_log = logging.getLogger("taso_tvm.schedule.tune.metaschedule")  # the tasks' loggers
    tvm_log = logging.getLogger("tvm.s_tir.meta_schedule")  # the task scheduler's, builder's, runner's
    saved = [(lg, lg.level, lg.propagate) for lg in (ms_log, tvm_log)]
    for lg in (ms_log, tvm_log):
        lg.setLevel(logging.INFO)
        lg.propagate = False
        lg.addHandler(handler)
    return ms_log, saved, handler


def _detach_file_log(saved: list, handler: logging.Handler) -> None:
    for lg, level, propagate in saved:
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.propagate = propagate
    handler.close()


def tune_module(mod: tvm.IRModule, target: Target, trials: int, db_dir: Optional[str] = None,
                threads: int = 1, seed: int = 0) -> TuneReport:
    """Tune the kernels of `mod` (a Relax module before legalization) with MetaSchedule for up to `trials` trials
    in total, into the database folder `db_dir` (its subfolder for `target`, see `target_db_dir`); `target` must
    be `tuned_target(...)`. See the module doc."""
    if trials < 0:
        raise TuneError(f"--tune takes a number of trials >= 0, not {trials}")
    check_dependencies()
    if target.kind.name != "llvm" or "num-cores" not in target.attrs:
        raise TuneError("tune_module needs an llvm target from tuned_target()")
    db_dir = target_db_dir(prepare_db_dir(db_dir or default_db_dir()), target)
    t0 = time.perf_counter()
    _cpu_intrinsics_only()
    from tvm.s_tir import meta_schedule as ms

    fused = fused_module(mod, target)
    extracted = ms.relax_integration.extract_tasks(fused, target)
    ledger = _Ledger(db_dir)
    report = TuneReport(db_dir, trials)
    measure = _Measurer(threads)
    ms_log, saved, handler = _attach_file_log(db_dir)
    try:
        tasks = _baselines(extracted, target, ledger, measure, report, tuning=trials > 0)
        _tune(tasks, target, trials, ledger, measure, report, threads, seed, ms_log)
        if report.trials_run:
            _confirm(tasks, target, ledger, measure)
        _fill_results(tasks, ledger, report)
    finally:
        _detach_file_log(saved, handler)
    report.seconds = time.perf_counter() - t0
    log.info("%s", report.summary())
    return report


def _baselines(extracted: list, target: Target, ledger: _Ledger, measure: _Measurer, report: TuneReport,
               tuning: bool = True) -> list:
    """Measure and commit our schedule of every task not yet in the ledger (without `tuning`, only of the tasks
    the database has records for); returns [(task, TaskResult, key)]."""
    tasks, todo = [], []
    recorded = set() if tuning else set(ledger.records())
    for task in extracted:
        task_mod = task.dispatched[0]
        res = TaskResult(task.task_name, int(task.weight))
        report.tasks.append(res)
        key = _Ledger.key(task_mod, target)
        tasks.append((task, res, key))
        if key not in ledger.baselines and (tuning or _workload_hash(task_mod) in recorded):
            sch = _our_schedule(task_mod, target, task.task_name)
            if sch is None:
                res.note = "our schedule is not replayable: not tuned"
                continue
            todo.append((task, res, key, sch))
    if todo:
        secs = _measure(measure, [sch.mod for _, _, _, sch in todo], target)
        for (task, res, key, sch), s in zip(todo, secs):
            if s is None:
                res.note = "our schedule failed to measure: not tuned"
                continue
            _commit_ours(ledger, task, key, sch, s, target)
        ledger.save()
    for task, res, key in tasks:
        if key in ledger.baselines:
            res.baseline = float(ledger.baselines[key]["seconds"])
    return tasks


def _commit_ours(ledger: _Ledger, task: Any, key: str, sch: Any, seconds: float, target: Target) -> None:
    """Commit a measurement of our schedule of `task` as a tuning record and note it in the ledger."""
    from tvm.s_tir import meta_schedule as ms

    task_mod = task.dispatched[0]
    workload = ledger.db.commit_workload(task_mod)
    ledger.db.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, [seconds], target, ms.arg_info.ArgInfo.from_prim_func(task_mod["main"])))
    entry = ledger.baselines.setdefault(key, {"task": task.task_name, "measured": []})
    entry["measured"] = _ours_measured(entry) + [seconds]
    entry["seconds"] = min(entry["measured"])


def _ours_measured(entry: dict) -> list:
    return [float(v) for v in entry.get("measured", [entry["seconds"]] if "seconds" in entry else [])]


def _confirm(tasks: list, target: Target, ledger: _Ledger, measure: _Measurer) -> None:
    """Measure our schedule again where a tuned candidate beat it: the best of many noisy candidates is biased
    low against one measurement of ours, and a load spike during that one would hand the task to tuning. The
    new record joins the old (the database keeps the best), so a task goes to tuning only if it still wins."""
    _fill_tuned(tasks, ledger)
    todo = [(task, res, key) for task, res, key in tasks if res.uses_tuned and key in ledger.baselines]
    if not todo:
        return
    scheds = [_our_schedule(task.dispatched[0], target, task.task_name) for task, _, _ in todo]
    todo = [(t, sch) for t, sch in zip(todo, scheds) if sch is not None]
    secs = _measure(measure, [sch.mod for _, sch in todo], target)
    for ((task, res, key), sch), sec in zip(todo, secs):
        if sec is not None:
            _commit_ours(ledger, task, key, sch, sec, target)
            res.baseline = float(ledger.baselines[key]["seconds"])
    ledger.save()


def _trials_done(tasks: list, ledger: _Ledger) -> dict:
    """Records per task in the database, our baseline records not counted."""
    by_hash = ledger.records()
    out = {}
    for task, res, key in tasks:
        n = len(by_hash.get(_workload_hash(task.dispatched[0]), []))
        out[key] = max(0, n - len(_ours_measured(ledger.baselines.get(key, {}))))
    return out


def _tune(tasks: list, target: Target, trials: int, ledger: _Ledger, measure: _Measurer, report: TuneReport,
          threads: int, seed: int, ms_log: logging.Logger) -> None:
    """Run MetaSchedule on the tasks worth tuning, for the trials the database does not hold yet."""
    from tvm.s_tir import meta_schedule as ms

    done = _trials_done(tasks, ledger)
    total = sum(res.baseline * res.weight for _, res, _ in tasks if res.baseline is not None) or 1.0
    worth = []
    for task, res, key in tasks:
        if res.baseline is None:
            continue
        if res.baseline * res.weight < MIN_TASK_SHARE * total:
            res.note = res.note or f"{100 * res.baseline * res.weight / total:.1f}% of the time: not tuned"
            continue
        worth.append((task, res, key))
    left = trials - sum(done[key] for _, _, key in worth)
    if left <= 0 or not worth:
        log.info("tuning: the database already holds %d trial(s) for these tasks; nothing to tune",
                 sum(done.values()))
        return
    per_iter = min(MAX_TRIALS_PER_ITER, max(MIN_TRIALS_PER_ITER, math.ceil(left / len(worth))))
    contexts, weights = [], []
    for (task, res, key), rand in zip(worth, ms.utils.fork_seed(seed, n=len(worth))):
        contexts.append(ms.TuneContext(mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                                       search_strategy="evolutionary", task_name=task.task_name,
                                       logger=ms_log.getChild(task.task_name), rand_state=rand,
                                       num_threads=max(1, threads)).clone())
        weights.append(float(task.weight))
    before = sum(len(v) for v in ledger.records().values())
    log.info("tuning %d task(s) for %d trial(s), %d per batch", len(contexts), left, per_iter)
    ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=ledger.dir, max_trials_global=left,
                  num_trials_per_iter=per_iter, builder=measure.builder, runner=measure.runner, database=ledger.db,
                  cost_model=ms.cost_model.XGBModel(num_tuning_cores=max(1, threads)))
    report.trials_run = sum(len(v) for v in ledger.records().values()) - before
    report.worth = {key for _, _, key in worth}


def _fill_tuned(tasks: list, ledger: _Ledger) -> None:
    """Each task's best tuned run time, from the database (our own records set aside)."""
    by_hash = ledger.records()
    for task, res, key in tasks:
        means = [m for m in by_hash.get(_workload_hash(task.dispatched[0]), []) if m is not None]
        for ours in _ours_measured(ledger.baselines.get(key, {})):  # the same times, give or take JSON's rounding
            same = [m for m in means if abs(m - ours) <= 1e-9 * ours]
            if same:
                means.remove(same[0])
        res.best_tuned = min(means) if means else None


def _fill_results(tasks: list, ledger: _Ledger, report: TuneReport) -> None:
    """Trials and best tuned time per task, from the database."""
    _fill_tuned(tasks, ledger)
    done = _trials_done(tasks, ledger)
    for task, res, key in tasks:
        res.trials = done[key]
        if not res.trials and not res.note and key in report.worth:
            res.note = "the trials ran out before this task"


# ----------------------------------------------------------------------------------------- building
def apply_database(db_dir: str) -> tvm.transform.Pass:
    """A module pass giving every PrimFunc the database has records for its best record's schedule (marked
    `tirx.is_scheduled`, so `CpuSchedule` leaves it); the others pass through untouched."""

    @tvm.transform.module_pass(opt_level=0, name="TasoApplyTuningDatabase")
    def _apply(mod: tvm.IRModule, ctx: Any) -> tvm.IRModule:
        from tvm import relax

        _cpu_intrinsics_only()
        with open_database(db_dir):
            return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)

    return _apply


def tuned_pipeline(target: Target, db_dir: str) -> tvm.transform.Pass:
    """The "taso-schedule" pipeline with the tuning database (`target`'s folder in `db_dir`) applied before
    `CpuSchedule`."""
    from .pipeline import schedule_pipeline

    return schedule_pipeline(target, pre_schedule=[apply_database(target_db_dir(prepare_db_dir(db_dir), target))])


def build_tuned(mod: tvm.IRModule, target: Target, trials: int, db_dir: Optional[str] = None,
                threads: int = 1) -> tuple:
    """(executable, TuneReport): `mod` tuned for `trials` trials into `db_dir` (default: `default_db_dir()`) and
    built for llvm `target` with the database and the CPU schedules."""
    tt = tuned_target(target, threads)
    db_dir = prepare_db_dir(db_dir or default_db_dir())
    report = tune_module(mod, tt, trials, db_dir, threads=threads)
    with tt:
        ex = tvm.compile(mod, target=tt, relax_pipeline=tuned_pipeline(tt, db_dir))
    return ex, report
