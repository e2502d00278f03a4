"""The timing helper: interleaved rounds, the median-ratio interval and its verdicts, on a simulated clock (exact,
with drift), on real sleeping callables, in ONNX Runtime and in the Relax VM."""
import math
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso_tvm.runtime.timing import (FASTER, NOT_DIFFERENT, SLOWER, compare, compare_onnx, compare_onnx_models,
                             compare_tvm, in_turn, measure, median_ci, onnx_runner, ort_session)


class SimClock:
    """A virtual clock: simulated runs advance it by their cost x the machine's drift x noise."""

    def __init__(self, seed=0, drift=0.3, block=0.05):
        self.t = 0.0
        self.rng = np.random.default_rng(seed)
        self.drift, self.block = drift, block

    def __call__(self):
        return self.t

    def speed(self):  # blocks of `block` virtual seconds run up to `drift` slower or faster
        return 1.0 + self.drift * math.sin(7.0 * math.floor(self.t / self.block))

    def run(self, cost):
        def f():
            self.t += cost * self.speed() * self.rng.lognormal(0.0, 0.05)
        return f


def test_median_interval_is_the_binomial_order_statistics():
    x = np.arange(8.0)
    assert median_ci(x, 0.03) == (0.0, 7.0)  # P(all 8 on one side) = 2/256 <= 0.03
    assert median_ci(np.arange(7.0), 0.01) == (-math.inf, math.inf)  # 2/128 > 0.01: too few values
    lo, hi = median_ci(np.arange(100.0), 0.05)
    assert (lo, hi) == (39.0, 60.0)  # the textbook ranks 40 and 61 of 100
    # coverage: the interval holds the true median in >= 95 % of samples
    rng = np.random.default_rng(0)
    hits = sum(lo < 0 < hi for lo, hi in (median_ci(rng.standard_normal(25), 0.05) for _ in range(400)))
    assert hits >= 0.93 * 400
    # exact integer arithmetic: no float overflow at many rounds
    lo, hi = median_ci(rng.standard_normal(5000), 1e-6)
    assert -0.2 < lo < 0 < hi < 0.2


@pytest.mark.parametrize("cost_b,verdict", [(0.5e-3, FASTER), (2e-3, SLOWER)])
def test_a_2x_difference_is_found_in_the_right_direction_despite_drift(cost_b, verdict):
    clock = SimClock(drift=0.3)
    res = compare(clock.run(1e-3), clock.run(cost_b), timer=clock, time_cap=60)
    assert res.verdict == verdict and res.stopped_by == "confident"
    assert res.rounds <= 20
    assert res.ratio == pytest.approx(cost_b / 1e-3, rel=0.1)
    assert res.ci[0] <= res.ratio <= res.ci[1] and (res.ci_low, res.ci_high) == res.ci
    assert res.median_b / res.median_a == pytest.approx(res.ratios[0].ratio_of_medians)
    assert res.latencies[0].name == "A" and res.latencies[0].runs == res.rounds
    assert verdict in res.summary() and "\n" not in res.summary()


def test_a_10_percent_difference_under_30_percent_drift():
    clock = SimClock(seed=3, drift=0.3, block=0.004)
    res = compare(clock.run(1e-3), clock.run(0.9e-3), timer=clock, max_rounds=3000)
    assert res.verdict == FASTER and res.stopped_by == "confident"
    assert res.ratio == pytest.approx(0.9, rel=0.05) and res.ci[0] < 0.9 < res.ci[1]
    # the drift makes the runs' spread far wider than the difference: blocks of runs could not see it
    lat = res.latencies[0]
    assert (lat.p95 - lat.p5) / lat.median > 0.3


def test_equal_callables_are_not_different_until_the_round_cap():
    clock = SimClock(seed=1, drift=0.3)
    res = compare(clock.run(1e-3), clock.run(1e-3), timer=clock, max_rounds=2000)
    assert res.verdict == NOT_DIFFERENT and res.stopped_by == "rounds" and res.rounds == 2000
    assert res.ci[0] < 1 < res.ci[1] and res.ci[1] / res.ci[0] < 1.05


