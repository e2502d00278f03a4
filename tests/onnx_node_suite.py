"""Round-trip the ONNX backend node suite through TVM's importer and our exporter.

For every case of ``onnx.backend.test.case.node.collect_testcases(None)`` whose model TVM
imports: ``from_onnx`` -> ``FoldConstant`` -> :func:`export_relax` ->
``onnx.checker.check_model(full_check=True)`` -> ONNX Runtime on the case inputs ->
compare with the case's expected outputs (``np.testing.assert_allclose`` with the case's
rtol/atol).  A failing case is re-run in TVM itself (``tvm.compile`` + VM); if TVM's own
result is also wrong the case is *frontend-wrong* and excluded from the pass rate.

Test code (used by ``test_onnx_node_suite.py`` and ``onnx_opset_sweep.py``), also a script:
``python tests/onnx_node_suite.py [--docs docs/export_failures.md] [-k substr]``
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Sequence

import numpy as np

log = logging.getLogger(__name__)

PASS, FAIL, FRONTEND_WRONG, NOT_IMPORTABLE = "pass", "fail", "frontend-wrong", "not-importable"
# failing cases where neither reference can confirm the expected outputs: TVM cannot run the
# imported module *and* ONNX Runtime fails the same check on the original ONNX model
UNVERIFIABLE = "unverifiable"


@dataclasses.dataclass
class CaseResult:
    name: str
    onnx_ops: str
    status: str
    reason: str = ""
    relax_ops: str = ""
    seconds: float = 0.0


@dataclasses.dataclass
class SuiteResult:
    results: List[CaseResult]
    seconds: float

    def by_status(self, status: str) -> List[CaseResult]:
        return [r for r in self.results if r.status == status]

    @property
    def importable(self) -> int:
        return sum(r.status != NOT_IMPORTABLE for r in self.results)

    @property
    def passed(self) -> int:
        return len(self.by_status(PASS))

    @property
    def frontend_wrong(self) -> int:
        return len(self.by_status(FRONTEND_WRONG))

    @property
    def failed(self) -> int:
        return len(self.by_status(FAIL))

    @property
    def unverifiable(self) -> int:
        return len(self.by_status(UNVERIFIABLE))

    @property
    def denominator(self) -> int:
        return self.importable - self.frontend_wrong - self.unverifiable

    @property
    def strict_rate(self) -> float:
        """Pass rate with only frontend-wrong cases excluded (unverifiable counted as failed)."""
        return self.passed / max(self.importable - self.frontend_wrong, 1)

    @property
    def pass_rate(self) -> float:
        return self.passed / max(self.denominator, 1)

    def summary(self) -> str:
        return (f"node suite: {self.passed}/{self.denominator} passed ({100 * self.pass_rate:.1f}%) of "
                f"{self.importable} importable cases ({len(self.results)} total); "
                f"{self.frontend_wrong} frontend-wrong and {self.unverifiable} unverifiable excluded; "
                f"{self.failed} failed; strict rate (only frontend-wrong excluded) "
                f"{self.passed}/{self.importable - self.frontend_wrong} = {100 * self.strict_rate:.1f}%; "
                f"{self.seconds:.1f}s")


@contextmanager
def quiet() -> Iterator[None]:
    """Silence TVM / ONNX chatter (Python and C++ level) and the logging module."""
    from taso_tvm.quiet import quiet as quiet_streams

    logging.disable(logging.CRITICAL)
    try:
        with quiet_streams():
            yield
    finally:
        logging.disable(logging.NOTSET)


def first_line(e: BaseException) -> str:
    s = str(e).strip()
    for line in s.splitlines():
        line = line.strip()
        if line and not line.startswith("Traceback") and not line.startswith("File "):
            return f"{type(e).__name__}: {line[:300]}"
    return type(e).__name__


def compare(actual: list, expected: list, rtol: float, atol: float) -> Optional[str]:
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, (list, dict)) or e is None:
            return f"output {i}: non-tensor expected value"
        a = np.asarray(a)
        e = np.asarray(e)
        if a.shape != e.shape:
            return f"output {i}: shape {a.shape} != expected {e.shape}"
        if e.dtype.kind in "OSU":
            if not np.array_equal(a, e):
                return f"output {i}: values differ"
            continue
        try:
            np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind not in "fc" else a,
                                       e.astype(np.float64) if e.dtype.kind not in "fc" else e,
                                       rtol=rtol, atol=atol)
        except AssertionError as err:
            lines = [ln.strip() for ln in str(err).splitlines() if "Mismatched" in ln or "Max abs" in ln]
            if not lines:  # e.g. "x and y nan location mismatch"
                lines = [ln.strip() for ln in str(err).splitlines()
                         if ln.strip() and not ln.strip().startswith(("Not equal to tolerance", "x:", "y:"))][:1]
            return f"output {i}: values differ ({'; '.join(lines)[:200]})"
        except TypeError as err:
            return f"output {i}: {err}"
    return None


def _relax_ops(mod) -> str:
    import tvm
    from tvm import relax

    ops = collections.Counter()

    def visit(e):
        if isinstance(e, relax.Call):
            if isinstance(e.op, tvm.ir.Op):
                name = e.op.name.replace("relax.", "")
                if name == "call_tir":
                    name = f"call_tir({e.args[0].name_hint})"
                ops[name] += 1

    for gv in mod.get_global_vars():
        f = mod[gv]
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
    return ", ".join(sorted(ops))


def _tvm_run(mod, inputs) -> list:
    import tvm
    from tvm import relax

    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(np.asarray(x)) for x in inputs])

    def flat(r):
        if isinstance(r, (list, tuple)) or type(r).__name__ in ("Array", "Tuple"):
            out = []
            for x in r:
                out.extend(flat(x))
            return out
        if hasattr(r, "numpy"):
            return [r.numpy()]
        return [np.asarray(r)]

    return flat(res)


_EXOTIC_ELEMS = None


def _exotic_elems():
    """ONNX element types ONNX Runtime's Python API cannot return as numpy arrays."""
    global _EXOTIC_ELEMS
    if _EXOTIC_ELEMS is None:
        from onnx import TensorProto

        names = ["BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
                 "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"]
        _EXOTIC_ELEMS = {TensorProto.DataType.Value(n) for n in names if n in TensorProto.DataType.keys()}
    return _EXOTIC_ELEMS


