"""Whole-model latency comparison, the one timing helper of the project (the CLI's never-slower guard, benchmarks).

Blocks of runs drift by tens of percent on a shared machine, so callables are never timed one block after the
other: each *round* runs every callable once, in a freshly shuffled order, and the comparison is made round by
round (the per-round ratio candidate / baseline cancels the drift both runs saw). Rounds go on until the confidence
interval of every ratio excludes 1 (or, with `min_gain`, shows that the candidate cannot be faster by that much:
no more rounds would make it a gain worth having), or the time cap or the round cap is reached.

    res = compare(lambda: run_a(), lambda: run_b(), names=("original", "optimized"), time_cap=20)
    res.verdict            # "faster" | "slower" | "not different": is the second faster than the first?
    res.ratio, res.ci      # median per-round ratio B/A and its confidence interval
    print(res.summary())

The interval is the distribution-free (binomial order-statistic) interval of the median of the per-round log
ratios. It is looked at after 8 rounds and then every 25 % more rounds; look k uses the error rate
(1 - confidence) * 6 / (pi^2 k^2), so that the chance of a wrong verdict over all looks stays below 1 - confidence.
Results are deterministic given the seed (which fixes the run orders) and the measured times.

`race=True` (the guard's many candidates): at each look, a candidate whose interval against the fastest one so far
(the leader, by median) shows it slower is dropped: it runs no more rounds, its ratios are those of the rounds it ran,
and the run stops once every candidate still running is decided against the baseline. The baseline is never
dropped, so a verdict "faster" is always one against it.
"""
from __future__ import annotations

import gc
import itertools
import math
import time
from fractions import Fraction
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

DEFAULT_TIME_CAP = 20.0  # seconds
DEFAULT_MAX_ROUNDS = 10_000
DEFAULT_CONFIDENCE = 0.95
FIRST_LOOK = 8  # rounds before the first look at the interval (8 wins out of 8 is the first decisive result)
LOOK_GROWTH = 1.25  # each later look comes after 25 % more rounds
MIN_SECONDS = 1e-9  # a run below the timer's resolution counts as 1 ns (ratios stay finite)

FASTER, SLOWER, NOT_DIFFERENT = "faster", "slower", "not different"


@dataclass(frozen=True)
class Latency:
    """One callable's single-run latencies, in seconds."""

    name: str
    median: float
    q1: float
    q3: float
    p5: float
    p95: float
    runs: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def of(cls, name: str, samples: np.ndarray) -> "Latency":
        samples = samples[np.isfinite(samples)]  # a candidate dropped from a race ran fewer rounds
        q = np.percentile(samples, [50, 25, 75, 5, 95]) if len(samples) else [math.nan] * 5
        return cls(name, *(float(v) for v in q), len(samples))

    def __str__(self) -> str:
        return f"{self.name} {self.median * 1e3:.4g} ms (IQR {self.q1 * 1e3:.4g}-{self.q3 * 1e3:.4g})"


@dataclass(frozen=True)
class Ratio:
    """A candidate's latency against the baseline's: the median per-round ratio and its confidence interval."""

    baseline: str
    candidate: str
    ratio: float  # median over rounds of candidate time / baseline time
    ratio_of_medians: float
    ci: tuple  # (low, high); (0, inf) while too few rounds
    verdict: str  # faster | slower | not different: the candidate against the baseline

    def __str__(self) -> str:
        return (f"{self.candidate}/{self.baseline} = {self.ratio:.3f} [{self.ci[0]:.3f}, {self.ci[1]:.3f}]: "
                f"{self.verdict}")


