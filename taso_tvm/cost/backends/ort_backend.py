"""Measure kernels in ONNX Runtime: each kernel a small ONNX model as the exporter writes it (weights as
initializers) run with the deployment's thread count, timed by ONNX Runtime's own profiler.

A kernel's cost is what it adds to a whole-model session: the summed kernel time of its ONNX Runtime nodes plus,
per node, the session's dispatch outside kernels (`ort_profile.dispatch_us`, measured once per machine and kept in
the cost cache). Left out is what a kernel does not pay inside a model: the `run` call itself, and the NCHWc
layout reorders ONNX Runtime wraps around a lone convolution.

The runs of a batch's kernels are interleaved: each kernel runs in BURSTS short bursts, round-robin with the other
kernels of its group, and its cost is the lowest burst's LOAD_QUANTILE. On a machine shared with other work, the
intra-op threads have all the cores some moments and not others (a parallel kernel then takes up to twice as
long, for the whole of one burst); kernels measured back to back, each in one burst, were each timed at a
different moment, and a rewrite was "cheaper" because its kernels met a quiet moment. Without the profiler (or if
it reports nothing) the wall time of `run` minus that of an empty model is used."""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from typing import Any, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import helper

from ...onnx_io.export import DEFAULT_MIN_OPSET
from ...progress import Progress
from ..cache import CostCache
from ..config import CostConfig
from ..device import cpu_identity
from ..kernel import KernelSig
from ..fusion import Partitioner
from ..ort_fusion import OrtGrouping
from ..onnx_kernel import UnsupportedOp, kernel_onnx, random_feeds
from .analytic import AnalyticBackend
from .base import Backend, Measurement
from .ort_profile import dispatch_us, profiled_runs
from .tvm_build import failure_reason

log = logging.getLogger(__name__)

MIN_KERNEL_MS = 1e-3  # the floor of a kernel's cost
# how a kernel is written and timed; in the cache scope, so a new form re-measures
KERNEL_FORM = "export_relax+fused+q20+ortgroups+nospin+bursts4+dispatch"
# the statistic of a burst's runs: a low quantile, because load from other processes only ever adds time (the median
# let one busy moment decide whether a fused kernel or its parts were cheaper)
LOAD_QUANTILE = 20
BURSTS = 4  # a kernel's runs come in this many bursts, interleaved with the other kernels of its group
INTERLEAVE = 24  # kernels measured together (sessions open at once)
DISPATCH_KEY = "ort-session-dispatch-us-per-node"  # the cost cache's row for `ort_profile.dispatch_us`


