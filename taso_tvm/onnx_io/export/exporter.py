"""Relax -> ONNX exporter driver.

Walks a Relax function binding by binding, dispatches every ``relax.Call`` to the converter
registered for its operator name (``registry.CONVERTERS``, filled by the ``converters_*``
modules), tracks symbolic dimensions, assembles the ``onnx.ModelProto`` and picks the opset.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper

import tvm
from tvm import relax

from ...errors import one_line
from . import converters as _converters  # noqa: F401  (fills CONVERTERS)
from . import opset as _opset
from .context import (
    AttrView,
    EmitContext,
    ExportError,
    fill_tensor_proto,
    is_prim,
    is_tir_var,
    onnx_dtype,
    prim_dtype,
    tensor_to_numpy,
)
from .registry import CONVERTERS
from .converters_fused import FUSED_CONVERTERS
from .opset import RUNTIME_DOMAINS
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
                fused = None if ctx.standard_ops else self._convert_fused(callee, call, env, var)
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
        if found is None or found[0] not in FUSED_CONVERTERS:
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
# model assembly
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


def _get_main(obj):
    if isinstance(obj, relax.Function):
        return None, obj
    if isinstance(obj, tvm.IRModule):
        gvs = obj.get_global_vars()
        names = [g.name_hint for g in gvs]
        if "main" in names:
            f = obj["main"]
        else:
            rfs = [obj[g] for g in gvs if isinstance(obj[g], relax.Function)]
            if len(rfs) != 1:
                raise ExportError("cannot export module: no 'main' Relax function")
            f = rfs[0]
        if not isinstance(f, relax.Function):
            raise ExportError("cannot export module: 'main' is not a Relax function")
        return obj, f
    raise ExportError(f"cannot export object of type {type(obj).__name__}: expected IRModule or relax.Function")


def export_relax(mod_or_func: Union[tvm.IRModule, relax.Function], opset: Optional[int] = None,
                 input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
                 model_name: str = "main", name_prefix: str = "",
                 origins: Optional[Dict[str, str]] = None, standard_ops: bool = False,
                 relative_reshape: bool = False,
                 initializer: Optional[Callable[[str, np.ndarray, int], Optional[onnx.TensorProto]]] = None
                 ) -> onnx.ModelProto:
    """Export a Relax ``IRModule`` (its ``main``) or ``relax.Function`` to an ONNX model.

    Parameters
    ----------
    mod_or_func : tvm.IRModule | relax.Function
    opset : int, optional
        Target opset of the default domain.  By default the lowest opset (>= 13) in which
        every emitted node is valid.  If given, every node must be valid in it, otherwise
        :class:`ExportError` is raised.
    input_names, output_names : sequence of str, optional
        Graph input / output names.  Default: Relax parameter names; ``output`` (single
        output) or ``output_0``, ``output_1``, ... (tuple outputs, flattened).  An output
        may carry an input's name only if it returns that input unchanged.
    name_prefix : str, optional
        Prepended to every node name, intermediate tensor name and initializer name (not to
        graph input/output names), so that several exported regions can be spliced into one
        graph without name clashes.
    origins : dict, optional
        Relax binding name -> name of the ONNX node it came from; error messages then say
        ``(from ONNX node '...')`` (TVM's importer keeps no such link itself).
    standard_ops : bool, optional
        Write only default-domain ONNX operators: the runtime's fused operators (calls to functions lowered by
        ``taso_tvm.graph.ops.decompose`` in ``composite`` mode) are written as their decomposition instead of
        ONNX Runtime's ``com.microsoft`` nodes.
    relative_reshape : bool, optional
        Write each static reshape relative to its input (the leading dims it keeps as 0, the first other one as
        -1), so that a graph exported at one binding of a model's symbolic dims also computes the same at others
        (a region of a model with a symbolic batch or sequence).

    Every failure is an :class:`ExportError` with a one-line message.
    """
    try:
        model = _export(mod_or_func, opset, input_names, output_names, model_name, origins, standard_ops,
                        relative_reshape, initializer)
    except ExportError:
        raise
    except Exception as e:  # an exporter bug must still read as one line, not a traceback
        raise ExportError(f"cannot export model: internal error {type(e).__name__}: {one_line(e)}") from e
    if name_prefix:
        keep = {v.name for v in model.graph.input} | {v.name for v in model.graph.output}
        apply_name_prefix(model.graph, name_prefix, keep)
    return model


def _export(mod_or_func, opset, input_names, output_names, model_name, origins=None,
            standard_ops: bool = False, relative_reshape: bool = False, initializer=None) -> onnx.ModelProto:
    mod, func = _get_main(mod_or_func)
    exp = RelaxExporter(mod)
    ctx = exp.ctx
    ctx.target_opset = opset
    ctx.standard_ops = standard_ops
    ctx.relative_reshape = relative_reshape
    ctx.origins = dict(origins or {})

    graph_inputs, values, num_input, init_from_params = _bind_inputs(ctx, func, input_names)
    input_names_set = set(values[:num_input])
    ret_leaves = _flatten_types(func.body.ty if func.body.ty is not None else func.ret_ty)
    out_names = _reserve_output_names(ctx, output_names, len(ret_leaves), input_names_set)

    env: Dict[Any, Any] = {}
    result = exp.convert_function_body(func, values, env)
    leaves = _flatten_values(result)
    if len(leaves) != len(ret_leaves):
        raise ExportError(f"cannot export: function returns {len(leaves)} tensors but its type has "
                          f"{len(ret_leaves)}")
    graph_outputs = _bind_outputs(ctx, leaves, out_names, ret_leaves, input_names_set)

    alive, needed = _live_nodes(ctx, out_names)
    inits = {k: t for k, t in ctx.initializers.items() if k in needed or k in init_from_params}
    v = _opset.choose_opset(alive, opset, ctx.origins)
    node_protos = _opset.render(alive, v, inits, ctx.types)
    return _assemble_model(ctx, model_name, v, node_protos, graph_inputs, graph_outputs, inits, initializer)


def _bind_inputs(ctx, func, input_names):
    """Name the function's parameters: graph inputs (value infos, element types), or initializers for the
    weights the importer kept as parameters (``num_input`` / ``params`` attributes).

    Returns the graph inputs' value infos, every parameter's ONNX name, the number of graph inputs and the
    names of the initializers made from parameters."""
    params = list(func.params)
    num_input = len(params)
    weights = None
    if func.attrs is not None and "num_input" in func.attrs:
        num_input = int(func.attrs["num_input"])
        if "params" in func.attrs:
            weights = list(func.attrs["params"])
    if input_names is not None:
        input_names = list(input_names)
        if len(input_names) != num_input:
            raise ExportError(f"cannot export: {len(input_names)} input_names given for {num_input} inputs")
    graph_inputs = []
    values = []
    init_from_params = []
    for i, p in enumerate(params):
        name = input_names[i] if (input_names is not None and i < num_input) else p.name
        if not ctx.reserve(name):
            name = ctx.fresh(name)
        ty = p.ty
        if i >= num_input and weights is not None and i - num_input < len(weights):
            arr = tensor_to_numpy(weights[i - num_input])
            elem = onnx_dtype(ty.dtype)
            ctx.add_initializer(name, arr, elem)
            init_from_params.append(name)
        else:
            if not isinstance(ty, relax.TensorType):
                raise ExportError(f"cannot export function parameter '{p.name}': type {ty} is not a tensor")
            graph_inputs.append(_value_info(name, ty))
            ctx.types[name] = onnx_dtype(ty.dtype)
        values.append(name)
    return graph_inputs, values, num_input, init_from_params


def _reserve_output_names(ctx, output_names, n_out: int, input_names: set) -> list:
    """The graph output names (given, or ``output`` / ``output_<i>``), reserved before the body is converted."""
    if output_names is not None:
        out_names = list(output_names)
        if len(out_names) != n_out:
            raise ExportError(f"cannot export: {len(out_names)} output_names given for {n_out} outputs")
    else:
        out_names = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
    if len(set(out_names)) != len(out_names):
        raise ExportError(f"cannot export: output names {out_names} are not distinct")
    for n in out_names:
        # an output may keep an input's name only when it returns that very input (checked by _bind_outputs)
        if n not in input_names and not ctx.reserve(n):
            raise ExportError(f"cannot export: output name '{n}' collides with another tensor name")
    return out_names


def _live_nodes(ctx, out_names):
    """Dead-code elimination: the nodes the outputs need, in order and named ``<binding>_<op>_<i>``, and the
    set of tensor names they read."""
    needed = set(out_names)
    alive = []
    for n in reversed(ctx.nodes):
        if any(o in needed for o in n.outputs if o):
            alive.append(n)
            needed.update(i for i in n.inputs if i)
            needed.update(n.implicit)
            needed.update(v for v in n.flex.values() if isinstance(v, str))
    alive.reverse()
    for i, n in enumerate(alive):
        n.name = f"{n.binding}_{n.op_type}_{i}" if n.binding else f"{n.op_type}_{i}"
    return alive, needed


def _assemble_model(ctx, model_name: str, opset: int, node_protos, graph_inputs, graph_outputs,
                    inits, initializer=None) -> onnx.ModelProto:
    """The ModelProto, built in place so that large initializers are copied exactly once."""
    model = onnx.ModelProto()
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, RUNTIME_DOMAINS[d]) for d in sorted({n.domain for n in node_protos})
               if d in RUNTIME_DOMAINS]
    model.opset_import.extend(opsets)
    model.producer_name = "taso_tvm"
    model.producer_version = "0.1"
    graph = model.graph
    graph.name = model_name
    graph.node.extend(node_protos)
    graph.input.extend(graph_inputs)
    graph.output.extend(graph_outputs)
    for name, (arr, elem) in inits.items():
        t = initializer(name, arr, elem) if initializer is not None else None
        if t is None:
            fill_tensor_proto(graph.initializer.add(), name, arr, elem)
        else:
            graph.initializer.append(t)
    model.ir_version = onnx.IR_VERSION
    try:
        model.ir_version = max(helper.find_min_ir_version_for(opsets), _min_ir_for_types(ctx, inits))
    except Exception:  # pragma: no cover
        pass
    return model


def _bind_outputs(ctx, leaves, out_names, ret_types, input_names) -> list:
    """Give every returned tensor its graph output name; returns the output ValueInfos.

    A node's output is renamed in place the first time it is returned.  A tensor returned
    twice, a graph input (under another name) and a constant/initializer are copied by an
    ``Identity``, because an ONNX graph output needs a distinct name made by a node.
    """
    ctx.binding, ctx.relax_op = "output", "return"
    final = {}  # leaf tensor -> the graph output name it was renamed to
    graph_outputs = []
    for leaf, name, ty in zip(leaves, out_names, ret_types):
        if not isinstance(leaf, str):
            raise ExportError(f"cannot export output '{name}': not a tensor")
        if name in input_names:
            if leaf != name:
                raise ExportError(f"cannot export: output name '{name}' is an input name but the output is "
                                  "not that input")
        elif leaf in final:
            ctx.node("Identity", [final[leaf]], outputs=[name], out_types=[ctx.types[leaf]])
        elif ctx.producer.get(leaf) is not None and leaf not in input_names:
            _rename(ctx, leaf, name)
            final[leaf] = name
        else:
            ctx.node("Identity", [leaf], outputs=[name], out_types=[ctx.types[leaf]])
        graph_outputs.append(_value_info(name, ty))
    return graph_outputs


def _min_ir_for_types(ctx, inits) -> int:
    ir = 7
    for t in set(ctx.types.values()):
        if t in (TensorProto.BFLOAT16,):
            ir = max(ir, 4)
        elif t in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                   TensorProto.FLOAT8E5M2FNUZ):
            ir = max(ir, 9)
        elif t in (TensorProto.UINT4, TensorProto.INT4):
            ir = max(ir, 10)
        elif t == TensorProto.FLOAT4E2M1:
            ir = max(ir, 11)
    return ir


def _rename(ctx, old, new):
    prod = ctx.producer[old]
    prod.outputs = [new if o == old else o for o in prod.outputs]
    for n in _opset.all_nodes(ctx.nodes):  # including If branches reading outer names
        if old in n.inputs:
            n.inputs = [new if i == old else i for i in n.inputs]
        if old in n.implicit:
            n.implicit = [new if i == old else i for i in n.implicit]
    ctx.types[new] = ctx.types[old]
    ctx.producer[new] = prod


def apply_name_prefix(graph: onnx.GraphProto, prefix: str, keep: set) -> None:
    """Prefix every node, intermediate tensor, initializer and subgraph name of ``graph``
    (recursively) except the names in ``keep`` (the graph's inputs and outputs)."""
    mapping: Dict[str, str] = {}

    def subgraphs(n):
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
            for g in a.graphs:
                yield g

    def collect(g):
        names = [t.name for t in g.initializer]
        for n in g.node:
            names.extend(n.output)
            for sub in subgraphs(n):
                names.extend(i.name for i in sub.input)
                collect(sub)
        for nm in names:
            if nm and nm not in keep:
                mapping[nm] = prefix + nm

    def rename(g):
        for t in g.initializer:
            t.name = mapping.get(t.name, t.name)
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            vi.name = mapping.get(vi.name, vi.name)
        for n in g.node:
            n.input[:] = [mapping.get(i, i) for i in n.input]
            n.output[:] = [mapping.get(o, o) for o in n.output]
            if n.name:
                n.name = prefix + n.name
            for sub in subgraphs(n):
                sub.name = prefix + sub.name
                rename(sub)

    collect(graph)
    rename(graph)
