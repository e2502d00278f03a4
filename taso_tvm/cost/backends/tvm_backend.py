"""Measure kernels built by TVM: each kernel a tiny Relax function compiled as the target's modules are (the CPU
schedules of `taso_tvm.schedule` on llvm, for the host CPU when the target names none; dlight on CUDA), timed with the VM's `time_evaluator`, locally or on a remote
device through a TVM RPC tracker.

The kernels of one batch are built in parallel (build_jobs - 1 spawned workers plus this process, each exporting a
library to a temporary directory); then they are measured one at a time in this process, so measurements do not
compete with each other or with builds for the cores.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import json
import logging
import math
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import tvm_ffi

from ..cache import CostCache
from ..config import DEFAULT_CUDA_ARCH, CostConfig, parse_rpc
from ..decomposed import DecomposedGrouping
from ..device import cpu_identity, cuda_identity
from ..fusion import Partitioner
from ..kernel import KernelSig
from ...errors import CostError
from ...progress import Progress
from .analytic import AnalyticBackend
from .base import Backend, Measurement
from .rpc import RpcError, connect
from .tvm_build import build_kernel, failure_reason, warm_up
from ...schedule.target import SCHEDULE_VERSION, with_host_cpu
from ...schedule.threads import set_num_threads
from ...quiet import sigint_blocked


class NoDeviceError(CostError, RuntimeError):
    """The kernels must be measured on a device this machine does not have (bad settings, not a bug)."""


tvm_ffi.register_error(NoDeviceError)  # raised inside the search pass: it crosses TVM's FFI with its own type

log = logging.getLogger(__name__)

BuildResult = tuple  # (library path or None, error or None, seconds)
MIN_POOL_BATCH = 6  # batches smaller than this build in this process while no worker pool is running
STAT_REPEATS = "min"  # the fastest repeat of `number` runs (`time_kernel`)
SINGLE_RUN_QUANTILE = 10
STAT_SINGLE = f"q{SINGLE_RUN_QUANTILE}-single"  # a low quantile of single runs (`time_kernel`)
MIN_SINGLE_RUNS, MAX_SINGLE_RUNS = 10, 2000
TIMED_OUT = "timed out"  # a build that ran out of time may succeed on a quieter machine: not cached


class TvmBackend(Backend):
    name = "tvm"
    noisy = True

    def __init__(self, config: CostConfig):
        super().__init__(config)
        import tvm

        self._tvm = tvm
        self.rpc = config.rpc or None
        self.target = dict(config.target_dict)
        self.kind = self.target["kind"]
        if self.kind == "cuda":
            self.target.setdefault("arch", self._local_cuda_arch() or DEFAULT_CUDA_ARCH)
        if self.kind == "llvm" and not self.rpc:
            self.target = with_host_cpu(self.target)  # measured here: build for this CPU, as the CLI does
        self.host: Optional[dict] = {"kind": "llvm"} if self.kind == "cuda" else None
        self._pool: Optional[cf.ProcessPoolExecutor] = None
        self._session: Any = None
        self._tmp = tempfile.TemporaryDirectory(prefix="taso_tvm_kernels_")
        self._serial = 0
        self._analytic = AnalyticBackend(config)
        self._arrays: dict[tuple, np.ndarray] = {}
        if self.kind == "llvm" and not self.rpc:
            self._set_threads(config.num_threads)

    # ------------------------------------------------------------------ identity
    def _local_cuda_arch(self) -> Optional[str]:
        if self.rpc:
            return None
        dev = self._tvm.cuda(0)
        return f"sm_{str(dev.compute_version).replace('.', '')}" if dev.exist else None

    def _set_threads(self, n: int) -> None:
        self.threads_used = set_num_threads(n)
        log.info("TVM cost backend: kernels measured with %d thread(s)", self.threads_used)

    def scope(self) -> tuple[str, str, str, str]:
        target = json.dumps({"target": self.target, "host": self.host}, sort_keys=True)
        if self.config.device:
            device = self.config.device  # timings measured elsewhere and imported (cost.kernel_exchange)
        elif self.rpc:
            device = f"rpc:{parse_rpc(self.rpc)[2]}:{self.kind}"
        elif self.kind == "cuda":
            device = cuda_identity()
        else:
            device = cpu_identity(self.config.num_threads)
        build = f"tvm={self._tvm.__version__};stat={self.stat}"
        if self.kind == "llvm":
            build += f";schedule={SCHEDULE_VERSION}"  # kernels built with other schedules are other kernels
        return (self.name, target, device, build)

    def grouping(self, partitioner: Partitioner, cache: Optional[CostCache]) -> DecomposedGrouping:
        """FuseOps on the graph with its fused operators lowered as the build lowers them (`cost.decomposed`):
        inline decompositions, attention kept whole on CUDA (`R.nn.attention`, as `TasoPass` lowers it there)."""
        return DecomposedGrouping(partitioner, "relax_attention" if self.kind == "cuda" else "decompose")

    # ------------------------------------------------------------------ building
    def _lib_path(self) -> str:
        self._serial += 1
        return str(Path(self._tmp.name) / f"k{self._serial}.{'tar' if self.rpc else 'so'}")

    def _get_pool(self, workers: int) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=workers,
                                                mp_context=multiprocessing.get_context("spawn"),
                                                initializer=warm_up)
        return self._pool

    def _drop_pool(self) -> None:
        if self._pool is not None:
            procs = list((getattr(self._pool, "_processes", None) or {}).values())
            manager = getattr(self._pool, "_executor_manager_thread", None)
            self._pool.shutdown(wait=False)  # queued work fails with the workers (no cancel: CPython gh-107219)
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:  # reaped now, and the pool's thread gone, so nothing is left for interpreter exit
                p.join(5)
            if manager is not None:
                manager.join(5)
            self._pool = None

    def build(self, sigs: Sequence[KernelSig], progress: Optional[Progress] = None) -> dict[KernelSig, BuildResult]:
        """Build each kernel to a library file. With build_jobs = N, N - 1 spawned workers take kernels from the
        front of the list while this process builds from the back (no idle parent, one spawn fewer). Workers are
        fed a few kernels at a time, so nothing queued has to be cancelled. A worker that dies (out of memory,
        say) takes its queued kernels with it: those are rebuilt one at a time in a fresh worker, so only a
        kernel that crashes alone fails."""
        results: dict[KernelSig, BuildResult] = {}
        jobs = collections.deque((s, self._lib_path()) for s in sigs)
        workers = self.config.num_build_jobs - 1
        # a worker costs a TVM import (seconds): small batches build here unless the pool is already up
        if workers < 1 or len(jobs) <= 1 or (self._pool is None and len(jobs) < MIN_POOL_BATCH):
            for s, path in jobs:
                self._build_here(s, path, results, progress)
            return results
        pool = self._get_pool(workers)
        in_flight: dict[cf.Future, tuple] = {}
        crashed: list[tuple] = []

        def feed() -> None:
            while not crashed and jobs and len(in_flight) < 2 * workers:
                s, path = jobs.popleft()
                with _main_module_hidden():  # workers are spawned during submit
                    in_flight[pool.submit(build_kernel, (s.nodes, s.inputs, s.outputs), self.target, self.host,
                                          path)] = (s, path)

        def collect(timeout: float) -> bool:
            done, _ = cf.wait(in_flight, timeout=timeout, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                s, path = in_flight.pop(fut)
                try:
                    results[s] = fut.result()
                except Exception:  # noqa: BLE001  (the worker died)
                    crashed.append((s, path))
                    continue
                self._after_build(s, results[s], progress)
            return bool(done)

        feed()
        while jobs:
            s, path = jobs.pop()
            self._build_here(s, path, results, progress)
            collect(0)
            feed()
        deadline = time.monotonic() + self.config.build_timeout_s
        while in_flight and collect(max(0.0, deadline - time.monotonic())):
            pass
        if in_flight:
            log.warning("kernel builds did not finish within %.0f s", self.config.build_timeout_s)
        if crashed or in_flight:
            self._drop_pool()
        for s, path in crashed:
            self.counters.extra["crash_retries"] = self.counters.extra.get("crash_retries", 0) + 1
            results[s] = self._build_isolated(s, path)
            self._after_build(s, results[s], progress)
        for s, _ in in_flight.values():
            results[s] = (None, f"{TIMED_OUT}: build did not finish within {self.config.build_timeout_s:.0f} s", 0.0)
            self._after_build(s, results[s], progress)
        return results

    def _build_isolated(self, s: KernelSig, path: str) -> BuildResult:
        """Build one kernel alone in the worker pool (a new one after a crash); with nothing else in flight, a
        crash can only be this kernel's."""
        pool = self._get_pool(max(1, self.config.num_build_jobs - 1))
        with _main_module_hidden():
            fut = pool.submit(build_kernel, (s.nodes, s.inputs, s.outputs), self.target, self.host, path)
        try:
            return fut.result(timeout=self.config.build_timeout_s)
        except cf.TimeoutError:
            self._drop_pool()
            return None, f"{TIMED_OUT}: build did not finish within {self.config.build_timeout_s:.0f} s", 0.0
        except Exception as e:  # noqa: BLE001  (it crashed its worker even alone: a failed kernel)
            self._drop_pool()
            return None, f"build process failed: {failure_reason(e)}", 0.0

    def _build_here(self, s: KernelSig, path: str, results: dict, progress: Optional[Progress]) -> None:
        results[s] = build_kernel((s.nodes, s.inputs, s.outputs), self.target, self.host, path)
        self._after_build(s, results[s], progress)

    def _after_build(self, sig: KernelSig, res: BuildResult, progress: Optional[Progress]) -> None:
        self.counters.builds += 1
        if res[0] is None:
            self.counters.build_failures += 1
            log.warning("kernel failed to build, it costs inf: %s | %s | signature %s", sig.label(), res[1],
                        sig.key[:16])
        if progress is not None:
            progress.update(note=sig.label())

    # ------------------------------------------------------------------ measuring
    def _device(self):
        if self.rpc:
            if self._session is None:
                self._session = connect(self.rpc, self.config.rpc_timeout_s)
            return self._session.cpu(0) if self.kind == "llvm" else self._session.cuda(0)
        dev = self._tvm.cpu(0) if self.kind == "llvm" else self._tvm.cuda(0)
        if not dev.exist and self.config.device:
            raise NoDeviceError(f"kernels missing from the timings of device '{self.config.device}' and no CUDA "
                               f"device here: export them (taso-tvm cost export-kernels), time them on that device "
                               f"and import the timings")
        if not dev.exist:
            raise NoDeviceError("no CUDA device on this machine to measure CUDA kernels on: build with "
                                "--cost-backend analytic, measure through RPC (the cost config's rpc: HOST:PORT:KEY), "
                                "or time the kernels on a GPU machine (taso-tvm cost export-kernels) and load them "
                                "with taso-tvm cost import-timings")
        return dev

    def _load(self, path: str):
        if self.rpc:
            self._session.upload(path)
            return self._session.load_module(os.path.basename(path))
        return self._tvm.runtime.load_module(path)

    def _array(self, shape: tuple, dtype: str) -> np.ndarray:
        key = (shape, dtype)
        arr = self._arrays.get(key)
        if arr is None:
            rng = np.random.default_rng(len(self._arrays))
            if np.issubdtype(np.dtype(dtype), np.floating):
                arr = (rng.standard_normal(shape) * 0.1).astype(dtype)
            else:
                arr = np.zeros(shape, dtype)
            self._arrays[key] = arr
        return arr

    def time_kernel(self, path: str, sig: KernelSig) -> float:
        """Time of one run in ms, as `stat` says: on the local CPU a low quantile of single runs (enough to fill
        `repeat` x min_repeat_ms), elsewhere the fastest of `repeat` repeats of `number` runs (number adapts to
        min_repeat_ms when 0). Load from other processes only ever adds time, and on a shared machine it lands on
        whole repeats: the median (or the fastest) of three 20 ms repeats was cached at 2-30x the kernel's time (a
        matmul+add [1,128,256] at 11 ms against 0.3-0.9 ms in the built model), and the search took it for gains."""
        from tvm import relax

        dev = self._device()
        vm = relax.VirtualMachine(self._load(path), dev)
        bound = self.kind == "llvm" and not all(w for _, _, w in sig.inputs)  # see tvm_build.bind_weights
        args = [self._tvm.runtime.tensor(self._array(tuple(s), d), dev) for s, d, w in sig.inputs
                if not (bound and w)]
        repeat = max(3, self.config.repeat)
        if self.stat != STAT_REPEATS:
            est = min(vm.time_evaluator("main", dev, number=1, repeat=3)(*args).results)
            runs = int(min(MAX_SINGLE_RUNS, max(MIN_SINGLE_RUNS, math.ceil(
                repeat * self.config.min_repeat_ms / 1e3 / max(est, 1e-7)))))
            res = vm.time_evaluator("main", dev, number=1, repeat=runs)(*args)
            return float(np.percentile(list(res.results), SINGLE_RUN_QUANTILE)) * 1e3
        number = self.config.number or 1
        min_ms = 0 if self.config.number else int(math.ceil(self.config.min_repeat_ms))
        res = vm.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_ms)(*args)
        return float(min(res.results)) * 1e3

    @property
    def stat(self) -> str:
        """The statistic a kernel's time is (in the cache scope, so a new one re-measures)."""
        if self.kind == "llvm" and not self.rpc and not self.config.number and not self.config.device:
            return STAT_SINGLE
        return STAT_REPEATS

    def measure(self, sigs: Sequence[KernelSig]) -> dict[KernelSig, Measurement]:
        out: dict[KernelSig, Measurement] = {}
        todo = []
        for s in sigs:
            if any(op == "opaque" for op in s.ops):
                out[s] = Measurement(self._analytic.cost(s), "analytic", "opaque node: analytic cost")
                log.info("kernel %s holds an opaque Relax expression: costed by the analytic model", s.label())
            else:
                todo.append(s)
        if not todo:
            return out
        self._device()  # fail fast (unreachable tracker, no GPU) before spending time on builds
        todo.sort(key=self._analytic.cost, reverse=True)  # long builds and runs first
        with Progress(len(todo), "building kernels", self.config.progress) as p:
            built = self.build(todo, p)
        with Progress(len(todo), "measuring kernels", self.config.progress) as p:
            for s in todo:
                path, err, _ = built[s]
                if path is None:
                    status = "build_timeout" if (err or "").startswith(TIMED_OUT) else "build_failed"
                    out[s] = Measurement(math.inf, status, err or "")
                else:
                    out[s] = self._measure_one(s, path)
                    try:
                        os.remove(path)
                    except OSError:
                        pass
                p.update(note=s.label())
        return out

    def _measure_one(self, sig: KernelSig, path: str) -> Measurement:
        try:
            ms = self.time_kernel(path, sig)
            self.counters.measurements += 1
            return Measurement(ms)
        except RpcError:
            raise
        except Exception as e:  # noqa: BLE001
            self.counters.run_failures += 1
            if self.rpc:
                self._session = None  # reconnect next time
            reason = failure_reason(e)
            log.warning("kernel failed to run, it costs inf: %s | %s | signature %s", sig.label(), reason,
                        sig.key[:16])
            return Measurement(math.inf, "run_failed", reason)

    def close(self) -> None:
        self._drop_pool()
        self._session = None
        self._tmp.cleanup()


@contextlib.contextmanager
def _main_module_hidden():
    """Spawned workers re-run the parent's main script unless it is hidden from multiprocessing: hide it, so a
    script without an `if __name__ == "__main__":` guard (TASO's examples) can use the parallel builds."""
    main = sys.modules.get("__main__")
    if main is None:
        with sigint_blocked():
            yield
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    try:
        main.__dict__.pop("__file__", None)
        if "__spec__" in saved:
            main.__dict__["__spec__"] = None
        with sigint_blocked():  # workers start with Ctrl-C blocked: it is the parent's, which stops them
            yield
    finally:
        main.__dict__.update(saved)
