"""`taso-tvm cost MODEL.onnx`: each kernel's cost and the total (TASO's `cost()` / `print_measurements`).

`taso-tvm cost export-kernels MODEL.onnx --out DIR` and `taso-tvm cost import-timings DIR TIMINGS.json`: kernel
timings measured on another machine (a GPU without TVM's compiler) into the cost cache (cost.kernel_exchange).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from typing import Optional, Sequence

from ..cost.config import BACKENDS, load_cost_config
from ..errors import TasoError, is_interrupt, one_line
from .argtypes import OneLineParser, nonneg_int


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="taso-tvm cost", description="Cost of an ONNX model under the cost model: "
                                "one line per distinct kernel (TVM FuseOps grouping) and the total.")
    p.add_argument("model", help="ONNX file")
    p.add_argument("--backend", choices=list(BACKENDS), help="cost backend (default: from config)")
    p.add_argument("--target", help="llvm, cuda or a JSON target dict (default: from config)")
    p.add_argument("--config", help="cost config YAML (e.g. configs/cpu.yaml)")
    p.add_argument("--rpc", help="HOST:PORT:KEY of a TVM RPC tracker to measure on (tvm backend)")
    p.add_argument("--threads", type=nonneg_int, help="threads of the deployment")
    p.add_argument("--cache", help="cost cache file ('' for none)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and warnings")
    return p


def _graphs(path: str) -> list:
    from ..relay_pass.lift import lift_function

    mod = _load(path)
    return [b.graph for b in lift_function(mod["main"])]


def _finite(v):
    """JSON has no infinity: a failed kernel's cost prints as null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _exchange_parser(command: str) -> argparse.ArgumentParser:
    if command == "export-kernels":
        p = OneLineParser(
            prog="taso-tvm cost export-kernels",
            description="Build the kernels a search of MODEL would measure (those the cost cache lacks for the "
                        "device) for the target, into a folder that carries them, TVM's runtime and the script "
                        "that times them on the device (time_kernels.py).")
        p.add_argument("model", help="ONNX file")
        p.add_argument("--out", required=True, help="new folder to write")
        p.add_argument("--target", help="llvm, cuda or a JSON target dict (default: from config)")
        p.add_argument("--device", help="cache name of the device (as time_kernels.py printed it), so kernels "
                                        "already imported for it are not exported again")
        p.add_argument("--no-runtime", action="store_true", help="leave TVM's runtime out of the folder")
    else:
        p = OneLineParser(
            prog="taso-tvm cost import-timings",
            description="Store the timings time_kernels.py wrote on the device in the cost cache; then a search "
                        "with backend tvm, the export's target and `device: NAME` reads them as measured.")
        p.add_argument("folder", help="the folder export-kernels wrote")
        p.add_argument("timings", help="timings JSON written on the device")
    p.add_argument("--config", help="cost config YAML (e.g. configs/cuda.yaml)")
    p.add_argument("--cache", help="cost cache file (default: from config)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and warnings")
    return p


def _export_kernels(args: argparse.Namespace) -> int:
    from ..cost.kernel_exchange import export_kernels, recording_cost_model
    from ..relay_pass import TasoOptimize

    cfg = load_cost_config(args.config, target=args.target, cache=args.cache, device=args.device)
    mod = _load(args.model)
    with recording_cost_model(cfg) as cm:
        TasoOptimize(cost=cm, config=args.config)(mod)
        sigs = list(cm.backend.missing)
        known = cm.cache_hits
    if not sigs:
        print(f"nothing to export: the cache holds all {known} kernels the search asked for")
        return 0
    rep = export_kernels(sigs, cfg, args.out, runtime=not args.no_runtime)
    print(f"exported {rep.built} kernels ({len(rep.failed)} failed to build; {known} already in the cache) to "
          f"{rep.folder}, {rep.bytes / 2**20:.1f} MiB")
    print(f"on the device: cd {rep.folder.name} && TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime python3 time_kernels.py")
    return 0


def _import_timings(args: argparse.Namespace) -> int:
    from ..cost.kernel_exchange import import_timings

    cfg = load_cost_config(args.config, cache=args.cache)
    if cfg.cache_path is None:
        print("error: import-timings needs a cost cache file (--cache or the config's cache)", file=sys.stderr)
        return 2
    rep = import_timings(args.folder, args.timings, cfg.cache_path)
    print(f"imported {rep.measured} kernel timings of {rep.device} into {cfg.cache_path} ({rep.run_failed} "
          f"failed to run, {rep.build_failed} to build); search with backend tvm and device '{rep.device}'")
    return 0


def _exchange(command: str, argv: list) -> int:
    args = _exchange_parser(command).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from ..fileio import path_collision

    reads = [("--config", args.config)] + ([("the model", args.model)] if command == "export-kernels" else
                                           [("the timings", args.timings)])
    why = path_collision(reads, [("--cache", args.cache)] + ([("--out", args.out)] if command == "export-kernels"
                                                              else []))
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        return _export_kernels(args) if command == "export-kernels" else _import_timings(args)
    except TasoError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return e.exit_code


def _load(path: str):
    from ..onnx_io import load_onnx

    return load_onnx(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["cost"]:
        argv = argv[1:]
    if argv[:1] in (["export-kernels"], ["import-timings"]):
        return _exchange(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from ..cost.model import CostModel
    from ..fileio import path_collision

    why = path_collision([("the model", args.model), ("--config", args.config)], [("--cache", args.cache)])
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2

    try:
        cfg = load_cost_config(args.config, backend=args.backend, target=args.target, rpc=args.rpc,
                               threads=args.threads, cache=args.cache)
    except TasoError as e:  # a bad setting or a cache path that is not ours
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    try:
        graphs = _graphs(args.model)
    except Exception as e:  # noqa: BLE001  (load errors are one line already)
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    try:
        with CostModel(cfg) as cm:
            rows = cm.report(graphs)
            total = math.fsum(cm.graph_cost(g) for g in graphs)
            kernels = sum(len(cm.kernels(g)) for g in graphs)
            details = {r.sig: cm.details.get(r.sig) for r in rows}
    except TasoError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except (RuntimeError, ValueError) as e:
        if is_interrupt(e):  # TVM's text for a KeyboardInterrupt raised in one of our callbacks
            raise KeyboardInterrupt from None
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 1
    if args.json:
        out = {"model": args.model, "backend": cfg.backend, "target": cfg.target_dict, "total_ms": total,
               "kernels": kernels, "distinct_kernels": len(rows),
               "per_kernel": [{"kernel": r.sig.label(), "key": r.sig.key, "count": r.count, "cost_ms": r.cost_ms,
                               "total_ms": r.total_ms,
                               "status": details[r.sig].status if details[r.sig] else "cached"} for r in rows]}
        print(json.dumps(_finite(out), indent=1))
        return 0
    width = max([len(r.sig.label()) for r in rows] + [6])
    print(f"{'kernel':<{width}}  {'count':>5}  {'ms each':>10}  {'ms total':>10}")
    for r in rows:
        print(f"{r.sig.label():<{width}}  {r.count:>5}  {r.cost_ms:>10.4f}  {r.total_ms:>10.4f}")
    print(f"Cost metrics: exe_time(ms) = {total:.4f} over {kernels} kernels ({len(rows)} distinct), "
          f"backend {cfg.backend}, target {json.dumps(cfg.target_dict)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
