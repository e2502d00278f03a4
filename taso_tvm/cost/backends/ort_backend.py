"""Measure kernels in ONNX Runtime: each kernel a small ONNX model (weights as initializers) run with the
deployment's thread count. The fixed cost of one `run` call (measured on an Identity model) is subtracted:
inside a whole-model session a kernel pays only its node's dispatch, not a session call."""
from __future__ import annotations

import json
import logging
import math
import time
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper

from ..config import CostConfig
from ..device import cpu_identity
from ..kernel import KernelSig
from ..onnx_kernel import UnsupportedOp, kernel_onnx, random_feeds
from ..progress import Progress
from .analytic import AnalyticBackend
from .base import Backend, Measurement
from .tvm_build import one_line

log = logging.getLogger(__name__)

MIN_KERNEL_MS = 1e-3  # a node's dispatch inside a session: the floor after subtracting the call overhead


class OrtBackend(Backend):
    name = "ort"

    def __init__(self, config: CostConfig):
        super().__init__(config)
        import onnxruntime as ort

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
                f"onnxruntime={self._ort.__version__}")

    def session(self, model: onnx.ModelProto) -> Any:
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = self.config.num_threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        return self._ort.InferenceSession(model.SerializeToString(), opts, providers=self.providers)

    def time_session(self, sess: Any, feeds: dict[str, np.ndarray]) -> float:
        """Median of individually timed `run` calls in ms: `repeat` rounds of `number` runs (number adapts to
        fill min_repeat_ms when 0). The median of single runs shrugs off the runs another process preempts."""
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
        return float(np.median(samples)) * 1e3

    @property
    def overhead_ms(self) -> float:
        """Time of a `run` call that does nothing (an Identity on one float)."""
        if self._overhead_ms < 0:
            x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
            y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
            g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "null", [x], [y])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
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
        try:
            sess = self.session(model)
            self.counters.builds += 1
        except Exception as e:  # noqa: BLE001
            self.counters.build_failures += 1
            log.warning("kernel failed to load in onnxruntime, it costs inf: %s | %s", sig.label(), one_line(e))
            return Measurement(math.inf, "build_failed", one_line(e))
        try:
            ms = self.time_session(sess, random_feeds(sig))
            self.counters.measurements += 1
        except Exception as e:  # noqa: BLE001
            self.counters.run_failures += 1
            log.warning("kernel failed to run in onnxruntime, it costs inf: %s | %s", sig.label(), one_line(e))
            return Measurement(math.inf, "run_failed", one_line(e))
        return Measurement(max(ms - self.overhead_ms, MIN_KERNEL_MS))