@dataclass
class TimingResult:
    """What `compare` measured. `ratios[i]` compares callable i + 1 with callable 0; the properties `ratio`, `ci`
    and `verdict` are those of the first comparison (the two-callable case)."""

    latencies: list
    ratios: list
    rounds: int
    seconds: float
    stopped_by: str  # confident | time | rounds
    confidence: float
    samples: np.ndarray = field(repr=False)  # rounds x callables, seconds
    error: float = 0.05  # the error rate of the last look's intervals
    dropped: tuple = ()  # (race) the callables dropped as slower than the leader
    sessions: int = 1  # the sessions each model ran in, in turn (`compare_onnx_models`)

    def between(self, a: int, b: int) -> Ratio:
        """Callable b against callable a (any two of those compared), at the same error rate as `ratios`."""
        names = [lat.name for lat in self.latencies]
        return _ratios(self.samples[:, [a, b]], [names[a], names[b]], self.error)[0]

    def _first(self) -> Ratio:
        if not self.ratios:
            raise ValueError("a single callable has no ratio")
        return self.ratios[0]

    @property
    def ratio(self) -> float:
        return self._first().ratio

    @property
    def ci(self) -> tuple:
        return self._first().ci

    @property
    def verdict(self) -> str:
        return self._first().verdict

    @property
    def ci_low(self) -> float:
        return self._first().ci[0]

    @property
    def ci_high(self) -> float:
        return self._first().ci[1]

    @property
    def median_a(self) -> float:
        """The baseline's median latency in seconds."""
        return self.latencies[0].median

    @property
    def median_b(self) -> float:
        """The (first) candidate's median latency in seconds."""
        return self.latencies[1].median

    def summary(self) -> str:
        """One line: the ratios with their intervals and verdicts, the latencies, rounds and time."""
        parts = [str(r) for r in self.ratios] + [str(lat) for lat in self.latencies]
        return (f"{'; '.join(parts)}; {self.rounds} rounds in {self.seconds:.1f} s, stopped by {self.stopped_by} "
                f"({self.confidence:.0%} interval)")


def median_ci(values: np.ndarray, error: float) -> tuple:
    """Distribution-free interval (x_(k), x_(n+1-k)) of the median of `values`, covering it with probability
    >= 1 - error; (-inf, inf) when there are too few values for that."""
    n = len(values)
    if n == 0:
        return -math.inf, math.inf
    # k = the largest count with P(Binomial(n, 1/2) <= k - 1) <= error / 2, in exact integer arithmetic
    limit = Fraction(error / 2) * (1 << n)
    k, cum, term = 0, 0, 1
    while k < (n + 1) // 2:
        cum += term  # cum = sum_{i <= k} C(n, i)
        if cum > limit:
            break
        k += 1
        term = term * (n - k + 1) // k
    if k == 0:
        return -math.inf, math.inf
    s = np.sort(values)
    return float(s[k - 1]), float(s[n - k])


def _decided(r: Ratio, min_gain: float) -> bool:
    """Whether a ratio needs no more rounds: its interval excludes 1, or (`min_gain` > 0) its low end shows the
    candidate cannot be faster by `min_gain` (relative)."""
    return r.verdict != NOT_DIFFERENT or (min_gain > 0 and r.ci[0] >= 1 / (1 + min_gain))


def _look_error(look: int, confidence: float) -> float:
    return (1.0 - confidence) * 6.0 / (math.pi ** 2 * look ** 2)


def _ratios(samples: np.ndarray, names: Sequence[str], error: float) -> list:
    """Each column against the first, over the rounds both ran (NaN: a callable dropped from a race)."""
    out = []
    for i in range(1, samples.shape[1]):
        both = samples[:, [0, i]]
        both = both[np.isfinite(both).all(axis=1)]
        logs = np.log(np.maximum(both, MIN_SECONDS))
        d = logs[:, 1] - logs[:, 0]
        lo, hi = median_ci(d, error)
        verdict = FASTER if hi < 0 else SLOWER if lo > 0 else NOT_DIFFERENT
        med = np.median(both, axis=0) if len(both) else np.array([math.nan, math.nan])
        out.append(Ratio(names[0], names[i], float(np.exp(np.median(d))) if len(d) else math.nan,
                         float(med[1] / med[0]), (math.exp(lo), math.exp(hi)), verdict))
    return out


def _race(rows: list, active: list, labels: Sequence[str], error: float) -> None:
    """Drop (mark inactive) each running candidate whose interval against the leader shows it slower."""
    arr = np.asarray(rows, dtype=np.float64)
    med = np.nanmedian(arr, axis=0)
    running = [i for i, a in enumerate(active) if a]
    leader = min(running, key=lambda i: med[i])
    for i in running:
        if i not in (0, leader) and \
                _ratios(arr[:, [leader, i]], [labels[leader], labels[i]], error)[0].verdict == SLOWER:
            active[i] = False


def _names(callables: Sequence, names: Optional[Sequence[str]]) -> list:
    if names is None:
        return ["A", "B"] if len(callables) == 2 else [f"#{i}" for i in range(len(callables))]
    if len(names) != len(callables):
        raise ValueError(f"{len(names)} names for {len(callables)} callables")
    return [str(n) for n in names]