def _to_numpy(v):
    import onnx
    from onnx import numpy_helper

    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    return np.asarray(v)


def _harness_model(model):
    """Test harness only: outputs of types ORT's Python API cannot return (bfloat16, float8,
    int4, ...) get an exact Cast to float32 appended, so they can be compared as numbers."""
    import onnx
    from onnx import TensorProto, helper

    exotic = _exotic_elems()
    outs = [o for o in model.graph.output if o.type.tensor_type.elem_type in exotic]
    if not outs:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.graph.output:
        if o.type.tensor_type.elem_type in exotic:
            inner = o.name + "__harness_in"
            for n in m.graph.node:
                n.output[:] = [inner if x == o.name else x for x in n.output]
                n.input[:] = [inner if x == o.name else x for x in n.input]
            m.graph.node.append(helper.make_node("Cast", [inner], [o.name], to=TensorProto.FLOAT))
            o.type.tensor_type.elem_type = TensorProto.FLOAT
    return m


def _feed_value(arr, elem):
    import onnxruntime as ort
    from onnx import TensorProto

    if elem in _exotic_elems():
        sub_byte = {getattr(TensorProto, n, -1): k for n, k in
                    (("INT4", 2), ("UINT4", 2), ("FLOAT4E2M1", 2), ("INT2", 4), ("UINT2", 4))}
        if elem in sub_byte:
            # ORT reads sub-byte types packed (low bits first) from a buffer with the logical shape
            per = sub_byte[elem]
            width = 8 // per
            raw = np.ascontiguousarray(arr).view(np.uint8).ravel() & ((1 << width) - 1)
            pad = (-raw.size) % per
            raw = np.concatenate([raw, np.zeros(pad, np.uint8)]).reshape(-1, per)
            packed = np.zeros(raw.shape[0], np.uint8)
            for j in range(per):
                packed |= (raw[:, j] << (j * width)).astype(np.uint8)
            buf = np.zeros(arr.size, np.uint8)
            buf[:packed.size] = packed
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(buf.reshape(arr.shape), elem)
        bits = {1: np.uint8, 2: np.uint16}.get(arr.dtype.itemsize, np.uint8)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(arr).view(bits), elem)
    return arr


