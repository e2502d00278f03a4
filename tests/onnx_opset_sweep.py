"""Export the ONNX node suite at requested opsets (``export_relax(mod, opset=N)``).

Every case that round-trips at the exporter's own opset (see ``onnx_node_suite.py``) is exported
again at each requested opset.  The result per opset is one of: *ok* (the model declares
exactly that opset, passes ``check_model(full_check=True)`` and ONNX Runtime reproduces the
case's expected outputs), *refused* (a one-line :class:`ExportError` naming the op that has
no form at that opset), or *bad* (anything else: an invalid model, wrong numbers, another
exception), which is a bug.

Test code (the slow opset test in ``test_export_opsets.py``), also a script:
``python tests/onnx_opset_sweep.py 11,13,17,18 [-k substr] [-v]``
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import onnx_node_suite as suite


@dataclasses.dataclass
class OpsetOutcome:
    ok: List[str] = dataclasses.field(default_factory=list)
    refused: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    bad: List[Tuple[str, str]] = dataclasses.field(default_factory=list)


def _check(model, case) -> Optional[str]:
    import onnx

    onnx.checker.check_model(model, full_check=True)
    rtol, atol = float(getattr(case, "rtol", 1e-3)), float(getattr(case, "atol", 1e-7))
    for outs, (_, expected) in zip(suite.ort_outputs(model, case), case.data_sets):
        r = suite.compare(outs, [suite.expected_array(e) for e in expected], rtol, atol)
        if r is not None:
            return r
    return None


def _opset_of(model) -> int:
    return [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]


def sweep(opsets: Sequence[int], pattern: Optional[str] = None) -> Tuple[Dict[int, OpsetOutcome], int, float]:
    """Outcomes per opset, the number of cases swept, and the time taken."""
    from onnx.backend.test.case.node import collect_testcases
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from taso_tvm.onnx_io.export import ExportError, export_relax

    t0 = time.time()
    out = {int(v): OpsetOutcome() for v in opsets}
    with suite.quiet():
        cases = collect_testcases(None)
    swept = 0
    for case in cases:
        if case.model is None or (pattern and pattern not in case.name) or suite.non_tensor_io(case.model):
            continue
        try:
            with suite.quiet():
                mod = relax.transform.FoldConstant()(from_onnx(case.model))
                if _check(export_relax(mod), case) is not None:
                    continue
        except Exception:  # not importable, or failing at the natural opset: the suite's business
            continue
        swept += 1
        for v, res in out.items():
            try:
                with suite.quiet():
                    m = export_relax(mod, opset=v)
            except ExportError as e:
                res.refused.append((case.name, str(e)))
                continue
            except Exception as e:  # noqa: BLE001 - any other exception is a bug to report
                res.bad.append((case.name, f"{type(e).__name__} escaped export_relax: {suite.first_line(e)}"))
                continue
            try:
                with suite.quiet():
                    r = f"declares opset {_opset_of(m)}" if _opset_of(m) != v else _check(m, case)
            except Exception as e:  # noqa: BLE001
                r = f"{type(e).__name__}: {suite.first_line(e)}"
            if r is None:
                res.ok.append(case.name)
            else:
                res.bad.append((case.name, r))
    return out, swept, time.time() - t0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("opsets", help="comma-separated opsets, e.g. 11,13,17,18")
    ap.add_argument("-k", default=None, help="only cases whose name contains this substring")
    ap.add_argument("-v", action="store_true", help="list the refusals too")
    a = ap.parse_args(argv)
    res, swept, dt = sweep([int(v) for v in a.opsets.split(",")], a.k)
    print(f"{swept} node-suite cases that round-trip at the natural opset; {dt:.0f}s")
    for v, r in res.items():
        print(f"opset {v}: ok {len(r.ok)}, refused {len(r.refused)}, bad {len(r.bad)}")
        for name, why in r.bad:
            print(f"  BAD {name}: {why}")
        if a.v:
            for name, why in r.refused:
                print(f"  refused {name}: {why}")
    return 1 if any(r.bad for r in res.values()) else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's taso_tvm
    sys.exit(main())
