"""Tutorial 1: optimize an ONNX model and compare it with the original in ONNX Runtime.

What `taso-tvm optimize in.onnx -o out.onnx` does, from Python, with the report it keeps.

    python tutorials/01_optimize_onnx.py
"""
import onnx

from taso_tvm import zoo
from taso_tvm.runtime.check import check_onnx, random_feeds
from taso_tvm.onnx_opt import optimize_onnx
from taso_tvm.runtime.timing import compare_onnx

# Any ONNX file works the same way: model = onnx.load("model.onnx"). SqueezeNet 1.1 from the zoo here.
model = zoo.get_model("squeezenet")

# The search measures candidate kernels in ONNX Runtime (cost backend "auto" for ONNX output), checks every
# rewritten region against the original nodes, and times the whole result against the original: unless it is
# faster, the original comes back (time_cap bounds that timing).
optimized, report = optimize_onnx(model, settings={"budget": 10}, time_cap=10)
print(f"{report.searchable} of {report.nodes} nodes searched in {len(report.regions)} region(s)")
print("rules applied:", dict(report.rules_applied))
print("decision:", report.decision)

# Same function: compare outputs on random inputs (the CLI does this before writing anything).
feeds = random_feeds(model)
worst = check_onnx(model, optimized, feeds)
print("largest difference per output:", worst)

# Speed, measured the way the project measures it: single runs of both models alternating in random order,
# the median per-round ratio with its confidence interval.
timing = compare_onnx(model, optimized, feeds, threads=2, time_cap=5)
print(timing.summary())

# Without the guard you get the rewrite itself, whatever its speed (`--no-time-check` on the command line).
rewrite, _ = optimize_onnx(model, settings={"budget": 10}, time_check=False)
print("operators:", len(model.graph.node), "->", len(rewrite.graph.node))
onnx.checker.check_model(rewrite)

