"""`compile` and `tune`: the build of a model for a target, as `taso-tvm compile` does it (tvmc.compile,
tvmc.tune): the TASO search, the CPU schedules, the check of the optimized build against the original, the
never-slower timing, and MetaSchedule tuning on top."""
from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Optional, Union

from .. import errors as _errors
from ..runtime.check import DEFAULT_ATOL, DEFAULT_RTOL, check_tolerances, compare
from ..runtime.timing import DEFAULT_TIME_CAP
from .execute import vm_outputs
from .model import Model, Shapes, load
from .package import CompileReport, Package, library_signature
from .target import make_target

log = logging.getLogger(__name__)

SettingsLike = Union[None, str, Mapping[str, Any], Any]  # a Settings, overrides, or a settings file


def compile(model: Any, target: Any = "llvm", *, optimize: bool = True, tune: Optional[int] = None,
            settings: SettingsLike = None, shapes: Shapes = None, threads: Optional[int] = None,
            schedule: bool = True, check: bool = True, time_check: bool = True,
            time_cap: float = DEFAULT_TIME_CAP, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
            tuning_db: Optional[str] = None) -> Package:
    """Build `model` (a `Model`, or anything `load` takes, with `shapes`) for `target` ("llvm", "cuda", a JSON
    target dict or a tvm Target) into a `Package`.

    optimize: run the TASO search first (`settings`: a `Settings`, {setting: value} overrides or a settings
    file; resolved once for the call). On llvm the optimized build is checked against the original on random
    inputs (`check`, tolerances `rtol`/`atol`; a difference raises `CheckFailed`) and timed against it for at most
    `time_cap` s (`time_check`): the original is kept unless the optimized one is faster. schedule: the CPU
    schedules (llvm), else TVM's default pipeline. tune: MetaSchedule trials on top (llvm; 0 builds with what
    `tuning_db` holds), checked and timed against the untuned build likewise. threads: TVM runtime threads for
    the checks, timings and tuning (default: the physical cores), set before the runtime starts.

    >>> package = taso_tvm.compile(model, "llvm")                    # doctest: +SKIP
    >>> package.report.decision, package.report.threads               # doctest: +SKIP
    """
    from ..schedule.threads import request_threads, set_num_threads

    t0 = time.monotonic()
    asked = request_threads(threads)  # before anything starts TVM's thread pool: it is sized once
    tgt = make_target(target)
    check_tolerances(rtol, atol)
    if tune is not None:
        check_tune(tgt, schedule, tuning_db)
    elif tuning_db:
        raise _errors.SettingsError("--tuning-db goes with --tune (--tune 0 builds with what the database holds)")
    s = resolve_settings(settings, tgt) if optimize else None
    used = set_num_threads(asked)
    model = model if isinstance(model, Model) else load(model, shapes)
    report = CompileReport(threads=used, schedule=schedule)
    new_mod = model.mod
    if s is not None:
        new_mod, report.search = search(model.mod, s)
    ex = build(new_mod, tgt, schedule)
    built, feeds = new_mod, None  # built: the module `ex` was compiled from
    runnable = tgt.kind.name == "llvm" and report.rewritten
    if runnable and (check or time_check):
        feeds = model.random_inputs()
        ref = build(model.mod, tgt, schedule)
        if check:
            compare(model.outputs, vm_outputs(ex, feeds), vm_outputs(ref, feeds), rtol, atol)
        if time_check:
            from ..runtime.timing import compare_tvm

            report.timing = compare_tvm(ref, ex, feeds, time_cap=time_cap)
            if report.timing.verdict != "faster":
                report.decision = (f"original: the optimized module is not faster ({report.timing.verdict}, "
                                   f"ratio {report.timing.ratio:.3f})")
                ex, built = ref, model.mod
    if tune is not None:  # the last stage, on the graph chosen above
        ex = _tune_stage(model, built, tgt, tune, tuning_db, used, ex, report, check, time_check, time_cap, rtol,
                         atol)
    feeds = model.random_inputs() if feeds is None else feeds
    report.seconds = time.monotonic() - t0
    return Package(ex, library_signature(model, tgt, feeds), tgt, report)


