"""The safety net: the optimized model must compute what the original computes, on the same inputs.

One set of rules for every path (the CLI's optimize and compile, `TasoOptimize(check=True)`,
`taso_tvm.optimize(..., check=True)`):

- the outputs match by name, count and order; each has the original's shape and dtype;
- where the original is finite the result is finite, and non-finite values (NaN, +inf, -inf) sit where the
  original has the same ones;
- integer, bool and other non-float outputs are equal exactly; float outputs agree within
  `atol * max(1, max|reference|) + rtol * |reference|` (tolerances relative to the output's scale);
- tolerances are finite and >= 0 (a NaN tolerance would silently pass everything).

A difference raises `CheckFailed`; a check that cannot be run (bad tolerances, an original that does not load or
run, inputs that cannot be made) raises `CheckError`, a subclass: `except CheckFailed` catches every outcome
that is not "verified". Both carry one line naming the output (or model) and the reason.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from .. import errors as _errors
from .dim_expr import base_dims, dim_value

log = logging.getLogger(__name__)

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4
DEFAULT_DIM = 1  # value of a symbolic dim nobody named (1: exporters often bake a batch of 1 into reshapes)
INT_HIGH = 8  # random integer inputs lie in [0, INT_HIGH): valid indices for any axis of 8 or more

Feeds = Mapping[str, np.ndarray]


class CheckFailed(_errors.CheckRefused):
    """The optimized model differs from the original (or does not load or run where the original does)."""


class CheckError(CheckFailed, ValueError):
    """The check could not be run: bad tolerances, an original that does not load or run, inputs we cannot make."""


# ----------------------------------------------------------------------------------------- the rules
def check_tolerances(rtol: float, atol: float) -> None:
    """Raise CheckError unless both tolerances are finite numbers >= 0."""
    for name, v in (("rtol", rtol), ("atol", atol)):
        try:
            ok = math.isfinite(float(v)) and float(v) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise CheckError(f"{name} must be a finite number >= 0, got {v!r}")


def _index(flat: int, shape: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _value(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, (float, np.floating)) else str(v)


def compare_arrays(name: str, got: Any, want: Any, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> float:
    """Check one output against the original's by the rules above; returns the largest absolute difference."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise CheckFailed(f"output '{name}' has shape {tuple(got.shape)}, the original {tuple(want.shape)}")
    if got.dtype != want.dtype:
        raise CheckFailed(f"output '{name}' has dtype {got.dtype}, the original {want.dtype}")
    if want.size == 0:
        return 0.0
    if not np.issubdtype(want.dtype, np.inexact):  # ints, bools, strings: exactly equal
        diff = np.flatnonzero(want != got)
        if diff.size:
            i = int(diff[0])
            raise CheckFailed(f"output '{name}' differs from the original at {diff.size} of {want.size} elements, "
                              f"first at index {_index(i, want.shape)} ({_value(got.flat[i])} vs "
                              f"{_value(want.flat[i])})")
        return 0.0
    w = want.astype(np.complex128 if np.iscomplexobj(want) else np.float64)
    g = got.astype(w.dtype)
    finite = np.isfinite(w)
    same_nonfinite = (np.isnan(w) & np.isnan(g)) | (~np.isnan(w) & (w == g))
    bad = np.flatnonzero((~np.isfinite(g) & finite) | (~finite & ~same_nonfinite))
    if bad.size:
        i = int(bad[0])
        raise CheckFailed(f"output '{name}' is {_value(got.flat[i])} at index {_index(i, want.shape)} where the "
                          f"original is {_value(want.flat[i])} ({bad.size} such element(s) of {want.size})")
    if not finite.any():
        return 0.0
    scale = max(1.0, float(np.abs(w[finite]).max()))
    err = np.zeros(w.shape)
    err[finite] = np.abs(g[finite] - w[finite])
    bound = atol * scale + rtol * np.abs(np.where(finite, w, 0.0))
    over = err > bound
    if over.any():
        i = int(np.argmax(np.where(over, err, -1.0)))
        raise CheckFailed(f"output '{name}' differs from the original by up to {err.flat[i]:.3g} at index "
                          f"{_index(i, want.shape)} ({_value(got.flat[i])} vs {_value(want.flat[i])}; tolerance "
                          f"rtol={rtol:g}, atol={atol:g} x {scale:.3g}; {int(over.sum())} of {want.size} "
                          f"elements beyond it)")
    return float(err.max())


