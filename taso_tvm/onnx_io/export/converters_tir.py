"""``R.call_tir`` of the PrimFuncs that TVM's ONNX frontend creates with ``emit_te``.

The frontend emits TOPI compute for: Clip (``maximum``/``minimum``; Clip-6..10 bakes its
bounds into single-input ones), Einsum (``einsum``), Tile (``tile``/``dyn_tile``), ReverseSequence
/ negative-step Slice / CumSum reverse (``flip``), Pad constant / reflect / edge / wrap
(``pad``, ``mirror_pad``, ``replicate_pad``, ``circular_pad``; also Conv auto_pad) and rank-3
Resize (``resize1d``; with a runtime roi ``resize{1,2,3}d_dyn``, not mapped).  PrimFuncs are
recognized by name (``maximum``, ``maximum1``, ...); parameters not visible in the call
(Einsum's equation, Pad's widths and mode, Resize's mode and coordinate transformation) are
read from the PrimFunc's single compute block, by evaluating its index expressions where a
formula could be written several ways (see :mod:`.tir_index`, :mod:`.resize_map`).
Anything else raises a one-line :class:`ExportError` naming the PrimFunc and the binding.
"""
from __future__ import annotations

import re

import numpy as np

import tvm
from tvm import relax

from .tensor_types import onnx_dtype, prim_dtype, prim_to_py, type_dims
from .registry import register
from .tir_index import axis_map, match_pad_axis, proves_identity

# ----------------------------------------------------------------------------- TIR walking


def _fields(o):
    ti = getattr(type(o), "__tvm_ffi_type_info__", None)
    names = []
    while ti is not None:
        names.extend(f.name for f in ti.fields)
        ti = ti.parent_type_info
    return names


def _walk(obj, fn, depth=0):
    """Pre-order walk over expression objects."""
    if depth > 200 or obj is None:
        return
    fn(obj)
    if isinstance(obj, (str, int, float, bool)):
        return
    if hasattr(obj, "__len__") and not hasattr(type(obj), "__tvm_ffi_type_info__"):
        return
    if type(obj).__name__ in ("Array", "list", "tuple"):
        for x in obj:
            _walk(x, fn, depth + 1)
        return
    for f in _fields(obj):
        if f in ("span", "ty", "dtype", "op", "source", "buffer"):
            continue
        try:
            v = getattr(obj, f)
        except Exception:
            continue
        if v is None or isinstance(v, (str, int, float, bool)):
            continue
        if type(v).__name__ == "Array":
            for x in v:
                _walk(x, fn, depth + 1)
        elif hasattr(type(v), "__tvm_ffi_type_info__"):
            _walk(v, fn, depth + 1)


def _blocks(stmt, out):
    name = type(stmt).__name__
    if name == "SBlockRealize":
        _blocks(stmt.block, out)
    elif name == "SBlock":
        if stmt.name_hint != "root":
            out.append(stmt)
        _blocks(stmt.body, out)
    elif name == "For":
        _blocks(stmt.body, out)
    elif name == "SeqStmt":
        for s in stmt.seq:
            _blocks(s, out)
    elif hasattr(stmt, "body"):
        _blocks(stmt.body, out)
    return out


def _compute_block(ctx, func):
    blocks = _blocks(func.body, [])
    if len(blocks) != 1:
        ctx.fail(f"PrimFunc has {len(blocks)} compute blocks; only single-block functions are recognized")
    blk = blocks[0]
    if type(blk.body).__name__ != "BufferStore":
        ctx.fail("PrimFunc block is not a single store")
    return blk, blk.body


def _loads(expr):
    res = []

    def fn(o):
        if type(o).__name__ == "TensorLoad":
            res.append(o)

    _walk(expr, fn)
    return res


# ----------------------------------------------------------------------------- handlers
def _binary(onnx_op):
    def h(ctx, call, func, inputs):
        if len(inputs) == 1:  # the other operand is a constant inside the PrimFunc (Clip-6's min/max)
            return _elementwise(ctx, call, func, inputs)
        if len(inputs) != 2:
            ctx.fail(f"expected 2 inputs, got {len(inputs)}")
        return ctx.op(onnx_op, inputs[0], inputs[1])

    return h