def test_equal_callables_stop_once_no_gain_worth_having_is_left():
    """With `min_gain`, a ratio whose interval shows the candidate cannot be that much faster needs no more rounds
    (the guard's early stop): still 'not different', decided long before the round cap."""
    clock = SimClock(seed=1, drift=0.3)
    res = compare(clock.run(1e-3), clock.run(1e-3), timer=clock, max_rounds=2000, min_gain=0.03)
    assert res.verdict == NOT_DIFFERENT and res.stopped_by == "confident" and res.rounds < 500
    assert 1 / 1.03 <= res.ci[0] < 1 < res.ci[1]
    # a real gain is still found (not stopped as equal): 10 % is beyond the margin
    res = compare(clock.run(1e-3), clock.run(0.9e-3), timer=clock, max_rounds=3000, min_gain=0.03)
    assert res.verdict == FASTER and res.stopped_by == "confident"


def test_the_seed_fixes_the_run_orders():
    orders = []
    for _ in range(2):
        log = []
        compare(lambda: log.append("a"), lambda: log.append("b"), lambda: log.append("c"), max_rounds=20, seed=7)
        orders.append(log)
    assert orders[0] == orders[1] and len(orders[0]) == 3 * 21  # one warm-up round, 20 timed ones
    assert len({tuple(orders[0][i:i + 3]) for i in range(0, 63, 3)}) > 1  # shuffled, not a fixed order


def test_real_sleeps_2x_faster_and_slower():
    def sleeper(s):
        return lambda: time.sleep(s)

    fast, slow = sleeper(0.001), sleeper(0.002)
    res = compare(slow, fast, names=["slow", "fast"], time_cap=5)
    assert res.verdict == FASTER and res.stopped_by == "confident" and res.ratio < 0.8
    assert res.latencies[1].median < res.latencies[0].median
    assert compare(fast, slow, time_cap=5).verdict == SLOWER


def test_real_equal_callables_stop_at_the_time_cap():
    def work():
        time.sleep(0.002)

    t0 = time.monotonic()
    res = compare(work, work, time_cap=1.0, confidence=0.999)
    assert res.verdict == NOT_DIFFERENT and res.stopped_by == "time"
    assert 1.0 <= res.seconds < 1.5 and time.monotonic() - t0 < 1.6
    assert res.rounds > 50


def test_slow_runs_go_on_past_the_time_cap_to_the_floor_of_rounds_within_its_cap():
    """Runs of 40 ms against a 0.1 s cap: without a floor the cap ends the run after 2 rounds; with a floor of 6
    rounds it goes on to 6; a floor cap of 0.3 s ends it sooner, at that cap."""
    def work():
        time.sleep(0.02)

    assert compare(work, work, time_cap=0.1, confidence=0.999).rounds <= 3
    res = compare(work, work, time_cap=0.1, confidence=0.999, floor_rounds=6, floor_cap=10.0)
    assert res.stopped_by == "time" and res.rounds == 6
    res = compare(work, work, time_cap=0.1, confidence=0.999, floor_rounds=50, floor_cap=0.3)
    assert res.stopped_by == "time" and 0.3 <= res.seconds < 0.5 and res.rounds < 50


def test_three_callables_compare_with_the_first_and_measure_alone():
    clock = SimClock(drift=0.1)
    res = compare(clock.run(1e-3), clock.run(0.5e-3), clock.run(1e-3), timer=clock, max_rounds=500)
    assert [r.verdict for r in res.ratios] == [FASTER, NOT_DIFFERENT]
    assert [r.candidate for r in res.ratios] == ["#1", "#2"] and res.stopped_by == "rounds"
    between = res.between(2, 1)  # #1 against #2, from the same rounds
    assert (between.baseline, between.candidate, between.verdict) == ("#2", "#1", FASTER)
    assert between.ratio == pytest.approx(0.5, rel=0.1) and res.between(0, 2).verdict == NOT_DIFFERENT
    clock = SimClock(drift=0.0)
    lat = measure(clock.run(2e-3), timer=clock, max_rounds=50)
    assert lat.runs == 50 and lat.median == pytest.approx(2e-3, rel=0.05) and lat.iqr > 0


def test_bad_arguments():
    f = lambda: None  # noqa: E731
    with pytest.raises(ValueError):
        compare()
    with pytest.raises(ValueError):
        compare(f, f, confidence=1.0)
    with pytest.raises(ValueError):
        compare(f, f, time_cap=0)
    with pytest.raises(ValueError):
        compare(f, f, names=["a"])
    with pytest.raises(ValueError):
        compare(f, max_rounds=5).ratio  # one callable: no ratio


