"""The Relax -> ONNX expression walker: `RelaxExporter` walks a Relax function binding by binding, dispatches every
``relax.Call`` to the converter registered for its operator name (``registry.CONVERTERS``, filled by the
``converters_*`` modules), inlines fused and called functions, converts ``If`` and tracks symbolic (TIR) dimensions.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from onnx import TensorProto, helper

import tvm
from tvm import relax

from ...errors import one_line
from . import converters as _converters  # noqa: F401  (fills CONVERTERS)
from . import opset as _opset
from .context import AttrView, EmitContext, ExportError
from .tensor_types import is_prim, is_tir_var, onnx_dtype, prim_dtype
from .registry import CONVERTERS
from .converters_fused import FUSED_CONVERTERS, STANDARD_CONVERTERS
from . import converters_fused_norm  # noqa: F401  (registers its converters)
from ...graph.ops.decompose import composite_attrs


# --------------------------------------------------------------------------------------
# helpers on tir expressions
# --------------------------------------------------------------------------------------
def _tir_vars(e) -> list:
    if isinstance(e, tvm.tirx.IntImm) or isinstance(e, tvm.tirx.FloatImm):
        return []
    if is_tir_var(e):
        return [e]
    try:
        return list(tvm.tirx.analysis.undefined_vars(e))
    except Exception:  # pragma: no cover
        return []


def _value_tir_vars(expr, out: list):
    """tir vars that an expression needs to *compute* its value (not its annotations)."""
    if expr is None:
        return
    if isinstance(expr, relax.ShapeExpr):
        for d in expr.values:
            out.extend(_tir_vars(d))
    elif is_prim(expr):
        out.extend(_tir_vars(expr))
    elif isinstance(expr, relax.Tuple):
        for f in expr.fields:
            _value_tir_vars(f, out)
    elif isinstance(expr, relax.TupleGetItem):
        _value_tir_vars(expr.tuple_value, out)
    elif isinstance(expr, relax.Call):
        for a in expr.args:
            _value_tir_vars(a, out)
        if isinstance(expr.op, tvm.ir.Op) and expr.op.name in ("relax.call_tir", "relax.call_tir_inplace",
                                                               "relax.call_dps_packed"):
            ty = expr.ty
            for leaf in _flatten_types(ty):
                if isinstance(leaf, relax.TensorType) and isinstance(leaf.shape, relax.ShapeExpr):
                    for d in leaf.shape.values:
                        out.extend(_tir_vars(d))
    elif isinstance(expr, (relax.If, relax.SeqExpr, relax.Function)):
        try:
            out.extend(relax.analysis.free_symbolic_vars(expr))
        except Exception:  # pragma: no cover
            pass


def _flatten_types(ty) -> list:
    if isinstance(ty, relax.TupleType) or type(ty).__name__ == "TupleType":
        res = []
        for f in ty.fields:
            res.extend(_flatten_types(f))
        return res
    return [ty]


def _free_relax_vars(expr) -> list:
    if isinstance(expr, relax.Var) and not is_tir_var(expr):
        return [expr]
    try:
        return [v for v in relax.analysis.free_vars(expr) if not is_tir_var(v)]
    except Exception:  # pragma: no cover
        return []


def _definable_vars(ty) -> list:
    """Bare tir vars appearing in a (match_cast / param) type, with their positions."""
    res = []
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        for i, d in enumerate(ty.shape.values):
            if is_tir_var(d):
                res.append(("dim", i, d))
    elif isinstance(ty, relax.ShapeType) and ty.values is not None:
        for i, d in enumerate(ty.values):
            if is_tir_var(d):
                res.append(("elem", i, d))
    return res


class _Args:
    """Lazily evaluated ONNX values of a call's arguments."""

    def __init__(self, exporter, call_args, env):
        self._exp = exporter
        self._raw = list(call_args)
        self._env = env
        self._cache = {}

    def __len__(self):
        return len(self._raw)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self._raw)
        if i not in self._cache:
            self._cache[i] = self._exp.eval_expr(self._raw[i], self._env)
        return self._cache[i]

    def raw(self, i: int) -> Any:
        return self._raw[i]