_ELEMWISE_OPS = {tvm.tirx.Max: "Max", tvm.tirx.Min: "Min", tvm.tirx.Add: "Add", tvm.tirx.Sub: "Sub",
                 tvm.tirx.Mul: "Mul", tvm.tirx.Div: "Div"}


def _elementwise(ctx, call, func, inputs):
    """A single-block element-wise PrimFunc (loads at exactly the output's indices, constants,
    casts and + - * / min max) translated node for node."""
    blk, store = _compute_block(ctx, func)
    out_vars = list(store.indices)
    out_dims = type_dims(call.ty)
    params = {p.name: i for i, p in enumerate(func.params[:len(inputs)])}
    arg_exprs = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else [call.args[1]]

    def tr(e):
        if type(e).__name__ == "TensorLoad":
            i = params.get(e.source.name)
            in_dims = type_dims(arg_exprs[i]) if i is not None else None
            if in_dims is None or len(e.indices) != len(out_vars) or len(in_dims) != len(out_dims) \
                    or not all(_same_dim(a, b) for a, b in zip(in_dims, out_dims)) \
                    or not all(a.same_as(b) for a, b in zip(e.indices, out_vars)):
                ctx.fail("PrimFunc is not element-wise over its inputs")
            return inputs[i]
        if isinstance(e, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return ctx.typed_scalar(prim_to_py(e), onnx_dtype(prim_dtype(e)))
        if isinstance(e, tvm.tirx.Cast):
            return ctx.cast(tr(e.value), onnx_dtype(prim_dtype(e)))
        op = _ELEMWISE_OPS.get(type(e))
        if op is None or (op == "Div" and not prim_dtype(e).startswith(("float", "bfloat"))):
            ctx.fail(f"PrimFunc computes {type(e).__name__}, which has no element-wise ONNX mapping here")
        return ctx.op(op, tr(e.a), tr(e.b))

    if out_dims is None or not all(tvm.ir.is_prim_var(v) for v in out_vars):
        ctx.fail("element-wise PrimFunc with unknown shapes")
    return ctx.cast(tr(store.value), onnx_dtype(call.ty.dtype))


def _einsum(ctx, call, func, inputs):
    blk, store = _compute_block(ctx, func)
    iv = [v.var for v in blk.iter_vars]
    letters = {}
    for i, v in enumerate(iv):
        letters[v.__chandle__()] = "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else None

    def idx_letters(indices):
        s = ""
        for e in indices:
            h = e.__chandle__() if tvm.ir.is_prim_var(e) else None
            if h is None or letters.get(h) is None:
                ctx.fail(f"einsum index '{e}' is not a plain loop variable (broadcast einsum)")
            s += letters[h]
        return s

    out_buf = func.params[-1].name
    out_term = idx_letters(store.indices)
    in_names = [p.name for p in func.params[:len(inputs)]]
    terms = {}
    for ld in _loads(store.value):
        src = ld.source.name
        if src == out_buf:
            continue
        t = idx_letters(ld.indices)
        if src in terms and terms[src] != t:
            ctx.fail("einsum operand read with two different index patterns")
        terms[src] = t
    if set(terms) != set(in_names):
        ctx.fail("einsum PrimFunc does not read every operand")
    eq = ",".join(terms[n] for n in in_names) + "->" + out_term
    return ctx.op("Einsum", *inputs, equation=eq)


def _index_offset(ctx, e):
    """Index expression ``v - c`` / ``v + c`` / ``v`` -> pad-before ``c`` / ``-c`` / 0."""
    if tvm.ir.is_prim_var(e):
        return 0
    if isinstance(e, tvm.tirx.Sub) and tvm.ir.is_prim_var(e.a) and isinstance(e.b, tvm.tirx.IntImm):
        return int(e.b.value)
    if isinstance(e, tvm.tirx.Add) and tvm.ir.is_prim_var(e.a) and isinstance(e.b, tvm.tirx.IntImm):
        return -int(e.b.value)
    return None


def _pad(ctx, call, func, inputs):
    if len(inputs) != 1:
        ctx.fail("pad with more than one input")
    x = inputs[0]
    in_dims, out_dims = _pad_dims(ctx, call, "pad")
    blk, store = _compute_block(ctx, func)
    value = 0.0
    load = None
    val = store.value
    if isinstance(val, relax.Call) or type(val).__name__ == "Call":
        if getattr(val.op, "name", "") not in ("prim.if_then_else", "tirx.if_then_else"):
            ctx.fail("pad PrimFunc is not a guarded copy")
        loads = _loads(val.args[1])
        if len(loads) != 1 or not isinstance(val.args[2], (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            ctx.fail("pad PrimFunc is not a guarded copy of a constant")
        load = loads[0]
        value = prim_to_py(val.args[2])
    else:
        loads = _loads(val)
        if len(loads) != 1:
            ctx.fail("pad PrimFunc is not a copy")
        load = loads[0]
    before = []
    for e in load.indices:
        off = _index_offset(ctx, e)
        if off is None:
            ctx.fail(f"pad index '{e}' is not a constant shift")
        before.append(off)
    after = []
    for ax, (o, i, b) in enumerate(zip(out_dims, in_dims, before)):
        if isinstance(o, int) and isinstance(i, int):
            after.append(o - i - b)
        elif b == 0 and _same_dim(o, i):
            after.append(0)
        else:
            ctx.fail(f"pad of symbolic axis {ax}")
    if all(b == 0 for b in before) and all(a == 0 for a in after):
        return x
    cv = ctx.typed_scalar(value, ctx.types[x])
    return ctx.op("Pad", x, ctx.i64(before + after), cv, mode="constant")


def _pad_dims(ctx, call, what):
    """Input and output dims of a pad call_tir (ints, or PrimExprs for symbolic axes)."""
    arg = call.args[1].fields[0] if isinstance(call.args[1], relax.Tuple) else call.args[1]
    in_dims, out_dims = type_dims(arg), type_dims(call.ty)
    if in_dims is None or out_dims is None or len(in_dims) != len(out_dims):
        ctx.fail(f"{what} PrimFunc with unknown shapes")
    return in_dims, out_dims


def _extent(blk, var):
    """The extent of block iteration variable ``var`` (in the PrimFunc's own symbolic vars)."""
    for iv in blk.iter_vars:
        if iv.var.same_as(var):
            return iv.dom.extent
    return None


def _same_dim(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def _gather_pad(mode):
    """``mirror_pad`` / ``replicate_pad`` / ``circular_pad`` -> ONNX Pad reflect / edge / wrap.

    The pad widths are not in the call: they are recovered per axis by evaluating the
    PrimFunc's index expression at every output position and finding the widths for which
    ONNX's ``mode`` gives the same source index everywhere (so a mismatch cannot export).
    """

    def h(ctx, call, func, inputs):
        if len(inputs) != 1:
            ctx.fail(f"{mode} pad with {len(inputs)} inputs")
        x = inputs[0]
        in_dims, out_dims = _pad_dims(ctx, call, f"{mode} pad")
        blk, store = _compute_block(ctx, func)
        loads = _loads(store.value)
        if len(loads) != 1 or len(loads[0].indices) != len(in_dims) or len(store.indices) != len(out_dims):
            ctx.fail(f"{mode} pad PrimFunc is not a single gather")
        out_vars = list(store.indices)
        if not all(tvm.ir.is_prim_var(v) for v in out_vars):
            ctx.fail(f"{mode} pad PrimFunc does not write its output element-wise")
        before, after = [], []
        for ax, (e, n, o) in enumerate(zip(loads[0].indices, in_dims, out_dims)):
            used = [v for v in out_vars if _uses(e, v)]
            if used and (len(used) != 1 or not used[0].same_as(out_vars[ax])):
                ctx.fail(f"{mode} pad index of axis {ax} reads another axis")
            if not (isinstance(n, int) and isinstance(o, int)):
                # a symbolic axis (dynamic batch) is only ever copied as it is
                if not (_same_dim(n, o) and (e.same_as(out_vars[ax]) or
                                             proves_identity(e, out_vars[ax], _extent(blk, out_vars[ax])))):
                    ctx.fail(f"{mode} pad of symbolic axis {ax}")
                before.append(0)
                after.append(0)
                continue
            f = axis_map(e, out_vars[ax], o)
            if f is None or (len(f) and (f.min() < 0 or f.max() >= n)):
                ctx.fail(f"{mode} pad index of axis {ax} is not a gather within the input")
            b = match_pad_axis(mode, f, n)
            if b is None:
                ctx.fail(f"{mode} pad of axis {ax} ({n} -> {o}) has no ONNX Pad mode={mode} equivalent")
            before.append(b)
            after.append(o - n - b)
        if not any(before) and not any(after):
            return x
        # mode="wrap" exists from opset 19 (the schema only shows the attribute, not its values)
        return ctx.op("Pad", x, ctx.i64(before + after), mode=mode, lo=19 if mode == "wrap" else None)

    return h


def _resize1d(ctx, call, func, inputs):
    """``resize1d`` (rank-3 Resize) -> ONNX Resize with ``sizes``.

    The PrimFunc's per-row linear map is evaluated on the identity (every input position at
    once) and compared with the map of each ONNX mode / coordinate transformation; only an
    exact match (and a map without constant offset, i.e. no extrapolation) is exported.
    """
    from . import resize_map
    from .tir_index import NotEvaluable, eval_index

    if len(inputs) != 1:
        ctx.fail(f"resize1d with {len(inputs)} inputs (runtime roi)")
    arg = call.args[1].fields[0] if isinstance(call.args[1], relax.Tuple) else call.args[1]
    in_dims, out_dims = type_dims(arg), type_dims(call.ty)
    if in_dims is None or out_dims is None or len(in_dims) != 3 or len(out_dims) != 3 \
            or not all(_same_dim(a, b) for a, b in zip(in_dims[:2], out_dims[:2])):
        ctx.fail("resize1d with unknown shapes or a resized batch/channel axis")
    if not (isinstance(in_dims[2], int) and isinstance(out_dims[2], int)):
        ctx.fail("resize1d of a symbolic width")
    blk, store = _compute_block(ctx, func)
    v = list(store.indices)
    if len(v) != 3 or not all(tvm.ir.is_prim_var(a) for a in v):
        ctx.fail("resize1d PrimFunc does not write its output element-wise")
    loads = _loads(store.value)
    src = func.params[0].name
    for ld in loads:
        if ld.source.name != src or not (ld.indices[0].same_as(v[0]) and ld.indices[1].same_as(v[1])) \
                or _uses(ld.indices[2], v[0]) or _uses(ld.indices[2], v[1]):
            ctx.fail("resize1d PrimFunc mixes rows or reads another buffer")
    n_in, n_out = in_dims[2], out_dims[2]
    eye = np.eye(n_in, dtype=np.float32).reshape(n_in, 1, n_in)
    cols = []
    try:
        for k0 in range(0, n_in, 256):
            env = {v[0]: np.arange(k0, min(k0 + 256, n_in), dtype=np.int64)[:, None],
                   v[1]: np.zeros((1, 1), np.int64), v[2]: np.arange(n_out, dtype=np.int64)[None, :]}
            cols.append(np.broadcast_to(eval_index(store.value, env, {src: eye}), (env[v[0]].shape[0], n_out)))
        zero_env = {v[0]: np.zeros((1, 1), np.int64), v[1]: np.zeros((1, 1), np.int64),
                    v[2]: np.arange(n_out, dtype=np.int64)[None, :]}
        offset = eval_index(store.value, zero_env, {src: np.zeros((1, 1, n_in), np.float32)})
    except NotEvaluable as e:
        ctx.fail(f"resize1d PrimFunc cannot be evaluated ({e})")
    if np.any(np.asarray(offset) != 0):
        ctx.fail("resize1d PrimFunc adds a constant (extrapolation): no ONNX Resize equivalent found")
    m = np.concatenate(cols, axis=0).T.astype(np.float64)
    # cubic is not tried: ONNX Runtime implements it for 2-D/4-D inputs only, so a rank-3 cubic
    # Resize could not be verified anywhere
    attrs = resize_map.match(m, cubic_coeffs=())
    if attrs is None:
        ctx.fail("resize1d PrimFunc matches no ONNX Resize mode (nearest / linear)")
    empty = (np.zeros((0,), np.float32), onnx_dtype("float32"))
    y = ctx.op("Resize", inputs[0], "", "", ctx.shape_tensor(out_dims), fill={1: empty, 2: empty}, **attrs)
    return ctx.cast(y, onnx_dtype(call.ty.dtype))


def _uses(expr, var) -> bool:
    found = []

    def fn(o):
        if tvm.ir.is_prim_var(o) and o.same_as(var):
            found.append(o)

    _walk(expr, fn)
    return bool(found)


def _tile(ctx, call, func, inputs):
    x = inputs[0]
    in_dims = type_dims(call.args[1].fields[0])
    out_dims = type_dims(call.ty)
    if in_dims is None or out_dims is None:
        ctx.fail("tile with unknown ranks")
    nd, od = len(in_dims), len(out_dims)
    if od > nd:
        x = ctx.unsqueeze(x, list(range(od - nd)))
        in_dims = [1] * (od - nd) + in_dims
    if all(isinstance(d, int) for d in in_dims + out_dims):
        reps = [o // i if i else 1 for o, i in zip(out_dims, in_dims)]
        return ctx.op("Tile", x, ctx.i64(reps))
    out_t = ctx.shape_tensor(out_dims)
    in_t = ctx.shape_of(x)
    return ctx.op("Tile", x, ctx.op("Div", out_t, in_t))


def _flip(ctx, call, func, inputs):
    x = inputs[0]
    blk, store = _compute_block(ctx, func)
    loads = _loads(store.value)
    if len(loads) != 1:
        ctx.fail("flip PrimFunc is not a copy")
    axes = [i for i, e in enumerate(loads[0].indices) if not tvm.ir.is_prim_var(e)]
    if len(axes) != 1:
        ctx.fail("flip PrimFunc does not reverse exactly one axis")
    return ctx.op("Slice", x, ctx.i64([-1]), ctx.i64([np.iinfo(np.int64).min]), ctx.i64(axes), ctx.i64([-1]))


def _identity(ctx, call, func, inputs):
    return inputs[0]


_TIR_HANDLERS = {
    "maximum": _binary("Max"),
    "minimum": _binary("Min"),
    "add": _binary("Add"),
    "subtract": _binary("Sub"),
    "multiply": _binary("Mul"),
    "divide": _binary("Div"),
    "einsum": _einsum,
    "pad": _pad,
    "mirror_pad": _gather_pad("reflect"),
    "replicate_pad": _gather_pad("edge"),
    "circular_pad": _gather_pad("wrap"),
    "resize1d": _resize1d,
    "tile": _tile,
    "dyn_tile": _tile,
    "flip": _flip,
    "identity": _identity,
}


@register("relax.call_tir", "relax.call_tir_inplace")
def convert_call_tir(ctx, call, attrs, args):
    attrs.consume_all()  # call_tir_inplace: inplace_indices only affect memory reuse
    gv = call.args[0]
    name = gv.name_hint
    mod = ctx.exporter.mod
    if mod is None or gv not in mod.get_global_vars():
        ctx.relax_op = f"{ctx.relax_op} of PrimFunc '{name}'"
        ctx.fail("the PrimFunc is not in the module")
    func = mod[gv]
    ctx.relax_op = f"{ctx.relax_op} of PrimFunc '{name}'"
    base = re.sub(r"\d+$", "", name).rstrip("_")
    handler = _TIR_HANDLERS.get(base)
    if handler is None:
        ctx.fail("no ONNX mapping")
    inputs = args[1]
    if not isinstance(inputs, list):
        inputs = [inputs]
    return handler(ctx, call, func, inputs)


@register("relax.call_dps_packed")
def convert_call_dps_packed(ctx, call, attrs, args):
    f = call.args[0]
    name = str(f.global_symbol) if isinstance(f, relax.ExternFunc) else str(f)
    ctx.fail(f"call_dps_packed of '{name}' has no ONNX mapping")
