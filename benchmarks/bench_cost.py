"""Cost-model quality and speed.

1. Ranking: over a set of equivalent candidate graphs (hand-made TASO-style rewrites of small DNN blocks: merged
   parallel convs/matmuls, enlarged kernels, BN folded or not, redundant transposes, two sizes each), the
   Spearman rank correlation between the cost model's graph cost and the measured end-to-end latency of the
   whole graph (TVM: compiled with the default pipeline; ORT: the graph as one ONNX model), the variants of one
   block timed in interleaved rounds (taso_tvm.runtime.timing.compare) so that machine drift cannot reorder them.
2. Speed: cold costing of ResNet-50 with the tvm backend on llvm (empty cache), warm costing (new model, same
   cache), and graph_cost on a graph whose kernels are known.

    python benchmarks/bench_cost.py [--backends tvm ort] [--skip-resnet] [--skip-rank]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

import numpy as np

from taso_tvm.cost import CostModel, load_cost_config
from taso_tvm.graph import NodeStore, TensorGraph, TensorType

THREADS = 2  # --threads; on a shared machine 1 gives steadier numbers (a parallel loop waits for its slowest thread)
FAMILY_SECONDS = 3.0  # time cap for timing one family of equivalent graphs
MIN_ROUNDS = 30  # rounds before the timing may stop early (its medians are the measured latencies)


# ------------------------------------------------------------------ candidate graphs
def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _w(S, shape, seed):
    return S.weight((_rng(seed).standard_normal(shape) * 0.1).astype(np.float32))


def seed_variants(c: int, hw: int) -> dict[str, TensorGraph]:
    """TASO's README example: relu(conv3(relu(conv3(x))) + relu(conv1(x))) and its rewrites."""
    out = {}
    for variant in ("orig", "enlarged", "merged", "transposes"):
        S = NodeStore()
        x = S.input("x", TensorType((1, c, hw, hw)))
        w1, w2, w3 = _w(S, (c, c, 3, 3), 1), _w(S, (c, c, 3, 3), 2), _w(S, (c, c, 1, 1), 3)
        if variant == "merged":  # one conv with [w1; enlarge(w3)] then split
            w3e = S.add("enlarge", [w3], kernel=(3, 3))[0]
            wm = S.add("concat", [w1, w3e], axis=0)[0]
            y = S.add("conv2d", [x, wm], padding=1, activation="relu")[0]
            a, b = S.add("split", [y], axis=1, sizes=(c, c))
        else:
            a = S.add("conv2d", [x, w1], padding=1, activation="relu")[0]
            w3u = S.add("enlarge", [w3], kernel=(3, 3))[0] if variant == "enlarged" else w3
            b = S.add("conv2d", [x, w3u], padding=1 if variant == "enlarged" else 0, activation="relu")[0]
        a = S.add("conv2d", [a, w2], padding=1)[0]
        if variant == "transposes":
            a = S.add("transpose", [S.add("transpose", [a], perm=(0, 2, 3, 1))[0]], perm=(0, 3, 1, 2))[0]
        out[f"seed{c}x{hw}-{variant}"] = TensorGraph(S, S.add("relu", S.add("add", [a, b])))
    return out


