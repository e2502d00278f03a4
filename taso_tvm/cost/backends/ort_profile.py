"""Read ONNX Runtime's profiler, and the session's time per node outside the kernels.

A kernel's own time comes from the profiler's `*_kernel_time` node events; a session also spends time between
nodes (the executor's dispatch, allocating the output), which a model pays once per node it runs.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper

LAYOUT_NODES = ("ReorderInput", "ReorderOutput")  # NCHWc conversions ORT adds around a lone conv
DISPATCH_CHAIN = 32  # nodes in the chain the per-node dispatch is measured on
DISPATCH_RUNS = 300
# the head of an event as ONNX Runtime writes its profile, one event a line (the node events' arguments, most of the
# file, are not read: decoding the whole JSON took a quarter of a small decoder's search)
EVENT_HEAD = re.compile(r'^\{"cat" : "(\w+)","pid" :\d+,"tid" :\d+,"dur" :(\d+),"ts" :(\d+),'
                        r'"ph" : "X","name" :"([^"]*)"', re.MULTILINE)
DISPATCH_RESOLUTION_US = 0.5  # the per-node dispatch is rounded to this, so a re-measurement rarely moves it


@dataclass
class ProfiledRun:
    """One `run` of a session: the summed kernel time of its nodes (us), how many nodes ran, the run's own time."""

    kernel_us: float
    nodes: int
    run_us: float


def profiled_runs(profile_path: str, skip: int = 0) -> list[ProfiledRun]:
    """The runs of a session's profile, in order, the first `skip` left out; layout reorders are not counted
    (in a model, consecutive convolutions stay in NCHWc)."""
    with open(profile_path) as f:
        text = f.read()
    events = [(cat, name, int(ts), int(dur)) for cat, dur, ts, name in EVENT_HEAD.findall(text)]
    if not events or len(events) != text.count("\n{"):  # not ONNX Runtime's layout, an event a line: the whole JSON
        events = [(e.get("cat"), str(e.get("name", "")), e["ts"], e["dur"]) for e in json.loads(text)
                  if "ts" in e and "dur" in e]
    runs = sorted((ts, ts + dur) for cat, name, ts, dur in events if cat == "Session" and name == "model_run")[skip:]
    nodes = sorted((ts, dur) for cat, name, ts, dur in events if cat == "Node" and name.endswith("_kernel_time")
                   and not name.startswith(LAYOUT_NODES))
    out, k = [], 0
    for start, end in runs:
        total, count = 0, 0
        while k < len(nodes) and nodes[k][0] < start:
            k += 1
        while k < len(nodes) and nodes[k][0] <= end:
            total += nodes[k][1]
            count += 1
            k += 1
        out.append(ProfiledRun(float(total), count, float(end - start)))
    return out


def _chain(n: int) -> onnx.ModelProto:
    """`n` element-wise nodes on a 16-float tensor: kernels that cost next to nothing, so what a run spends beyond
    them is the session's."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [16])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [16])
    names = ["x"] + [f"t{i}" for i in range(n - 1)] + ["y"]
    nodes = [helper.make_node("Neg" if i % 2 else "Abs", [names[i]], [names[i + 1]]) for i in range(n)]
    m = helper.make_model(helper.make_graph(nodes, "chain", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def dispatch_us(profiled_session: Callable[[onnx.ModelProto], Any]) -> float:
    """The time a session spends per node outside the node's kernel (us): from profiles of a chain of
    DISPATCH_CHAIN cheap nodes and of one such node, the median of (run - kernels) per run, the difference per
    node. `profiled_session(model)`: a session of `model` with profiling on."""
    gaps = []
    for n in (1, DISPATCH_CHAIN + 1):
        sess = profiled_session(_chain(n))
        feeds = {"x": np.ones(16, np.float32)}
        for _ in range(DISPATCH_RUNS):
            sess.run(None, feeds)
        runs = profiled_runs(sess.end_profiling(), skip=10)
        gaps.append(float(np.median([r.run_us - r.kernel_us for r in runs])))
    per_node = max(0.0, (gaps[1] - gaps[0]) / DISPATCH_CHAIN)
    return round(per_node / DISPATCH_RESOLUTION_US) * DISPATCH_RESOLUTION_US


__all__ = ["ProfiledRun", "profiled_runs", "dispatch_us", "LAYOUT_NODES"]
