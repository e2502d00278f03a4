"""erf as a polynomial the schedules vectorize, for llvm builds.

TVM legalizes `relax.erf` to `topi.erf`, which LLVM turns into a scalar call of libm's `erff` per element: it does
not vectorize and its time depends on the values (a GELU kernel [1,128,1024] took 5.1 ms on inputs of scale 0.1 and
8.7 ms on inputs of scale 1), so a kernel measured alone on the cost model's arrays and the same kernel inside the
model disagree, and the erf dominates every GELU layer. `topi.fast_erf` is the rational approximation ONNX Runtime
and Eigen use (clamped to [-4, 4], error below 1e-6): element-wise arithmetic that the injective and epilogue
rules vectorize, whose time does not depend on the data.

`legalize_passes(target)` is TVM's CPU legalization with that erf; it belongs where `P.legalize_passes` stood.
"""
from __future__ import annotations

import tvm
from tvm import relax, topi

FAST_DTYPES = ("float32", "float16")  # the dtypes topi.fast_erf computes; others keep TVM's erf


def _legalize_erf(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    dtype = str(call.args[0].ty.dtype)
    fn = topi.fast_erf if dtype in FAST_DTYPES else topi.erf
    return bb.call_te(fn, call.args[0], primfunc_name_hint="erf")


def legalize_passes(target: tvm.target.Target) -> list:
    """TVM's CPU legalization passes (`relax.backend.cpu_generic.pipeline.legalize_passes`) with erf legalized to
    `topi.fast_erf`."""
    from tvm.relax.backend.cpu_generic import pipeline as P

    passes = list(P.legalize_passes(target))
    return [relax.transform.LegalizeOps({"relax.erf": _legalize_erf})
            if isinstance(p, tvm.transform.Pass) and p.info.name == "LegalizeOps" else p for p in passes]