def compare(*callables: Callable[[], Any], names: Optional[Sequence[str]] = None,
            time_cap: float = DEFAULT_TIME_CAP, max_rounds: int = DEFAULT_MAX_ROUNDS, min_rounds: int = 0,
            warmup: int = 1, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
            timer: Callable[[], float] = time.perf_counter, min_gain: float = 0.0,
            race: bool = False, floor_rounds: int = 0, floor_cap: float = 0.0) -> TimingResult:
    """Time the callables by interleaved single runs; compare each with the first (the baseline).

    Each round runs every callable once in a shuffled order. Stops when every ratio's interval excludes 1 or
    shows the candidate cannot be faster by `min_gain` (`stopped_by="confident"`, not before `min_rounds` rounds),
    after `time_cap` seconds (warm-up included; with `floor_rounds`, not before that many rounds unless `floor_cap`
    seconds have gone: runs of a second each decide nothing in a few rounds) or after `max_rounds` rounds.
    `warmup` untimed runs of each callable come first. With one callable it only measures (no ratios). `race`:
    candidates shown slower than the fastest one stop running (module docstring).
    """
    if not callables:
        raise ValueError("compare() needs at least one callable")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not (time_cap > 0 and max_rounds >= 1 and warmup >= 0):
        raise ValueError("time_cap must be > 0, max_rounds >= 1 and warmup >= 0")
    labels = _names(callables, names)
    rng = np.random.default_rng(seed)
    m = len(callables)
    rows: list = []
    active = [True] * m
    look, next_look = 1, FIRST_LOOK
    stopped_by = "rounds"
    gc_was_on = gc.isenabled()
    t_start = time.monotonic()
    gc.disable()  # a collection inside one run and not the other is noise (timeit does the same)
    try:
        for _ in range(warmup):
            for i in rng.permutation(m):
                callables[i]()
        while len(rows) < max_rounds:
            row = [math.nan] * m
            for i in rng.permutation(m):
                if not active[i]:
                    continue
                t0 = timer()
                callables[i]()
                row[i] = timer() - t0
            rows.append(row)
            if m > 1 and len(rows) >= next_look:
                error = _look_error(look, confidence)
                if race and m > 2:
                    _race(rows, active, labels, error)
                decided = all(_decided(r, min_gain) for i, r in enumerate(_ratios(np.asarray(rows), labels, error), 1)
                              if active[i])
                look += 1
                next_look = max(next_look + 1, math.ceil(next_look * LOOK_GROWTH))
                if decided and len(rows) >= min_rounds:
                    stopped_by = "confident"
                    break
            spent = time.monotonic() - t_start
            if spent >= time_cap and (len(rows) >= floor_rounds or spent >= floor_cap):
                stopped_by = "time"
                break
    finally:
        if gc_was_on:
            gc.enable()
    samples = np.asarray(rows, dtype=np.float64).reshape(len(rows), m)
    # the reported interval is that of the last look made (the next one when the run stopped between looks)
    error = _look_error(max(1, look - (stopped_by == "confident")), confidence)
    ratios = _ratios(samples, labels, error) if m > 1 else []
    return TimingResult([Latency.of(n, samples[:, i]) for i, n in enumerate(labels)], ratios, len(rows),
                        time.monotonic() - t_start, stopped_by, confidence, samples, error,
                        tuple(i for i, a in enumerate(active) if not a))


def measure(fn: Callable[[], Any], name: str = "run", time_cap: float = 2.0, max_rounds: int = 200,
            warmup: int = 1, timer: Callable[[], float] = time.perf_counter) -> Latency:
    """One callable's latency from single runs (until `time_cap` seconds or `max_rounds` runs)."""
    return compare(fn, names=[name], time_cap=time_cap, max_rounds=max_rounds, warmup=warmup,
                   timer=timer).latencies[0]


# ------------------------------------------------------------------------------------------- runtimes
def ort_session(model: Union[Any, bytes, str], threads: int = 2, spin: bool = True) -> Any:
    """An ONNX Runtime session the way the project times ONNX: CPU provider, `threads` intra-op threads, one
    inter-op thread, sequential execution, all graph optimizations. `model`: a ModelProto, its bytes or a path.
    `spin=False`: the intra-op threads do not spin after a run (interleaved with another runtime on few cores, the
    spinning threads hold the cores the next run needs). A session given as `model` is returned as it is (one made
    here once, shared by the checks and the timing)."""
    import onnxruntime as ort

    if isinstance(model, ort.InferenceSession):
        return model

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 4  # a model that fails is reported by the caller, in one line
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ort.set_default_logger_severity(4)
    if isinstance(model, (bytes, str)):
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    from ..onnx_io.weights import ort_initializers

    names, values = ort_initializers(model)  # weights kept out of the model: ORT reads them in place
    if names:
        opts.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(v) for v in values])
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    sess._taso_weights = values  # the OrtValues point into these arrays: they live as long as the session
    return sess