def compare_outputs(got: Mapping[str, Any], want: Mapping[str, Any], rtol: float = DEFAULT_RTOL,
                    atol: float = DEFAULT_ATOL) -> dict:
    """Check the optimized model's outputs `got` against the original's `want` (by name, count and order, then
    values); returns {name: largest absolute difference}."""
    check_tolerances(rtol, atol)
    missing = [k for k in want if k not in got]
    if missing:
        raise CheckFailed(f"output '{missing[0]}' is missing from the optimized model "
                          f"({len(got)} outputs, the original {len(want)})")
    extra = [k for k in got if k not in want]
    if extra:
        raise CheckFailed(f"the optimized model has an extra output '{extra[0]}' "
                          f"({len(got)} outputs, the original {len(want)})")
    if list(got) != list(want):
        raise CheckFailed(f"the outputs are in another order: {list(got)}, the original {list(want)}")
    return {k: compare_arrays(k, got[k], want[k], rtol, atol) for k in want}


def compare(names: Sequence[str], got: Sequence, want: Sequence, rtol: float = DEFAULT_RTOL,
            atol: float = DEFAULT_ATOL) -> dict:
    """`compare_outputs` for positional outputs (as a VM returns them), named by the original's `names`."""
    got, want = list(got), list(want)
    if len(got) != len(want) or len(names) != len(want):
        raise CheckFailed(f"the optimized model has {len(got)} outputs, the original {len(want)}")
    return compare_outputs(dict(zip(names, got)), dict(zip(names, want)), rtol, atol)