def tune(model: Any, target: Any = "llvm", trials: int = 64, *, tuning_db: Optional[str] = None,
         optimize: bool = True, settings: SettingsLike = None, shapes: Shapes = None,
         threads: Optional[int] = None) -> Any:
    """Tune the kernels of `model` (optimized first, unless `optimize` is off) with MetaSchedule for `trials`
    trials in all, into the database folder `tuning_db` (default `~/.cache/taso_tvm/tuning-db` or
    $TASO_TVM_TUNING_DB); returns the `TuneReport` (its `db_dir` is what `compile(..., tune=0,
    tuning_db=...)` builds from). llvm only; needs `taso-tvm[tune]`.

    >>> taso_tvm.tune(model, "llvm", trials=64, tuning_db="db")       # doctest: +SKIP
    """
    from ..schedule.threads import request_threads, set_num_threads
    from ..schedule.tune import default_db_dir, prepare_db_dir, tune_module, tuned_target

    asked = request_threads(threads)
    tgt = make_target(target)
    check_tune(tgt, True, tuning_db)
    s = resolve_settings(settings, tgt) if optimize else None
    used = set_num_threads(asked)
    model = model if isinstance(model, Model) else load(model, shapes)
    mod = search(model.mod, s)[0] if s is not None else model.mod
    db = prepare_db_dir(tuning_db or default_db_dir())
    return tune_module(mod, tuned_target(tgt, used), trials, db, threads=used)


def resolve_settings(settings: SettingsLike, target: Any = None) -> Any:
    """The call's `Settings`: given, or resolved once from overrides or a settings file (and $TASO_TVM_CONFIG),
    with `target` as the target the cost model measures on."""
    from ..relay_pass import Settings

    if isinstance(settings, Settings):
        s = settings
    elif isinstance(settings, Mapping):
        s = Settings.resolve(settings.get("config"), overrides={k: v for k, v in settings.items() if k != "config"})
    else:
        s = Settings.resolve(settings)
    return s.replace(target=target)


def search(mod: Any, settings: Any) -> tuple[Any, Any]:
    """(optimized module, the pass's report): the TASO search with resolved `settings`."""
    from ..relay_pass import TasoOptimize

    p = TasoOptimize(settings=settings)
    return p(mod), p.report


def build(mod: Any, target: Any, schedule: bool = True) -> Any:
    """`tvm.compile` with the pipeline `compile` uses: the CPU schedules on llvm (unless `schedule` is off),
    else the target's default pipeline; CUDA kernels compiled now (cubins: the GPU machine needs its driver)."""
    import tvm

    if target.kind.name == "cuda":
        from ..runtime.cuda_build import enable_cuda_codegen

        enable_cuda_codegen()
    with target:  # nvcc takes the architecture from the current target when there is no GPU to ask
        return tvm.compile(mod, target=target, relax_pipeline=build_pipeline(target, not schedule))


def build_pipeline(target: Any, no_schedule: bool = False) -> Any:
    """The Relax pipeline `compile` builds with: the CPU schedules on llvm (unless `no_schedule`), else the
    target's default pipeline."""
    from tvm import relax

    if target.kind.name == "llvm" and not no_schedule:
        from ..schedule import schedule_pipeline

        return schedule_pipeline(target)
    return relax.get_default_pipeline(target)


def check_tune(target: Any, schedule: bool, tuning_db: Optional[str]) -> None:
    """Tuning's settings, checked before any work: llvm, the CPU schedules, MetaSchedule's dependencies, the
    database folder."""
    from ..schedule.tune import TuneError, check_dependencies, prepare_db_dir

    if target.kind.name != "llvm":
        raise TuneError(f"--tune supports llvm targets only (MetaSchedule on CPU), not {target.kind.name}")
    if not schedule:
        raise TuneError("--tune tunes on top of the CPU schedules: drop --no-schedule")
    check_dependencies()
    if tuning_db:
        prepare_db_dir(tuning_db)


def _tune_stage(model: Model, mod: Any, target: Any, trials: int, tuning_db: Optional[str], threads: int,
                untuned: Any, report: CompileReport, check: bool, time_check: bool, time_cap: float, rtol: float,
                atol: float) -> Any:
    """`mod` tuned and built with the database; checked against the untuned build (outputs, with `check`) and
    timed against it (with `time_check`): slower, the untuned one is kept."""
    from ..schedule.tune import build_tuned

    ex, report.tuning = build_tuned(mod, target, trials, tuning_db, threads=threads)
    if not report.tuning.tuned_tasks:
        report.tuning_decision = "the database picked our schedule for every task"
        return ex
    feeds = model.random_inputs()
    if check:
        compare(model.outputs, vm_outputs(ex, feeds), vm_outputs(untuned, feeds), rtol, atol)
    if time_check:
        from ..runtime.timing import compare_tvm

        report.tuning_timing = t = compare_tvm(untuned, ex, feeds, time_cap=time_cap, names=("untuned", "tuned"))
        if t.verdict == "slower":
            report.tuning_decision = "the untuned build: the tuned one is slower as a whole"
            return untuned
    report.tuning_decision = f"the tuned build ({len(report.tuning.tuned_tasks)} tuned task(s))"
    return ex