class OrtBackend(Backend):
    name = "ort"
    noisy = True

    def __init__(self, config: CostConfig):
        super().__init__(config)
        try:
            import onnxruntime as ort
        except ImportError:
            raise RuntimeError("the ort backend needs onnxruntime: pip install onnxruntime") from None

        self._ort = ort
        self.kind = config.target_kind
        if config.rpc:
            raise ValueError("the ort backend measures locally; rpc is for the tvm backend")
        if self.kind == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RuntimeError("onnxruntime here has no CUDAExecutionProvider: install onnxruntime-gpu or use "
                                   "target llvm")
            self.providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            self.providers = ["CPUExecutionProvider"]
        self._analytic = AnalyticBackend(config)
        self._overhead_ms: float = -1.0
        self._dispatch_us: Optional[float] = None
        self._cache: Optional[CostCache] = None
        self._tmp = tempfile.TemporaryDirectory(prefix="taso_ort_prof_")
        self._profiles = 0

    def scope(self) -> tuple[str, str, str, str]:
        device = cpu_identity(self.config.num_threads) if self.kind == "llvm" else \
            f"cuda:{self._ort.get_device()}:{self.config.num_threads}t"
        return (self.name, json.dumps(self.config.target_dict, sort_keys=True), device,
                f"onnxruntime={self._ort.__version__} kernels={KERNEL_FORM}")

    def grouping(self, partitioner: Partitioner, cache: Optional[CostCache]) -> OrtGrouping:
        """The units ONNX Runtime's session makes of a graph (`cost.ort_fusion`), learned with this backend's
        session options."""
        self._cache = cache  # (where the per-node dispatch is kept)
        opts = self.session_options()
        # the fusions only: at ORT_ENABLE_ALL the NCHWc layout pass renames every tensor of a chain of convolutions,
        # which reads as one fused node covering the whole chain (its fusions are those of ORT_ENABLE_EXTENDED)
        opts.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        return OrtGrouping(partitioner, opts, self.providers, cache, self.scope())

    def session_options(self) -> Any:
        """The options every session here is created with (threads, sequential, optimization level)."""
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = self.config.num_threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # as the never-slower guard times whole models (`runtime.timing`): threads that do not spin after a run
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return opts

    def session(self, model: onnx.ModelProto, profile_prefix: str = "") -> Any:
        opts = self.session_options()
        if profile_prefix:
            opts.enable_profiling = True
            opts.profile_file_prefix = profile_prefix
        return self._ort.InferenceSession(model.SerializeToString(), opts, providers=self.providers)

    def time_session(self, sess: Any, feeds: dict[str, np.ndarray]) -> float:
        """The LOAD_QUANTILE-th percentile of individually timed `run` calls in ms: `repeat` rounds of `number` runs (number adapts to
        fill min_repeat_ms when 0). A low quantile of single runs shrugs off the runs another process preempts."""
        names = [o.name for o in sess.get_outputs()]
        clock = time.perf_counter

        def run() -> None:  # plain run(): in onnxruntime 1.32 cheaper per call than run_with_ort_values
            sess.run(names, feeds)

        t0 = clock()
        run()
        run()
        est = max((clock() - t0) / 2, 1e-7)
        number = self.config.number or max(1, min(10000, int(math.ceil(self.config.min_repeat_ms / 1e3 / est))))
        samples = []
        for _ in range(max(3, self.config.repeat) * number):
            t0 = clock()
            run()
            samples.append(clock() - t0)
        return float(np.percentile(samples, LOAD_QUANTILE)) * 1e3

    def profiled_session(self, model: onnx.ModelProto) -> Any:
        """A session of `model` with the profiler on (its profile goes to this backend's temporary folder)."""
        self._profiles += 1
        return self.session(model, os.path.join(self._tmp.name, f"prof{self._profiles}"))

    @property
    def overhead_ms(self) -> float:
        """Time of a `run` call that does nothing (an Identity on one float)."""
        if self._overhead_ms < 0:
            x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
            y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
            g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "null", [x], [y])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", DEFAULT_MIN_OPSET)])
            m.ir_version = 8
            self._overhead_ms = self.time_session(self.session(m), {"x": np.zeros(1, np.float32)})
        return self._overhead_ms

    @property
    def dispatch_ms(self) -> float:
        """The session's time per node outside the kernels (ms): measured once per machine, kept in the cost cache
        (so a cold and a warm run add the same)."""
        if self._dispatch_us is None:
            scope = self.scope()
            hit = self._cache.get_many(scope, [DISPATCH_KEY]) if self._cache is not None else {}
            if DISPATCH_KEY in hit:
                self._dispatch_us = float(hit[DISPATCH_KEY])
            else:
                self._dispatch_us = dispatch_us(self.profiled_session)
                log.info("ONNX Runtime's dispatch per node: %.1f us", self._dispatch_us)
                if self._cache is not None:
                    self._cache.put_many(scope, [(DISPATCH_KEY, "session dispatch per node (us)", self._dispatch_us,
                                                  "ok", "")])
        return self._dispatch_us / 1e3

    @dispatch_ms.setter
    def dispatch_ms(self, ms: float) -> None:
        """Set the dispatch per node (e.g. one measured on the deployment machine)."""
        self._dispatch_us = ms * 1e3

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        out: dict[KernelSig, Measurement] = {}
        sigs = list(sigs)
        with Progress(len(sigs), "measuring kernels (ort)", self.config.progress) as p:
            for i in range(0, len(sigs), INTERLEAVE):
                group = sigs[i:i + INTERLEAVE]
                ready = {}
                for s in group:
                    got = self._prepare(s)
                    if isinstance(got, Measurement):
                        out[s] = got
                    else:
                        ready[s] = got
                out.update(self._time_group(ready))
                p.update(len(group), note=group[-1].label())
        return out

    def _prepare(self, sig: KernelSig) -> Union[Measurement, tuple[Any, dict]]:
        """The kernel's profiled session and feeds, or its Measurement where it has none."""
        if any(op == "opaque" for op in sig.ops):
            return Measurement(self._analytic.cost(sig), "analytic", "opaque node: analytic cost")
        try:
            model = kernel_onnx(sig)
        except UnsupportedOp as e:
            log.info("kernel %s has no ONNX form (%s): costed by the analytic model", sig.label(), e)
            return Measurement(self._analytic.cost(sig), "analytic", str(e))
        except Exception as e:  # noqa: BLE001  (Relax refuses to lower it: a kernel no model can contain)
            self.counters.build_failures += 1
            log.warning("kernel failed to lower to Relax, it costs inf: %s | %s", sig.label(), failure_reason(e))
            return Measurement(math.inf, "build_failed", failure_reason(e))
        try:
            sess = self.profiled_session(model)
            self.counters.builds += 1
        except Exception as e:  # noqa: BLE001
            self.counters.build_failures += 1
            log.warning("kernel failed to load in onnxruntime, it costs inf: %s | %s", sig.label(), failure_reason(e))
            return Measurement(math.inf, "build_failed", failure_reason(e))
        return sess, random_feeds(sig)

    def _time_group(self, ready: dict[KernelSig, tuple[Any, dict]]) -> dict[KernelSig, Measurement]:
        """Run the kernels' sessions in BURSTS rounds, one burst of each kernel per round (see the module
        docstring); each kernel's cost from its profile."""
        out: dict[KernelSig, Measurement] = {}
        plan: dict[KernelSig, tuple[Any, dict, list, int]] = {}
        for s, (sess, feeds) in ready.items():
            names = [o.name for o in sess.get_outputs()]
            try:
                t0 = time.perf_counter()
                sess.run(names, feeds)
                sess.run(names, feeds)
                est = max((time.perf_counter() - t0) / 2, 1e-7)
            except Exception as e:  # noqa: BLE001
                out[s] = self._run_failed(s, e)
                continue
            total_ms = max(3, self.config.repeat) * self.config.min_repeat_ms
            n = self.config.number or max(1, min(2000, int(math.ceil(total_ms / 1e3 / BURSTS / est))))
            plan[s] = (sess, feeds, names, n)
        for _ in range(BURSTS):
            for s, (sess, feeds, names, n) in list(plan.items()):
                try:
                    for _ in range(n):
                        sess.run(names, feeds)
                except Exception as e:  # noqa: BLE001
                    out[s] = self._run_failed(s, e)
                    del plan[s]
        for s, (sess, feeds, names, n) in plan.items():
            path = sess.end_profiling()
            runs = profiled_runs(path, skip=2)  # (the two runs that estimated the burst)
            os.remove(path)
            if len(runs) == BURSTS * n and any(r.nodes for r in runs):
                best = min(float(np.percentile([r.kernel_us for r in runs[b * n:(b + 1) * n]], LOAD_QUANTILE))
                           for b in range(BURSTS))
                nodes = int(np.median([r.nodes for r in runs]))
                ms = best / 1e3 + nodes * self.dispatch_ms
            else:  # no profiler events: wall time minus an empty run
                ms = self.time_session(sess, feeds) - self.overhead_ms
            self.counters.measurements += 1
            out[s] = Measurement(max(ms, MIN_KERNEL_MS))
        return out

    def _run_failed(self, sig: KernelSig, e: Exception) -> Measurement:
        self.counters.run_failures += 1
        log.warning("kernel failed to run in onnxruntime, it costs inf: %s | %s", sig.label(), failure_reason(e))
        return Measurement(math.inf, "run_failed", failure_reason(e))

    def close(self) -> None:
        self._tmp.cleanup()