# ----------------------------------------------------------------------------------------- inputs
def random_array(shape: Sequence[int], dtype: Any, rng: np.random.Generator, binary: bool = False,
                 high: int = INT_HIGH) -> np.ndarray:
    """Standard-normal floats, integers in [0, high) (0 or 1 with `binary`), random bools."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or (binary and np.issubdtype(dtype, np.integer)):
        return rng.integers(0, 2, shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, high, shape).astype(dtype)
    raise CheckError(f"cannot make random inputs of dtype {dtype}")


def _onnx_model(model: Any) -> Any:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    from ..onnx_io import read_onnx

    return read_onnx(model)[0]


def random_feeds(model: Any, dims: Optional[Mapping[str, Any]] = None, seed: int = 0,
                 default_dim: int = DEFAULT_DIM, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> dict:
    """Random inputs for each graph input of an ONNX model (ModelProto, path or bytes).

    dims: {dim_param: int} values of symbolic dims and/or {input name: shape} whole shapes; `shapes`: more
    {input name: shape} (the CLI's --input-shapes); a dim none of them fixes is `default_dim`.
    Floats are standard normal, integers in [0, INT_HIGH), bools random; an integer input that indexes a constant
    table (a Gather of an embedding, read from the graph: `input_ranges.index_bounds`) within that table's rows;
    integer inputs named like a mask (`attention_mask`, `input_mask`, ...) 0 or 1, the values a padding mask holds.
    """
    from onnx import helper

    from .input_ranges import index_bounds

    model = _onnx_model(model)
    dims = dict(dims or {})
    dims.update({k: list(v) for k, v in (shapes or {}).items()})
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    params = {b for vi in inputs for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")
              for b in (d.dim_param, *base_dims(d.dim_param))}
    unknown = [k for k in dims if k not in params and k not in {vi.name for vi in inputs}]
    if unknown:
        raise CheckError(f"'{unknown[0]}' is neither an input nor a symbolic dim of the model")
    rng = np.random.default_rng(seed)
    bounds = index_bounds(model)
    feeds = {}
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise CheckError(f"input '{vi.name}' is not a tensor: cannot make random inputs for it")
        tt = vi.type.tensor_type
        if isinstance(dims.get(vi.name), (list, tuple)):
            shape = [int(d) for d in dims[vi.name]]
        else:
            shape = [d.dim_value if d.HasField("dim_value") else
                     _dim_at(d.dim_param, dims, default_dim) if d.HasField("dim_param") else default_dim
                     for d in tt.shape.dim]
        if any(d < 0 for d in shape):
            raise CheckError(f"input '{vi.name}': negative dim in shape {shape}")
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, ValueError):
            raise CheckError(f"input '{vi.name}' has an element type ({tt.elem_type}) we cannot make") from None
        try:
            feeds[vi.name] = random_array(shape, dtype, rng, binary="mask" in vi.name.lower(),
                                          high=min(bounds.get(vi.name, INT_HIGH), INT_HIGH))
        except CheckError as e:
            raise CheckError(f"input '{vi.name}': {e}") from None
    return feeds


def _dim_at(name: str, dims: Mapping[str, Any], default_dim: int) -> int:
    """A symbolic dim's size: given by name, else its expression of other dims (`past + 1`) at their values."""
    if name in dims:
        return int(dims[name])
    return dim_value(name, {k: v for k, v in dims.items() if not isinstance(v, (list, tuple))}, default_dim)


# ----------------------------------------------------------------------------------------- ONNX Runtime
def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def run_onnx(model: Any, feeds: Feeds, threads: Optional[int] = None) -> dict:
    """{output name: array} of an ONNX model (ModelProto, bytes or path) in ONNX Runtime on the CPU.
    Raises CheckError with one line when ONNX Runtime cannot load or run it."""
    return _run_session(_session(model, threads, "the model"), feeds, "the model")


def _session(model: Any, threads: Optional[int], role: str, err: type = CheckError) -> Any:
    from .timing import ort_session

    try:
        return ort_session(model, threads or 1)
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/... types
        raise err(f"ONNX Runtime cannot load {role}: {_first_line(e)}") from None


def _run_session(sess: Any, feeds: Feeds, role: str, err: type = CheckError) -> dict:
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    try:
        outs = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:
        raise err(f"ONNX Runtime cannot run {role}: {_first_line(e)}") from None
    return dict(zip(names, outs))


def session(model: Any, threads: Optional[int] = None, role: str = "the model", spin: bool = True,
            failure: type = CheckError) -> Any:
    """An ONNX Runtime session for the checks (`runtime.timing.ort_session`, `threads` or 1; `spin` as there);
    `failure` (CheckError, or CheckFailed for a rewrite) with one line when ONNX Runtime cannot load the model.
    `check_onnx` and `reference_outputs` take such a session in place of a model."""
    from .timing import ort_session

    try:
        return ort_session(model, threads or 1, spin=spin)
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/... types
        raise failure(f"ONNX Runtime cannot load {role}: {_first_line(e)}") from None


def run_session(sess: Any, feeds: Feeds, role: str = "the model") -> dict:
    """{output name: array} of one run of a session; CheckError with one line when it fails."""
    return _run_session(sess, feeds, role)


def reference_outputs(original: Any, feeds_list: Sequence[Feeds], threads: Optional[int] = None) -> list:
    """The original model's outputs on each feeds dict (one session), for `check_onnx(..., wants=)`: several
    candidates checked against one original run it once."""
    ref = _session(original, threads, "the original model")
    return [_run_session(ref, feeds, "the original model") for feeds in feeds_list]


def check_onnx(original: Any, optimized: Any, feeds_list: Union[Feeds, Sequence[Feeds]],
               rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL, threads: Optional[int] = None,
               wants: Optional[Sequence[dict]] = None) -> dict:
    """Run both ONNX models in ONNX Runtime on each feeds dict and compare the outputs; returns
    {output name: largest absolute difference}. CheckFailed when they differ or the optimized model does not
    load or run; CheckError when the original does not. `wants`: the original's outputs on the feeds
    (`reference_outputs`), when they are known already."""
    check_tolerances(rtol, atol)
    feeds_list = [feeds_list] if isinstance(feeds_list, Mapping) else list(feeds_list)
    if not feeds_list:
        raise CheckError("no inputs to check the models on")
    # one session at a time: each holds its weights prepacked (another copy of a big model's weights)
    if wants is None:
        wants = reference_outputs(original, feeds_list, threads)
    new = _session(optimized, threads, "the optimized model", CheckFailed)
    worst: dict = {}
    for feeds, want in zip(feeds_list, wants):
        got = _run_session(new, feeds, "the optimized model", CheckFailed)
        for k, v in compare_outputs(got, want, rtol, atol).items():
            worst[k] = max(worst.get(k, 0.0), v)
    return worst


# ----------------------------------------------------------------------------------------- Relax
def public_functions(mod: Any) -> list:
    """Names of the Relax functions of an IRModule that a built module exports (those with a global_symbol)."""
    from tvm import relax

    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, relax.Function) and f.attrs is not None and "global_symbol" in f.attrs)


