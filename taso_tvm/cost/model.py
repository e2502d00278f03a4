"""The cost model: a graph's cost is the sum of its kernels' costs; each distinct kernel is measured once.

Lookups go memory -> persistent SQLite cache -> backend (one batch per call, built in parallel). Kernel
partitions (the backend's `grouping`: FuseOps' for TVM, ONNX Runtime's own fusions for ort, `ort_fusion`) and
signatures are memoized, so costing a graph whose kernels are known is
a partition (or a memo hit) plus dictionary lookups.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from ..graph.tensor_graph import TensorGraph
from .backends import Backend, Measurement, make_backend
from .cache import CostCache
from .config import CostConfig, load_cost_config
from .flops import nbytes_of
from .fusion import Partitioner
from .kernel import Kernel, KernelSig

log = logging.getLogger(__name__)

WHOLE_WEIGHT_BYTES = 512 << 20  # the weights a unit measured whole (`CostModel.settle`) may hold without its opaque nodes


def _weight_bytes(graph: TensorGraph, ids: Sequence[int]) -> int:
    """Bytes of the distinct weights the nodes `ids` read."""
    refs = {ref for i in ids for ref in graph.node(i).inputs if graph.node(ref[0]).op == "weight"}
    return sum(nbytes_of(graph.type(r).shape, graph.type(r).dtype) for r in refs)


@dataclass
class KernelReport:
    """One distinct kernel of a graph: how often it occurs and what one run costs (ms)."""

    sig: KernelSig
    count: int
    cost_ms: float

    @property
    def total_ms(self) -> float:
        return self.cost_ms * self.count


class CostModel:
    """`CostModel(load_cost_config("configs/cpu.yaml")).graph_cost(graph)` -> milliseconds."""

    def __init__(self, config: Optional[CostConfig] = None, *, backend: Optional[Backend] = None,
                 cache: Optional[CostCache] = None):
        self.config = config or load_cost_config()
        self.backend = backend or make_backend(self.config)
        self.partitioner = Partitioner()
        if cache is not None:
            self.cache: Optional[CostCache] = cache
        elif self.backend.cacheable and self.config.cache_path is not None:
            self.cache = CostCache(self.config.cache_path)
        else:
            self.cache = None
        self.scope = self.backend.scope()
        # the kernels the runtime will run: FuseOps' groups for TVM, ONNX Runtime's own session fusions for ort
        # (a backend that is not a `Backend`, e.g. a test's counting stand-in, groups as FuseOps does)
        grouping = getattr(self.backend, "grouping", None)
        self.grouping = grouping(self.partitioner, self.cache) if grouping else self.partitioner
        self._mem: dict[KernelSig, float] = {}
        self.details: dict[KernelSig, Measurement] = {}
        self.cache_hits = 0
        self.measure_seconds = 0.0  # time spent measuring kernels not in the cache (the tool-time report)

    # ------------------------------------------------------------------ kernels
    def kernels(self, graph: TensorGraph) -> tuple[Kernel, ...]:
        """The graph's kernels as the backend's runtime groups them (memoized): each with its signature and the node
        ids it covers."""
        return self.grouping.kernels(graph)

    def kernel_cost(self, sig: KernelSig) -> float:
        """Cost of one kernel in ms (measured if unknown)."""
        c = self._mem.get(sig)
        return c if c is not None else self.costs([sig])[sig]

    def costs(self, sigs: Iterable[KernelSig]) -> dict[KernelSig, float]:
        """Costs (ms) of kernels; unknown ones are looked up in the cache, the rest measured in one batch."""
        sigs = list(dict.fromkeys(sigs))
        missing = [s for s in sigs if s not in self._mem]
        if missing:
            self._fill(missing)
        return {s: self._mem[s] for s in sigs}

    def _fill(self, missing: list[KernelSig]) -> None:
        if self.cache is not None:
            hits = self.cache.get_many(self.scope, [s.key for s in missing])
            self.cache_hits += len(hits)
            for s in missing:
                if s.key in hits:
                    self._mem[s] = hits[s.key]
            missing = [s for s in missing if s not in self._mem]
        if not missing:
            return
        t0 = time.perf_counter()
        measured = self.backend.measure(missing)
        self.measure_seconds += time.perf_counter() - t0
        rows = []
        for s, m in measured.items():
            self._mem[s] = m.cost_ms
            self.details[s] = m
            if m.persistent:
                rows.append((s.key, s.label(), m.cost_ms, m.status, m.detail))
        if self.cache is not None and self.backend.cacheable:
            self.cache.put_many(self.scope, rows)

    # ------------------------------------------------------------------ graphs
    def graph_cost(self, graph: TensorGraph) -> float:
        """Sum of the graph's kernel costs in ms (inf if a kernel failed)."""
        ks = self.kernels(graph)
        mem = self._mem
        try:
            return math.fsum(mem[k.sig] for k in ks)
        except KeyError:
            self.costs(k.sig for k in ks)
            return math.fsum(mem[k.sig] for k in ks)

    def kernel_costs(self, graph: TensorGraph) -> list[tuple[Kernel, float]]:
        ks = self.kernels(graph)
        costs = self.costs(k.sig for k in ks)
        return [(k, costs[k.sig]) for k in ks]

    @property
    def noisy(self) -> bool:
        """Whether the costs are measurements (then the search settles near-equal graphs with `settle`)."""
        return bool(getattr(self.backend, "noisy", False))

    def whole_cost(self, graph: TensorGraph) -> float:
        """The graph measured as one unit (ms): what the runtime does with all of it at once, its own fusions
        across every kernel boundary included; cached by structure like any kernel."""
        sig = self._whole_sig(graph)
        return self.graph_cost(graph) if sig is None else self.kernel_cost(sig)

    def _whole_sig(self, graph: TensorGraph) -> Optional[KernelSig]:
        """The graph's kernels as one unit. Its opaque nodes (Relax expressions a runtime cannot be handed alone,
        which no rewrite changes: the same in every candidate) stay out, their inputs among the unit's outputs and
        their outputs among its inputs, so that the unit is measured, not estimated by the analytic model; up to
        WHOLE_WEIGHT_BYTES of weights (each candidate's unit is a session holding them all: a 7B model's layer
        measured so, four candidates at once, took 24 GB), beyond which it keeps them and the estimate."""
        ks = self.kernels(graph)
        if len(ks) <= 1:
            return None
        ids = sorted((i for k in ks for i in k.nodes), key={n.id: r for r, n in enumerate(graph.topo_order())}.get)
        opaque, users = {i for i in ids if graph.node(i).op == "opaque"}, {}
        if opaque and _weight_bytes(graph, ids) <= WHOLE_WEIGHT_BYTES:
            users = {ref: {o} for o in opaque for ref in graph.node(o).inputs}
            ids = [i for i in ids if i not in opaque]
        return self.partitioner.signature(graph, ids, users)[0] if len(ids) > 1 else None

    def settle(self, graphs: Sequence[TensorGraph], band: float) -> int:
        """Which of graphs whose summed costs are within the noise of each other to take: each is measured whole
        (those not measured before in one batch, so a measuring backend interleaves their runs and a busy moment
        slows them alike), and the first (the caller's preference) stays unless another is cheaper by more than
        `band` (relative), so that measurements a little apart, as a cold and a warm cache may hold, choose alike."""
        sigs = [self._whole_sig(g) for g in graphs]
        known = self.costs(s for s in sigs if s is not None)
        whole = [self.graph_cost(g) if s is None else known[s] for g, s in zip(graphs, sigs)]
        best = min(range(len(graphs)), key=lambda i: (whole[i], i))
        choice = best if whole[best] < whole[0] * (1 - band) else 0
        log.info("settled %d candidates within the noise, measured whole: %s -> #%d", len(graphs),
                 ", ".join(f"{w:.4g}" for w in whole), choice)
        return choice

    def remeasure(self, graphs: Sequence[TensorGraph]) -> int:
        """Measure again, in one batch, the kernels that some of `graphs` run and others do not (those that decide
        between them), replacing what memory and the persistent cache held: a kernel measured while the machine was
        busy would otherwise decide every later run the same way. Returns how many were measured: none where the
        costs are timings imported from another device (`CostConfig.device`), which this machine cannot measure."""
        if self.config.device:
            return 0
        sets = [{k.sig for k in self.kernels(g)} for g in graphs]
        differing = sorted(set().union(*sets) - set.intersection(*sets), key=lambda s: s.key)
        if not differing:
            return 0
        t0 = time.perf_counter()
        measured = self.backend.measure(differing)
        self.measure_seconds += time.perf_counter() - t0
        rows = []
        for s, m in measured.items():
            old, self._mem[s], self.details[s] = self._mem.get(s), m.cost_ms, m
            log.info("remeasured %s: %s -> %.4g ms", s.label(), "?" if old is None else f"{old:.4g}", m.cost_ms)
            if m.persistent:
                rows.append((s.key, s.label(), m.cost_ms, m.status, m.detail))
        if self.cache is not None and self.backend.cacheable:
            self.cache.put_many(self.scope, rows)
        return len(measured)

    def prefetch(self, graphs: Iterable[TensorGraph]) -> None:
        """Measure the kernels of many graphs in one batch (one parallel build)."""
        self.costs(k.sig for g in graphs for k in self.kernels(g))

    def report(self, graphs: Sequence[TensorGraph]) -> list[KernelReport]:
        """Distinct kernels of the graphs with counts and costs, most expensive (in total) first."""
        counts: dict[KernelSig, int] = {}
        for g in graphs:
            for k in self.kernels(g):
                counts[k.sig] = counts.get(k.sig, 0) + 1
        costs = self.costs(counts)
        rows = [KernelReport(s, n, costs[s]) for s, n in counts.items()]
        rows.sort(key=lambda r: -r.total_ms if math.isfinite(r.total_ms) else -math.inf)
        return rows

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self.backend.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> "CostModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