def non_tensor_io(model: Any) -> bool:
    """True if the ONNX case has sequence / optional / map graph inputs or outputs."""
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            return True
    return False


def ort_outputs(model: Any, case: Any) -> list:
    """ONNX Runtime outputs of ``model`` on each of the case's input sets."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(_harness_model(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    elems = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    return [sess.run(None, {n: _feed_value(_to_numpy(v), elems[n]) for n, v in zip(names, inputs)})
            for inputs, _ in case.data_sets]


def _ort_check(model, case) -> Optional[str]:
    """None if ONNX Runtime reproduces the case's expected outputs on the *original* model."""
    for outs, (_, expected) in zip(ort_outputs(model, case), case.data_sets):
        r = compare(outs, [expected_array(e) for e in expected],
                     float(getattr(case, "rtol", 1e-3)), float(getattr(case, "atol", 1e-7)))
        if r is not None:
            return r
    return None


def expected_array(e: Any) -> np.ndarray:
    e = _to_numpy(e)
    if e.dtype.kind == "V" or e.dtype.name in ("bfloat16",) or e.dtype.name.startswith(("float8", "float4", "int4", "uint4", "int2", "uint2", "float6")):
        return e.astype(np.float32)
    return e


def run_case(case: Any, check_frontend: bool = True) -> CaseResult:
    import onnx
    import onnxruntime as ort
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from taso_tvm.onnx_io.export import ExportError, export_relax

    t0 = time.time()
    model = case.model
    ops = ",".join(sorted({n.op_type for n in model.graph.node}))
    res = CaseResult(case.name, ops, NOT_IMPORTABLE)
    try:
        with quiet():
            mod = from_onnx(model)
    except BaseException:  # noqa: BLE001 - importer failures of all kinds
        res.seconds = time.time() - t0
        return res
    try:
        with quiet():
            folded = relax.transform.FoldConstant()(mod)
    except Exception:
        folded = mod  # FoldConstant crashes on a few modules; export the unfolded one
    res.relax_ops = _relax_ops(folded)
    if non_tensor_io(model):
        res.status = FRONTEND_WRONG
        res.reason = "sequence/optional graph inputs or outputs imported as plain tensors"
        res.seconds = time.time() - t0
        return res
    rtol, atol = float(getattr(case, "rtol", 1e-3)), float(getattr(case, "atol", 1e-7))

    reason = None
    try:
        exported = export_relax(folded)
    except ExportError as e:
        reason = f"export: {e}"
    except Exception as e:  # noqa: BLE001
        reason = f"export crashed: {first_line(e)}"
    if reason is None:
        try:
            onnx.checker.check_model(exported, full_check=True)
        except Exception as e:  # noqa: BLE001
            reason = f"check_model: {first_line(e)}"
    sess = None
    elems = {}
    if reason is None:
        elems = {i.name: i.type.tensor_type.elem_type for i in exported.graph.input}
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            sess = ort.InferenceSession(_harness_model(exported).SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            reason = f"ORT load: {first_line(e)}"
    if reason is None:
        elems = {i.name: i.type.tensor_type.elem_type for i in exported.graph.input}
        for inputs, expected in case.data_sets:
            feed_names = [i.name for i in exported.graph.input]
            if len(feed_names) != len(inputs):
                reason = f"{len(feed_names)} graph inputs, case has {len(inputs)}"
                break
            try:
                feed = {n: _feed_value(_to_numpy(v), elems[n]) for n, v in zip(feed_names, inputs)}
                outs = sess.run(None, feed)
            except Exception as e:  # noqa: BLE001
                reason = f"ORT run: {first_line(e)}"
                break
            reason = compare(outs, [expected_array(e) for e in expected], rtol, atol)
            if reason is not None:
                reason = f"mismatch: {reason}"
                break
    if reason is None:
        res.status = PASS
    else:
        res.status = FAIL
        res.reason = reason
        if check_frontend:
            try:
                with quiet():
                    tvm_reason = None
                    for inputs, expected in case.data_sets:
                        np_inputs = [_to_numpy(i) for i in inputs]
                        tvm_out = _tvm_run(folded, np_inputs)
                        tvm_reason = compare(tvm_out, [expected_array(e) for e in expected], rtol, atol)
                        if tvm_reason is not None:
                            break
                if tvm_reason is not None:
                    res.status = FRONTEND_WRONG
                    # does the exported model at least reproduce TVM's (wrong) result?
                    agree = "n/a"
                    if sess is not None:
                        try:
                            feed = {n: _feed_value(a, elems[n]) for n, a in
                                    zip([i.name for i in exported.graph.input], np_inputs)}
                            d = compare(sess.run(None, feed), [expected_array(t) for t in tvm_out], 1e-4, 1e-5)
                            agree = "yes" if d is None else f"no ({d})"
                        except Exception as e:  # noqa: BLE001
                            agree = f"no ({first_line(e)})"
                    res.reason = f"TVM itself: {tvm_reason}; exporter: {reason}; export == TVM: {agree}"
            except Exception as e:  # noqa: BLE001
                res.reason = f"{reason} (TVM cannot run it: {first_line(e)})"
                try:
                    ort_reason = _ort_check(model, case)
                except Exception as e2:  # noqa: BLE001
                    ort_reason = first_line(e2)
                if ort_reason is not None:
                    res.status = UNVERIFIABLE
                    res.reason += f"; ORT on the original model: {ort_reason}"
                    # does the export at least behave like the original model in ORT?
                    try:
                        same = all(compare(a, b, 0, 0) is None for a, b in
                                   zip(ort_outputs(exported, case), ort_outputs(model, case)))
                        res.reason += f"; export == original in ORT: {'yes' if same else 'no'}"
                    except Exception:  # noqa: BLE001 - e.g. ORT has no kernel for either model
                        res.reason += "; ORT cannot run either model"
    res.seconds = time.time() - t0
    return res


def run_suite(pattern: Optional[str] = None, check_frontend: bool = True,
              progress: bool = False, stride: int = 1) -> SuiteResult:
    """Run the cases (those whose name holds `pattern`; every `stride`-th of them, a sample spread over all
    operators)."""
    from onnx.backend.test.case.node import collect_testcases

    t0 = time.time()
    with quiet():
        cases = collect_testcases(None)
    results = []
    for i, case in enumerate(cases):
        if (pattern and pattern not in case.name) or i % stride:
            continue
        r = run_case(case, check_frontend=check_frontend)
        results.append(r)
        if progress and r.status in (FAIL,):
            log.warning("[%d] %s: %s: %s", i, r.name, r.status, r.reason)
    return SuiteResult(results, time.time() - t0)


def write_failures_doc(result: SuiteResult, path: str) -> None:
    lines = [
        "# Relax -> ONNX exporter: ONNX node-suite failures",
        "",
        "Generated by `python tests/onnx_node_suite.py --docs docs/export_failures.md`",
        "(or by `TASO_TVM_UPDATE_DOCS=1 pytest tests/test_onnx_node_suite.py`). Each case of",
        "`onnx.backend.test.case.node.collect_testcases(None)` that TVM's `from_onnx` imports is",
        "round-tripped: import -> FoldConstant -> `export_relax` -> `check_model(full_check=True)`",
        "-> ONNX Runtime -> compared with the case's expected outputs (case rtol/atol).",
        "",
        f"**{result.summary()}**",
        "",
        "A failing case is *frontend-wrong* when TVM itself (tvm.compile + VM on the imported",
        "module) does not reproduce the expected outputs either; those are excluded from the",
        "pass rate and listed separately.",
        "",
        "## Exporter failures",
        "",
    ]

    def table(rows):
        out = ["| ONNX operator | case | Relax ops | reason |", "|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: (r.onnx_ops, r.name)):
            reason = r.reason.replace("|", "\\|").replace("\n", " ")
            out.append(f"| {r.onnx_ops} | `{r.name}` | {r.relax_ops.replace('|', '/')} | {reason} |")
        return out

    fails = result.by_status(FAIL)
    lines += table(fails) if fails else ["None."]
    lines += ["", "## Frontend-wrong cases (TVM's own result is wrong; excluded)", ""]
    fw = result.by_status(FRONTEND_WRONG)
    lines += table(fw) if fw else ["None."]
    lines += ["", "## Unverifiable cases (excluded)", "",
              "TVM cannot compile/run the imported module and ONNX Runtime fails the same comparison on",
              "the *original* ONNX model, so no runtime can confirm the expected outputs (sub-byte and",
              "float4 casts whose out-of-range behaviour differs between ORT and the reference, kernels",
              "ORT lacks). The exported node is the same ONNX operator as the original.", ""]
    uv = result.by_status(UNVERIFIABLE)
    lines += table(uv) if uv else ["None."]
    lines += ["", "## Notes", "",
              "* `export == TVM` tells whether ORT on the exported model reproduces TVM's own (wrong) result.",
              "  It does except for float8 casts of out-of-range / NaN / Inf values, where TVM's conversion",
              "  yields arbitrary bit patterns; the exporter emits the ONNX (saturating) Cast.",
              "* Batch-norm training mode: the frontend passes ONNX's momentum to Relax, whose running-stat",
              "  update weights momentum the other way; the exporter maps Relax's semantics exactly",
              "  (ONNX momentum = 1 - Relax momentum), so it reproduces TVM's (wrong) statistics.",
              "* Remaining exporter failures are ONNX Runtime kernel gaps for the exported (valid) ONNX,",
              "  e.g. no bfloat16 `Sub` kernel on CPU."]
    by_op = collections.Counter(r.onnx_ops for r in fails)
    if by_op:
        lines += ["", "## Failures per ONNX operator", "", "| ONNX operator | failures |", "|---|---|"]
        for op, n in sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"| {op} | {n} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    from taso_tvm.fileio import atomic_write_text

    atomic_write_text(path, "\n".join(lines) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", default=None, help="write the failure table to this markdown file")
    ap.add_argument("-k", default=None, help="only cases whose name contains this substring")
    ap.add_argument("--no-frontend-check", action="store_true")
    ap.add_argument("-v", action="store_true", help="print failures as they happen")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    res = run_suite(a.k, check_frontend=not a.no_frontend_check, progress=a.v)
    print(res.summary())
    for r in res.by_status(FAIL):
        print(f"FAIL {r.name} [{r.onnx_ops}]: {r.reason}")
    for r in res.by_status(FRONTEND_WRONG):
        print(f"FRONTEND-WRONG {r.name} [{r.onnx_ops}]: {r.reason}")
    for r in res.by_status(UNVERIFIABLE):
        print(f"UNVERIFIABLE {r.name} [{r.onnx_ops}]: {r.reason}")
    if a.docs:
        write_failures_doc(res, a.docs)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's taso_tvm
    sys.exit(main())
