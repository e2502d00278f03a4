"""Measure kernels in ONNX Runtime: each kernel a small ONNX model as the exporter writes it (weights as
initializers) run with the deployment's thread count, timed by ONNX Runtime's own profiler.

A kernel's cost is a low quantile (LOAD_QUANTILE) over runs of the summed kernel time of its ONNX Runtime nodes. That leaves out what a
kernel does not pay inside a whole-model session: the `run` call itself, and the NCHWc layout reorders ONNX Runtime
wraps around a lone convolution (in a model, consecutive convolutions stay in NCHWc). Without the profiler (or if
it reports nothing) the wall time of `run` minus that of an empty model is used."""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from typing import Any, Optional, Sequence

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
from .tvm_build import failure_reason

log = logging.getLogger(__name__)

MIN_KERNEL_MS = 1e-3  # a node's dispatch inside a session: the floor of a kernel's cost
LAYOUT_NODES = ("ReorderInput", "ReorderOutput")  # NCHWc conversions ORT adds around a lone conv
KERNEL_FORM = "export_relax+fused+q20+ortgroups"  # how a kernel is written and timed; in the cache scope, so a new form re-measures
# the statistic of a kernel's runs: a low quantile, because load from other processes only ever adds time (the median
# let one busy moment decide whether a fused kernel or its parts were cheaper)
LOAD_QUANTILE = 20


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

    def scope(self) -> tuple[str, str, str, str]:
        device = cpu_identity(self.config.num_threads) if self.kind == "llvm" else \
            f"cuda:{self._ort.get_device()}:{self.config.num_threads}t"
        return (self.name, json.dumps(self.config.target_dict, sort_keys=True), device,
                f"onnxruntime={self._ort.__version__} kernels={KERNEL_FORM}")

    def grouping(self, partitioner: Partitioner, cache: Optional[CostCache]) -> OrtGrouping:
        """The units ONNX Runtime's session makes of a graph (`cost.ort_fusion`), learned with this backend's
        session options."""
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
        return opts

    def session(self, model: onnx.ModelProto, profile_prefix: str = "", profile: bool = False) -> Any:
        """A session with this backend's options; profiling on with `profile` (its file in the temporary folder,
        `profile_prefix` there if given)."""
        opts = self.session_options()
        if profile_prefix or profile:
            opts.enable_profiling = True
            opts.profile_file_prefix = profile_prefix or os.path.join(tempfile.gettempdir(), "taso_ort_prof")
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

    def time_profiled(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray], sess: Any = None) -> float:
        """The LOAD_QUANTILE-th percentile over runs of the summed node kernel times (ms), layout reorders left out;
        -1 if no events. `sess`: a profiling session of `model` already made (`session(model, profile=True)`)."""
        with tempfile.TemporaryDirectory(prefix="taso_ort_prof_") as tmp:
            sess = sess if sess is not None else self.session(model, os.path.join(tmp, "prof"))
            names = [o.name for o in sess.get_outputs()]
            t0 = time.perf_counter()
            sess.run(names, feeds)
            sess.run(names, feeds)
            est = max((time.perf_counter() - t0) / 2, 1e-7)
            n = max(3, self.config.repeat) * (self.config.number or
                                              max(1, min(2000, int(math.ceil(self.config.min_repeat_ms / 1e3 / est)))))
            for _ in range(n):
                sess.run(names, feeds)
            path = sess.end_profiling()
            try:
                with open(path) as f:
                    events = json.load(f)
            finally:
                if os.path.dirname(os.path.abspath(path)) != os.path.abspath(tmp):  # a `session(profile=True)`'s
                    os.unlink(path)
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                      if e.get("cat") == "Session" and e.get("name") == "model_run")[2:]  # skip the warm-up runs
        nodes = sorted((e["ts"], e["dur"]) for e in events if e.get("cat") == "Node"
                       and str(e.get("name", "")).endswith("_kernel_time")
                       and not str(e.get("name", "")).startswith(LAYOUT_NODES))
        if not runs:
            return -1.0
        sums, k = [], 0
        for start, end in runs:
            total = 0
            while k < len(nodes) and nodes[k][0] < start:
                k += 1
            while k < len(nodes) and nodes[k][0] <= end:
                total += nodes[k][1]
                k += 1
            sums.append(total)
        return float(np.percentile(sums, LOAD_QUANTILE)) / 1e3

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

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        out: dict[KernelSig, Measurement] = {}
        with Progress(len(sigs), "measuring kernels (ort)", self.config.progress) as p:
            for s in sigs:
                out[s] = self._measure_one(s)
                p.update(note=s.label())
        return out

    def _measure_one(self, sig: KernelSig) -> Measurement:
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
            # the profiled session is the one timed: a plain one is made only where the profiler reports nothing
            sess = self.session(model, profile=True)
            self.counters.builds += 1
        except Exception as e:  # noqa: BLE001
            self.counters.build_failures += 1
            log.warning("kernel failed to load in onnxruntime, it costs inf: %s | %s", sig.label(), failure_reason(e))
            return Measurement(math.inf, "build_failed", failure_reason(e))
        try:
            feeds = random_feeds(sig)
            ms = self.time_profiled(model, feeds, sess)
            if ms < 0:  # no profiler events: wall time minus an empty run
                ms = self.time_session(self.session(model), feeds) - self.overhead_ms
            self.counters.measurements += 1
        except Exception as e:  # noqa: BLE001
            self.counters.run_failures += 1
            log.warning("kernel failed to run in onnxruntime, it costs inf: %s | %s", sig.label(), failure_reason(e))
            return Measurement(math.inf, "run_failed", failure_reason(e))
        return Measurement(max(ms, MIN_KERNEL_MS))