def ort_runner(session: Any, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """A callable running `session` once on the feeds it takes (feeds it has no input for are left out)."""
    wanted = {i.name for i in session.get_inputs()}
    own = {k: v for k, v in feeds.items() if k in wanted}
    return lambda: session.run(None, own)


def in_turn(runs: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """One callable running each of `runs` in turn, a call each (its `sessions`: how many). Where ONNX Runtime
    places a session's buffers moves its runs by several % (sessions of one decoder file: medians up to 6.6 %
    apart), so a model timed in one session is timed with its session's placement."""
    turn = itertools.cycle(runs)

    def run() -> Any:
        return next(turn)()

    run.sessions = len(runs)  # type: ignore[attr-defined]
    return run


def onnx_runner(entry: Any, feeds: Mapping[str, np.ndarray], threads: int = 2, spin: bool = False) \
        -> Callable[[], Any]:
    """A callable running `entry` (a model, its bytes or path, or a session) once; a list or tuple of them: each in
    turn (`in_turn`), every session but the first run once here, before any is timed."""
    if not isinstance(entry, (list, tuple)):
        return ort_runner(ort_session(entry, threads, spin=spin), feeds)
    runs = [ort_runner(ort_session(m, threads, spin=spin), feeds) for m in entry]
    for r in runs[1:]:
        r()
    return in_turn(runs)


def compare_onnx(original: Any, optimized: Any, feeds: Mapping[str, np.ndarray], threads: int = 2,
                 time_cap: float = DEFAULT_TIME_CAP, names: Sequence[str] = ("original", "optimized"),
                 spin: bool = False, **kwargs: Any) -> TimingResult:
    """Compare two ONNX models (ModelProto, bytes or path) in ONNX Runtime on the same feeds;
    `verdict` says whether the optimized one is faster. `kwargs` go to `compare`. The sessions' threads do not
    spin after a run unless `spin`: alternating with spinning threads, each session's run waits for the cores the
    other's idle threads hold, which adds noise (and an order effect) without changing which model is faster."""
    return compare_onnx_models([original, optimized], feeds, threads, time_cap, names, spin, **kwargs)


def compare_onnx_models(models: Sequence[Any], feeds: Mapping[str, np.ndarray], threads: int = 2,
                        time_cap: float = DEFAULT_TIME_CAP, names: Optional[Sequence[str]] = None,
                        spin: bool = False, **kwargs: Any) -> TimingResult:
    """`compare_onnx` for any number of models, each against the first (`TimingResult.between` for other pairs); a
    list or tuple in `models`: one model in several sessions, run in turn (`onnx_runner`)."""
    runs = [onnx_runner(m, feeds, threads, spin) for m in models]
    res = compare(*runs, names=names, time_cap=time_cap, **kwargs)
    res.sessions = min(getattr(r, "sessions", 1) for r in runs)
    return res


def vm_runner(executable: Any, args: Union[Mapping[str, np.ndarray], Sequence[np.ndarray]], device: Any = None,
              func: str = "main") -> Callable[[], Any]:
    """A callable running a built Relax executable's `func` once on `args` (a sequence in parameter order, or a
    dict whose values are in that order), waiting for the device."""
    import tvm
    from tvm import relax

    dev = device if device is not None else tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    values = list(args.values()) if isinstance(args, Mapping) else list(args)
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(v), dev) for v in values]
    f = vm[func]

    def run() -> Any:
        out = f(*tensors)
        dev.sync()
        return out

    return run


def compare_tvm(ex_a: Any, ex_b: Any, feeds: Union[Mapping[str, np.ndarray], Sequence[np.ndarray]],
                device: Any = None, time_cap: float = DEFAULT_TIME_CAP,
                names: Sequence[str] = ("original", "optimized"), func: str = "main", **kwargs: Any) -> TimingResult:
    """Compare two built Relax executables (tvm.compile results) in the VirtualMachine on `device` (default CPU)."""
    runs = [vm_runner(ex, feeds, device, func) for ex in (ex_a, ex_b)]
    return compare(*runs, names=names, time_cap=time_cap, **kwargs)