class RelaxExporter:
    def __init__(self, mod: Optional[tvm.IRModule]):
        self.mod = mod
        self.ctx = EmitContext()
        self.ctx.exporter = self
        self.ctx.tir_resolver = self.resolve_tir
        self.tir_env: Dict[Any, tuple] = {}
        self.tir_cache: Dict[Any, str] = {}
        self.use_count: Dict[Any, int] = {}
        self.var2val: Dict[Any, Any] = {}
        self.outputs_set: set = set()
        self._inline_depth = 0
        self.env: Dict[Any, Any] = {}

    def value_of(self, expr: Any) -> Any:
        """ONNX value of a Relax expression in the scope being converted."""
        return self.eval_expr(expr, self.env)

    # ------------------------------------------------------------------ symbolic dims
    def define_tir(self, tv: Any, kind: str, onnx_name: str, index: int) -> None:
        if tv not in self.tir_env:
            self.tir_env[tv] = (kind, onnx_name, index)

    def resolve_tir(self, tv) -> str:
        if tv in self.tir_cache:
            return self.tir_cache[tv]
        src = self.tir_env.get(tv)
        if src is None:
            self.ctx.fail(f"symbolic variable '{tv}' is not defined by a function input or match_cast")
        kind, name, i = src
        if kind == "dim":
            out = self.ctx.dim_of(name, i)
        elif kind == "elem":
            out = self.ctx.slice1d(name, i, i + 1)
        else:  # a [1]-shaped tensor
            out = name
        self.tir_cache[tv] = out
        return out

    # ------------------------------------------------------------------ expressions
    def eval_expr(self, e: Any, env: Dict[Any, Any]) -> Any:
        ctx = self.ctx
        if isinstance(e, relax.Var) and not is_tir_var(e):
            if e in env:
                return env[e]
            ctx.fail(f"variable '{e.name}' is not bound")
        if isinstance(e, tvm.ir.GenericConst):
            return ctx.relax_const(e)
        if isinstance(e, relax.Tuple):
            return [self.eval_expr(f, env) for f in e.fields]
        if isinstance(e, relax.TupleGetItem):
            tv = self.eval_expr(e.tuple_value, env)
            if not isinstance(tv, list):
                ctx.fail("TupleGetItem on a non-tuple value")
            return tv[int(e.index)]
        if isinstance(e, relax.ShapeExpr):
            return ctx.shape_tensor(e.values)
        if is_prim(e):
            return ctx.prim_scalar(e, onnx_dtype(prim_dtype(e)))
        if isinstance(e, tvm.ir.StringImm):
            return str(e.value)
        if isinstance(e, relax.Call):
            return self.convert_call(e, env, None)
        if isinstance(e, relax.SeqExpr):
            return self.convert_seq(e, env)
        if isinstance(e, relax.Function):
            return ("function", e, env)
        ctx.fail(f"unsupported expression {type(e).__name__}")

    # ------------------------------------------------------------------ calls
    def convert_call(self, call: relax.Call, env: Dict[Any, Any], var: Optional[relax.Var]) -> Any:
        ctx = self.ctx
        op = call.op
        if isinstance(op, tvm.ir.Op):
            name = op.name
            if name in ("relax.call_pure_packed", "relax.call_packed", "relax.call_inplace_packed") \
                    and call.args and isinstance(call.args[0], relax.ExternFunc):
                return self._convert_packed(str(call.args[0].global_symbol), call, list(call.args)[1:],
                                            env, var)
            conv = CONVERTERS.get(name)
            if conv is None:
                ctx.relax_op = name
                ctx.fail("no ONNX mapping")
            prev = (ctx.relax_op, ctx.call, ctx.out_ty, ctx.out_var)
            ctx.relax_op = name
            ctx.call = call
            ctx.out_ty = var.ty if var is not None else call.ty
            ctx.out_var = var
            attrs = AttrView(call.attrs)
            args = _Args(self, call.args, env)
            try:
                result = conv(ctx, call, attrs, args)
            except ExportError:
                raise
            except Exception as e:  # converter bug / unexpected IR -> still one clear line
                raise ctx.error(f"{type(e).__name__}: {one_line(e)}") from e
            left = attrs.unused()
            if left:
                ctx.fail(f"attribute(s) {', '.join(left)} not handled by the converter")
            ctx.relax_op, ctx.call, ctx.out_ty, ctx.out_var = prev
            return result
        if isinstance(op, relax.ExternFunc):
            return self._convert_packed(str(op.global_symbol), call, list(call.args), env, var)
        if isinstance(op, tvm.ir.GlobalVar):
            if self.mod is None or op not in self.mod.get_global_vars():
                ctx.relax_op = f"call to {op.name_hint}"
                ctx.fail("callee is not in the module")
            callee = self.mod[op]
            if isinstance(callee, relax.Function):
                fused = self._convert_fused(callee, call, env, var)
                if fused is not None:
                    return fused
                vals = [self.eval_expr(a, env) for a in call.args]
                return self.inline(callee, vals)
            ctx.relax_op = f"call to {op.name_hint}"
            ctx.fail("direct call of a non-Relax function")
        if isinstance(op, relax.Var) and not is_tir_var(op):
            fv = env.get(op)
            if isinstance(fv, tuple) and fv and fv[0] == "function":
                vals = [self.eval_expr(a, env) for a in call.args]
                return self.inline(fv[1], vals, fv[2])
        if isinstance(op, relax.Function):
            vals = [self.eval_expr(a, env) for a in call.args]
            return self.inline(op, vals, env)
        ctx.relax_op = "call"
        ctx.fail(f"unsupported callee {type(op).__name__}")

    def _convert_fused(self, callee: relax.Function, call: relax.Call, env: Dict[Any, Any], var) -> Any:
        """The runtime's fused node for a call to a lowered fused operator (None: not one, or this call has no
        fused form, e.g. a scale that is not a constant; the caller then inlines the decomposition)."""
        found = composite_attrs(callee)
        if found is None or found[0] not in FUSED_CONVERTERS or (
                self.ctx.standard_ops and found[0] not in STANDARD_CONVERTERS):
            return None
        name, fattrs = found
        ctx = self.ctx
        prev = (ctx.relax_op, ctx.call, ctx.out_ty, ctx.out_var)
        ctx.relax_op, ctx.call = f"fused {name}", call
        ctx.out_ty, ctx.out_var = (var.ty if var is not None else call.ty), var
        try:
            return FUSED_CONVERTERS[name](ctx, call, fattrs, _Args(self, call.args, env))
        except ExportError:
            raise
        except Exception as e:  # converter bug / unexpected IR -> still one clear line
            raise ctx.error(f"{type(e).__name__}: {one_line(e)}") from e
        finally:
            ctx.relax_op, ctx.call, ctx.out_ty, ctx.out_var = prev

    def _convert_packed(self, symbol, call, args, env, var):
        ctx = self.ctx
        ctx.relax_op = f"call_packed '{symbol}'"
        if symbol == "vm.builtin.tensor_to_shape":
            x = self.eval_expr(args[0], env)
            return ctx.cast(x, TensorProto.INT64)
        if symbol == "vm.builtin.shape_of":
            return ctx.shape_of(self.eval_expr(args[0], env))
        ctx.fail("no ONNX mapping for this packed function")

    def inline(self, func: relax.Function, values: Sequence[Any],
               outer_env: Optional[Dict[Any, Any]] = None) -> Any:
        if self._inline_depth > 32:
            self.ctx.fail("function calls nested too deeply")
        self._inline_depth += 1
        saved = (self.ctx.binding, self.ctx.relax_op, self.env)
        # symbolic vars of the callee are (re)defined by this call's arguments
        saved_tir = (dict(self.tir_env), dict(self.tir_cache))
        for p in func.params:
            for _, _, tv in _definable_vars(p.ty):
                self.tir_env.pop(tv, None)
                self.tir_cache.pop(tv, None)
        try:
            res = self.convert_function_body(func, values, dict(outer_env or {}))
        finally:
            self._inline_depth -= 1
            self.tir_env, self.tir_cache = saved_tir
        self.ctx.binding, self.ctx.relax_op, self.env = saved
        return res

    # ------------------------------------------------------------------ functions
    def bind_params(self, func: relax.Function, values: Sequence[Any], env: Dict[Any, Any]) -> None:
        for p, val in zip(func.params, values):
            env[p] = val
            ty = p.ty
            if isinstance(val, str):
                for kind, i, tv in _definable_vars(ty):
                    if kind == "dim":
                        self.define_tir(tv, "dim", val, i)
                    else:
                        self.define_tir(tv, "elem", val, i)

    def convert_function_body(self, func: relax.Function, values: Sequence[Any], env: Dict[Any, Any]) -> Any:
        self.bind_params(func, values, env)
        return self.convert_seq(func.body, env)

    def convert_seq(self, seq: Any, env: Dict[Any, Any]) -> Any:
        if not isinstance(seq, relax.SeqExpr):
            return self.eval_expr(seq, env)
        bindings = [b for blk in seq.blocks for b in blk.bindings]
        live = self._liveness(bindings, seq.body)
        for b in bindings:
            if b.var.__chandle__() in live:
                self.convert_binding(b, env)
        return self.eval_expr(seq.body, env)

    def _liveness(self, bindings, body):
        first_def = {}
        for b in bindings:
            self.var2val[b.var] = b.value
            if isinstance(b, relax.MatchCast):
                for _, _, tv in _definable_vars(b.ty):
                    first_def.setdefault(tv, b.var.__chandle__())
        live_vars = set(v.__chandle__() for v in _free_relax_vars(body))
        tl: list = []
        _value_tir_vars(body, tl)
        live_tir = set(tl)
        live = set()
        for v in _free_relax_vars(body):
            self.use_count[v] = self.use_count.get(v, 0) + 1
            self.outputs_set.add(v.__chandle__())
        for b in reversed(bindings):
            h = b.var.__chandle__()
            needed = h in live_vars
            if not needed and isinstance(b, relax.MatchCast):
                needed = any(first_def.get(tv) == h for tv in live_tir)
            if not needed:
                continue
            live.add(h)
            uv = _free_relax_vars(b.value)
            for v in uv:
                live_vars.add(v.__chandle__())
                self.use_count[v] = self.use_count.get(v, 0) + 1
            tl = []
            _value_tir_vars(b.value, tl)
            live_tir.update(tl)
        return live

    def convert_binding(self, b: relax.Binding, env: Dict[Any, Any]) -> None:
        ctx = self.ctx
        self.env = env
        var = b.var
        ctx.binding = var.name
        ctx.relax_op = ""
        ctx.out_ty = var.ty
        ctx.out_var = var
        value = b.value
        if isinstance(b, relax.MatchCast):
            ctx.relax_op = "relax.match_cast"
            val = self.eval_expr(value, env)
            if isinstance(val, str):
                for kind, i, tv in _definable_vars(b.ty):
                    self.define_tir(tv, kind, val, i)
            env[var] = val
            return
        if isinstance(value, relax.Call):
            res = self.convert_call(value, env, var)
        elif isinstance(value, relax.If):
            ctx.relax_op = "relax.If"
            res = self.convert_if(value, env, var)
        else:
            ctx.relax_op = type(value).__name__
            res = self.eval_expr(value, env)
        env[var] = res

    def convert_if(self, node: relax.If, env: Dict[Any, Any], var: relax.Var) -> Any:
        """relax.If -> ONNX If with one subgraph per branch."""
        ctx = self.ctx
        cond = self.eval_expr(node.cond, env)
        if ctx.types.get(cond) != TensorProto.BOOL:
            cond = ctx.cast(cond, TensorProto.BOOL)
        binding = ctx.binding
        leaf_types = _flatten_types(var.ty)
        branches = {}
        implicit = set()
        for attr, branch in (("then_branch", node.true_branch), ("else_branch", node.false_branch)):
            saved_nodes = ctx.nodes
            saved = (dict(ctx._memo), dict(ctx._shape_cache), dict(self.tir_cache), dict(self.tir_env))
            ctx.nodes = []
            try:
                res = self.convert_seq(branch, dict(env))
                leaves = _flatten_values(res)
                if len(leaves) != len(leaf_types):
                    ctx.fail("If branches return a different number of values than the If's type")
                outs = []
                for leaf, ty in zip(leaves, leaf_types):
                    nm = ctx.fresh(f"{binding}_{attr.split('_')[0]}")
                    ctx.node("Identity", [leaf], outputs=[nm], out_types=[ctx.types[leaf]])
                    vi = _value_info(nm, ty) if isinstance(ty, relax.TensorType) and str(ty.dtype) not in ("", "void") \
                        else helper.make_tensor_value_info(nm, ctx.types[leaf], None)
                    outs.append(vi)
                sub = ctx.nodes
            finally:
                ctx.nodes = saved_nodes
                ctx._memo, ctx._shape_cache, self.tir_cache, self.tir_env = saved
            produced = {o for n in _opset.all_nodes(sub) for o in n.outputs}
            for n in _opset.all_nodes(sub):
                implicit.update(i for i in n.inputs if i and i not in produced)
                implicit.update(n.implicit)
            branches[attr] = (sub, outs, f"{binding}_{attr}")
        ctx.binding, ctx.relax_op = binding, "relax.If"
        out_types = [vi.type.tensor_type.elem_type for vi in branches["then_branch"][1]]
        outs = ctx.node("If", [cond], n_out=len(out_types), out_types=out_types)
        spec = ctx.producer[outs[0]]
        spec.subgraphs = branches
        spec.implicit = sorted(implicit)
        # a tensor-typed If yields a single value; a tuple-typed one a list
        if isinstance(var.ty, relax.TensorType):
            return outs[0]
        return _unflatten(var.ty, list(outs))

    def is_single_use(self, var) -> bool:
        """True if ``var`` is consumed by exactly one live binding and is not an output."""
        if not isinstance(var, relax.Var) or is_tir_var(var):
            return False
        if var.__chandle__() in self.outputs_set:
            return False
        return self.use_count.get(var, 0) == 1

    def single_use_call(self, expr: Any, op_name: Optional[str] = None) -> Optional[relax.Call]:
        """The call bound to ``expr`` if it is a single-use var (and calls ``op_name``)."""
        pc = self.producer_call(expr)
        if pc is None or not self.is_single_use(expr):
            return None
        if op_name is not None and getattr(pc.op, "name", None) != op_name:
            return None
        return pc

    def producer_call(self, var: Any) -> Optional[relax.Call]:
        """The Relax call bound to ``var`` (or None)."""
        if not isinstance(var, relax.Var) or is_tir_var(var):
            return None
        v = self.var2val.get(var)
        return v if isinstance(v, relax.Call) else None