def bottleneck_variants(c: int, hw: int) -> dict[str, TensorGraph]:
    """ResNet bottleneck: conv-BN-relu x3 + residual, with BN as an operator or folded into the convs."""
    out = {}
    for variant in ("bn", "folded"):
        S = NodeStore()
        x = S.input("x", TensorType((1, 4 * c, hw, hw)))
        y = x
        for i, (cin, cout, k) in enumerate([(4 * c, c, 1), (c, c, 3), (c, 4 * c, 1)]):
            w = _w(S, (cout, cin, k, k), 10 + i)
            if variant == "bn":
                y = S.add("conv2d", [y, w], padding=k // 2)[0]
                params = [S.weight(np.abs(_rng(20 + i + j).standard_normal(cout)).astype(np.float32) + 0.5)
                          for j in range(4)]
                y = S.add("batchnorm", [y] + params)[0]
            else:
                y = S.add("conv2d", [y, w], padding=k // 2)[0]
                y = S.add("add", [y, _w(S, (1, cout, 1, 1), 30 + i)])[0]
            if i < 2:
                y = S.add("relu", [y])[0]
        out[f"bottleneck{c}x{hw}-{variant}"] = TensorGraph(S, S.add("relu", S.add("add", [y, x])))
    return out


def inception_variants(c: int, hw: int) -> dict[str, TensorGraph]:
    """Three parallel 1x1 convs on one input: separate, or merged into one conv and split."""
    out = {}
    for variant in ("separate", "merged"):
        S = NodeStore()
        x = S.input("x", TensorType((1, c, hw, hw)))
        ws = [_w(S, (c // 2, c, 1, 1), 40 + i) for i in range(3)]
        if variant == "merged":
            ys = S.add("split", S.add("conv2d", [x, S.add("concat", ws, axis=0)[0]], activation="relu"), axis=1,
                       sizes=(c // 2,) * 3)
        else:
            ys = [S.add("conv2d", [x, w], activation="relu")[0] for w in ws]
        out[f"inception{c}x{hw}-{variant}"] = TensorGraph(S, S.add("concat", list(ys), axis=1))
    return out


def attention_variants(seq: int, d: int) -> dict[str, TensorGraph]:
    """Q, K, V projections sharing an input: three matmuls, or one matmul on concatenated weights and a split."""
    out = {}
    for variant in ("separate", "merged"):
        S = NodeStore()
        x = S.input("x", TensorType((seq, d)))
        ws = [_w(S, (d, d), 50 + i) for i in range(3)]
        if variant == "merged":
            q, k, v = S.add("split", S.add("matmul", [x, S.add("concat", ws, axis=1)[0]]), axis=1, sizes=(d,) * 3)
        else:
            q, k, v = (S.add("matmul", [x, w])[0] for w in ws)
        s = S.add("softmax", S.add("matmul", [q, S.add("transpose", [k], perm=(1, 0))[0]]), axis=-1)[0]
        out[f"attention{seq}x{d}-{variant}"] = TensorGraph(S, S.add("matmul", [s, v]))
    return out


def candidates(scale: int = 1) -> dict[str, TensorGraph]:
    """20 graphs; `scale` multiplies spatial sizes and sequence lengths (ONNX Runtime runs these blocks in tens of
    microseconds at scale 1, where timer noise would rank them)."""
    graphs: dict[str, TensorGraph] = {}
    for c, hw in ((16, 28), (32, 14)):
        graphs.update(seed_variants(c, hw * scale))
    for c, hw in ((16, 14), (32, 7)):
        graphs.update(bottleneck_variants(c, hw * scale))
    for c, hw in ((48, 28), (96, 14)):
        graphs.update(inception_variants(c, hw * scale))
    for seq, d in ((64, 64), (128, 96)):
        graphs.update(attention_variants(seq * scale, d))
    return graphs


# ------------------------------------------------------------------ end-to-end latency
def _feeds(graph: TensorGraph) -> dict[str, np.ndarray]:
    rng = _rng(99)
    return {n.attrs["name"]: rng.standard_normal(n.types[0].shape).astype(n.types[0].dtype) for n in graph.inputs()}


def _runner(backend: str, graph: TensorGraph):
    """A callable running the whole graph once: built for llvm in the Relax VM, or as one ONNX model in ORT."""
    from taso_tvm.runtime.timing import ort_runner, ort_session, vm_runner

    feeds = _feeds(graph)
    if backend == "ort":
        from taso_tvm import export_onnx

        return ort_runner(ort_session(export_onnx(graph), THREADS), feeds)
    import tvm
    from tvm import relax

    from taso_tvm.relay_pass.lower import lower_to_function

    names = sorted(feeds)
    mod = tvm.IRModule({"main": lower_to_function(graph, params=names)})
    target = tvm.target.Target({"kind": "llvm"})
    ex = tvm.compile(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
    return vm_runner(ex, [feeds[n] for n in names])


def measured_ms(backend: str, graphs: dict[str, TensorGraph]) -> dict[str, float]:
    """End-to-end median latency (ms) of each graph; the graphs of one family are timed in interleaved rounds
    (taso_tvm.runtime.timing), so machine drift does not reorder them."""
    from taso_tvm.runtime.timing import compare

    families: dict[str, list] = {}
    for k in graphs:
        families.setdefault(k.split("-")[0], []).append(k)
    out = {}
    for keys in families.values():
        res = compare(*[_runner(backend, graphs[k]) for k in keys], names=keys, time_cap=FAMILY_SECONDS,
                      min_rounds=MIN_ROUNDS, warmup=3)
        out.update({lat.name: lat.median * 1e3 for lat in res.latencies})
    return out


def spearman(a, b) -> float:
    def ranks(x):
        x = np.asarray(x, float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):  # average ranks of ties
            m = x == v
            r[m] = r[m].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def rank_quality(backend: str, cache: str) -> float:
    graphs = candidates(scale=1 if backend == "tvm" else 4)
    cfg = load_cost_config(backend=backend, threads=THREADS, cache=cache, repeat=5)
    t0 = time.time()
    with CostModel(cfg) as cm:
        cm.prefetch(graphs.values())
        predicted = {k: cm.graph_cost(g) for k, g in graphs.items()}
    print(f"[{backend}] costed {len(graphs)} candidate graphs in {time.time() - t0:.1f} s")
    measured = measured_ms(backend, graphs)
    print(f"{'graph':36s} {'predicted ms':>12s} {'measured ms':>12s}")
    for k in graphs:
        print(f"{k:36s} {predicted[k]:12.3f} {measured[k]:12.3f}")
    rho = spearman([predicted[k] for k in graphs], [measured[k] for k in graphs])
    # within each family (rewrites of one block at one size): does the model pick the measured best?
    families: dict[str, list] = {}
    for k in graphs:
        families.setdefault(k.split("-")[0], []).append(k)
    hits = sum(min(ks, key=predicted.get) == min(ks, key=measured.get) for ks in families.values())
    print(f"[{backend}] Spearman rho (cost model vs end-to-end) = {rho:.3f} over {len(graphs)} graphs; "
          f"best variant picked in {hits}/{len(families)} families")
    return rho


def resnet_speed(cache: str) -> None:
    from taso_tvm import zoo
    from taso_tvm.onnx_io import load_onnx
    from taso_tvm.relay_pass.lift import lift_function

    g = lift_function(load_onnx(zoo.get_model("resnet50"))["main"])[0].graph
    cfg = load_cost_config(backend="tvm", target="llvm", threads=THREADS, cache=cache)
    t0 = time.time()
    with CostModel(cfg) as cm:
        total = cm.graph_cost(g)
        ks = cm.kernels(g)
        counters = cm.backend.counters
    cold = time.time() - t0
    print(f"ResNet-50 cold costing (tvm, llvm, empty cache): {cold:.1f} s for {len(ks)} kernels "
          f"({len({k.sig for k in ks})} distinct, {counters.builds} builds, {counters.measurements} measurements); "
          f"predicted {total:.1f} ms")
    t0 = time.time()
    with CostModel(cfg) as cm:
        assert cm.graph_cost(g) == total and cm.backend.counters.builds == 0
        warm = time.time() - t0
        t1 = time.perf_counter()
        for _ in range(10):
            cm.graph_cost(TensorGraph(g.store, g.outputs))  # new graph objects: full partition + lookups
        fresh = (time.perf_counter() - t1) / 10 * 1e3
        t1 = time.perf_counter()
        for _ in range(1000):
            cm.graph_cost(g)
        memo = (time.perf_counter() - t1) / 1000 * 1e3
    print(f"ResNet-50 warm costing (new model, same cache): {warm * 1e3:.0f} ms; graph_cost of a new graph object "
          f"with known kernels: {fresh:.2f} ms; of a seen graph: {memo * 1e3:.0f} us")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", nargs="+", default=["tvm", "ort"], choices=["tvm", "ort", "analytic"])
    p.add_argument("--skip-resnet", action="store_true")
    p.add_argument("--skip-rank", action="store_true")
    p.add_argument("--threads", type=int, default=THREADS, help="threads of TVM and ONNX Runtime (default 2)")
    args = p.parse_args()
    globals()["THREADS"] = args.threads
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_resnet:
            resnet_speed(os.path.join(tmp, "resnet.sqlite"))
        if not args.skip_rank:
            for b in args.backends:
                rank_quality(b, os.path.join(tmp, f"rank-{b}.sqlite"))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