def bind_dims(mod: Any, dims: Optional[Mapping[str, int]] = None, default_dim: int = DEFAULT_DIM) -> Any:
    """The module with every public Relax function's symbolic dims bound: `dims[name]`, else `default_dim`."""
    from tvm import relax

    dims = dict(dims or {})
    for name in public_functions(mod):
        syms = relax.analysis.defined_symbolic_vars(mod[name])
        if syms:
            binding = {v.name: int(dims.get(v.name, default_dim)) for v in syms}
            mod = relax.transform.BindSymbolicVars(binding, func_name=name)(mod)
    return mod


def _random_arg(ty: Any, where: str, rng: np.random.Generator) -> Any:
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        if shape is None or not hasattr(shape, "values"):
            raise CheckError(f"{where} has no known shape: cannot make random inputs for it")
        try:
            dims = [int(d) for d in shape.values]
        except TypeError:
            raise CheckError(f"{where} has a shape that is not constant ({shape})") from None
        return random_array(dims, str(ty.dtype), rng)
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return [_random_arg(t, f"{where}[{i}]", rng) for i, t in enumerate(fields)]
    raise CheckError(f"{where} is a {type(ty).__name__}: cannot make random inputs for it")


def relax_inputs(func: Any, seed: int = 0, name: str = "main") -> list:
    """Random arguments for a Relax function with static parameter shapes (tuples become lists)."""
    rng = np.random.default_rng(seed)
    return [_random_arg(p.ty, f"parameter '{p.name}' of '{name}'", rng) for p in func.params]


def _to_tvm(arg: Any, dev: Any) -> Any:
    import tvm

    if isinstance(arg, list):
        return tvm.runtime.convert([_to_tvm(a, dev) for a in arg])
    return tvm.runtime.tensor(np.ascontiguousarray(arg), dev)


def _named_outputs(out: Any, name: str, into: dict) -> dict:
    if hasattr(out, "numpy"):
        into[name] = out.numpy()
    elif isinstance(out, (int, float, bool, str)):
        into[name] = np.asarray(out)
    else:
        for i, o in enumerate(out):
            _named_outputs(o, f"{name}[{i}]", into)
    return into


def run_relax(executable: Any, args: Sequence[Any], func: str = "main", device: Any = None) -> dict:
    """{output name: array} of a built Relax function: `func` for one tensor, `func[i]` (nested) for tuples."""
    import tvm
    from tvm import relax

    dev = device if device is not None else tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    return _named_outputs(vm[func](*[_to_tvm(a, dev) for a in args]), func, {})


def _build(mod: Any, role: str, err: type) -> Any:
    import tvm
    from tvm import relax

    target = tvm.target.Target({"kind": "llvm"})
    try:
        return tvm.compile(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
    except Exception as e:  # TVM raises many types
        raise err(f"{role} does not build for llvm: {_first_line(e)}") from None


def _run_relax_as(ex: Any, args: list, func: str, role: str, err: type) -> dict:
    try:
        return run_relax(ex, args, func)
    except Exception as e:
        raise err(f"{role} fails on random inputs in '{func}': {_first_line(e)}") from None


def check_relax(original: Any, optimized: Any, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                dims: Optional[Mapping[str, int]] = None, seed: int = 0) -> dict:
    """Build both IRModules for llvm (the default Relax pipeline), run every public function of the original on
    random inputs (symbolic dims bound by `dims`, else DEFAULT_DIM) in both, and compare the outputs by the rules
    above. Returns {output name: largest absolute difference}."""
    check_tolerances(rtol, atol)
    original, optimized = bind_dims(original, dims), bind_dims(optimized, dims)
    funcs = public_functions(original)
    if not funcs:
        raise CheckError("the original module has no public Relax function to run: nothing could be checked")
    missing = [f for f in funcs if f not in public_functions(optimized)]
    if missing:
        raise CheckFailed(f"function '{missing[0]}' is missing from the optimized module")
    inputs = {f: relax_inputs(original[f], seed, f) for f in funcs}
    ref = _build(original, "the original module", CheckError)
    new = _build(optimized, "the optimized module", CheckFailed)
    worst: dict = {}
    for f in funcs:
        want = _run_relax_as(ref, inputs[f], f, "the original module", CheckError)
        got = _run_relax_as(new, inputs[f], f, "the optimized module", CheckFailed)
        worst.update(compare_outputs(got, want, rtol, atol))
    log.info("numeric check passed: %d output(s), largest difference %.3g", len(worst),
             max(worst.values(), default=0.0))
    return worst
