"""`taso-tvm optimize` on the real-model set: every file goes through, passes the full checker, computes what the
original computed at two values of each symbolic dim, keeps its symbolic dims, and copies what was not rewritten
byte for byte."""
from __future__ import annotations

import json

import onnx
import pytest

import real_models as rm
from taso_tvm.cli import main
from util import assert_close, ort_run

SLOW = {"fcos", "mobilenet_v3"}  # fcos: 2400 nodes, a minute of probing on 2 cores; mobilenet_v3: room in the default suite (issue 35)


def _params():
    for m in rm.committed_models():
        marks = [pytest.mark.slow] if m.name in SLOW else []
        yield pytest.param(m, id=m.name, marks=marks)


@pytest.mark.parametrize("model", list(_params()))
def test_optimize_real_model(model, tmp_path, capsys):
    out_path, report_path = tmp_path / "out.onnx", tmp_path / "report.json"
    code = main(["optimize", str(model.path), "-o", str(out_path), "--cost-backend", "analytic", "--no-time-check",
                 "--report", str(report_path)])
    assert code == 0, capsys.readouterr().err
    original, out = model.load(), onnx.load(str(out_path))
    onnx.checker.check_model(out, full_check=True)
    for dims in model.dim_values():
        feeds = rm.feeds(model.entry, dims)
        assert_close(ort_run(out, feeds), ort_run(original, feeds), rtol=1e-3, atol=1e-4)
    for a, b in zip(original.graph.input, out.graph.input):  # symbolic dims survive
        assert a.SerializeToString() == b.SerializeToString()
    assert [o.name for o in out.graph.output] == [o.name for o in original.graph.output]
    extra = [o for o in out.opset_import if o not in list(original.opset_import)]
    assert [o for o in out.opset_import if o not in extra] == list(original.opset_import)
    assert {o.domain for o in extra} <= {"com.microsoft"}  # only for ONNX Runtime's fused operators
    assert all(any(n.domain == o.domain for n in out.graph.node) for o in extra)
    before = {n.SerializeToString() for n in original.graph.node}
    # the user's nodes as they were (or folded away; the tool's own are named taso_r... and taso_mask/...), but for
    # Shape nodes that read an earlier tensor of the same
    # shape (where the tensor they read went into a rewritten region) and nodes that no longer write a folded value
    changed = [n for n in out.graph.node if not n.name.startswith(("taso_r", "taso_mask/"))
               and n.SerializeToString() not in before]
    assert all(n.op_type == "Shape" or "" in n.output for n in changed), [n.name for n in changed]
    report = json.loads(report_path.read_text())
    assert report["nodes"] == len(original.graph.node) and 0 < report["nodes_searched"] <= report["nodes"]
    if not any(r["accepted"] for r in report["regions"]) and not report["nodes_folded"]:
        assert out.graph.SerializeToString() == original.graph.SerializeToString()