def _matmul_chain(n, size=192):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((size, size)) / size ** 0.5).astype(np.float32), "w")
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"h{i}" if i < n - 1 else "y"]))
        prev = f"h{i}"
    g = helper.make_graph(nodes, f"chain{n}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_runtime_comparison_of_two_models():
    x = np.random.default_rng(1).standard_normal((192, 192)).astype(np.float32)
    feeds = {"x": x, "unused": x}  # a feed a model has no input for is left out
    res = compare_onnx(_matmul_chain(8), _matmul_chain(2), feeds, threads=1, time_cap=5)
    assert res.verdict == FASTER and res.ratio < 0.6
    assert [lat.name for lat in res.latencies] == ["original", "optimized"]
    sess = ort_session(_matmul_chain(1), threads=2)
    assert sess.get_session_options().intra_op_num_threads == 2


def test_a_model_in_several_sessions_runs_each_in_turn():
    calls = []
    run = in_turn([lambda i=i: calls.append(i) for i in range(3)])
    for _ in range(7):
        run()
    assert calls == [0, 1, 2, 0, 1, 2, 0] and run.sessions == 3
    x = np.random.default_rng(1).standard_normal((192, 192)).astype(np.float32)
    model = _matmul_chain(2)
    first = ort_session(model, threads=1)
    three = onnx_runner([first, model, model], {"x": x}, threads=1)
    assert three.sessions == 3
    w = numpy_helper.to_array(model.graph.initializer[0])
    for _ in range(4):  # every session computes the model
        np.testing.assert_allclose(three()[0], x @ w @ w, rtol=1e-4, atol=1e-4)
    res = compare_onnx_models([[_matmul_chain(8)] * 2, [model] * 2], {"x": x}, threads=1, time_cap=5)
    assert res.verdict == FASTER and res.ratio < 0.6


def test_relax_vm_comparison_of_two_executables():
    import tvm
    from tvm import relax

    def chain(n):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((32, 32), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                h = x
                for _ in range(n):
                    h = bb.emit(relax.op.matmul(h, x))
                out = bb.emit_output(h)
            bb.emit_func_output(out)
        t = tvm.target.Target({"kind": "llvm"})
        return tvm.compile(bb.get(), target=t, relax_pipeline=relax.get_default_pipeline(t))

    x = np.random.default_rng(2).standard_normal((32, 32)).astype(np.float32) / 32
    res = compare_tvm(chain(1), chain(6), {"x": x}, time_cap=5)
    assert res.verdict == SLOWER and res.ratio > 2


def test_a_race_drops_the_candidates_slower_than_the_leader_and_stops_sooner():
    """The guard's race: two candidates level with the original (never decided without a min gain) and one much
    faster. Without racing the run goes to the time cap; racing drops the level ones once they are shown slower than
    the leader and stops, confident, with the leader faster than the baseline."""
    costs = [1e-3, 1.0e-3, 1.0e-3, 0.8e-3]
    clock = SimClock(seed=1, drift=0.1)
    plain = compare(*(clock.run(c) for c in costs), timer=clock, time_cap=0.5)
    clock = SimClock(seed=1, drift=0.1)
    raced = compare(*(clock.run(c) for c in costs), timer=clock, time_cap=0.5, race=True)
    assert raced.stopped_by == "confident" and raced.ratios[2].verdict == FASTER
    assert raced.dropped == (1, 2) and raced.latencies[3].runs == raced.latencies[0].runs == raced.rounds
    assert raced.seconds < plain.seconds or plain.stopped_by == "time"
    # the dropped ones' ratios are those of the rounds they ran: finite, level with the baseline
    assert all(r.ratio == pytest.approx(1.0, rel=0.1) for r in raced.ratios[:2])
    assert raced.between(3, 1).verdict == SLOWER
    # the baseline is never dropped, even when it is the slowest
    clock = SimClock(seed=2, drift=0.1)
    res = compare(*(clock.run(c) for c in [1e-3, 0.5e-3, 0.8e-3]), timer=clock, time_cap=0.5, race=True)
    assert res.latencies[0].runs == res.rounds and res.dropped == (2,) and res.ratios[0].verdict == FASTER