# --------------------------------------------------------------------------------------
# values and types
# --------------------------------------------------------------------------------------
def _value_info(name, ty):
    try:
        return _value_info_impl(name, ty)
    except ValueError as e:
        raise ExportError(f"cannot export graph input/output '{name}': {e}") from None


def _value_info_impl(name, ty):
    if isinstance(ty, tvm.ir.PrimType):
        return helper.make_tensor_value_info(name, onnx_dtype(ty.dtype), [])
    if isinstance(ty, relax.ShapeType):
        # a shape value is exported as a 1-D int64 tensor
        n = int(ty.ndim)
        return helper.make_tensor_value_info(name, TensorProto.INT64, [n] if n >= 0 else [None])
    if not isinstance(ty, relax.TensorType):
        raise ExportError(f"cannot export graph input/output '{name}': type {ty} is not a tensor")
    elem = onnx_dtype(ty.dtype)
    if isinstance(ty.shape, relax.ShapeExpr):
        dims = []
        for d in ty.shape.values:
            if isinstance(d, tvm.tirx.IntImm):
                dims.append(int(d.value))
            elif is_tir_var(d):
                dims.append(d.name)
            else:
                dims.append(None)
        return helper.make_tensor_value_info(name, elem, dims)
    if int(ty.ndim) >= 0:
        return helper.make_tensor_value_info(name, elem, [None] * int(ty.ndim))
    return helper.make_tensor_value_info(name, elem, None)


def _unflatten(ty, leaves: list):
    if isinstance(ty, relax.TupleType) or type(ty).__name__ == "TupleType":
        return [_unflatten(f, leaves) for f in ty.fields]
    return leaves.pop(0)


def _flatten_values(v) -> list:
    if isinstance(v, list):
        out = []
        for x in v:
            out.extend(_flatten_values(x))
        return out
    return [v]
