"""Lower a TensorGraph back into Relax bindings with a BlockBuilder."""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir import GenericConst

from ..graph import TensorGraph, weight_array

log = logging.getLogger(__name__)


def substitute(expr: Any, vmap: Mapping[Any, Any]) -> Any:
    """Replace free vars in a normalised (ANF) binding value: calls, tuples and tuple reads over leaves."""
    if isinstance(expr, relax.Var):
        return vmap.get(expr, expr)
    if isinstance(expr, relax.Call):
        args = [substitute(a, vmap) for a in expr.args]
        if all(a.same_as(b) for a, b in zip(args, expr.args)):
            return expr
        return relax.Call(expr.op, args, expr.attrs, expr.ty_args)
    if isinstance(expr, relax.Tuple):
        fields = [substitute(f, vmap) for f in expr.fields]
        return expr if all(a.same_as(b) for a, b in zip(fields, expr.fields)) else relax.Tuple(fields)
    if isinstance(expr, relax.TupleGetItem):
        t = substitute(expr.tuple_value, vmap)
        return expr if t.same_as(expr.tuple_value) else relax.TupleGetItem(t, expr.index)
    if isinstance(expr, relax.MatchCast):
        return relax.MatchCast(expr.var, substitute(expr.value, vmap), expr.ty)
    free = relax.analysis.free_vars(expr) if isinstance(expr, relax.Expr) else []
    if any(v in vmap and not vmap[v].same_as(v) for v in free):  # a symbolic dim's var maps to itself
        raise NotImplementedError(f"cannot substitute inside a {type(expr).__name__}")
    return expr


def _const(node) -> Any:
    v = node.value
    ty = node.types[0]
    if isinstance(v, GenericConst):
        shape = getattr(v.ty, "shape", None)
        try:
            same = shape is not None and tuple(int(d) for d in shape) == tuple(ty.shape)
        except (TypeError, ValueError):
            same = True
        if same:
            return v
    arr = weight_array(node)
    if tuple(arr.shape) != tuple(ty.shape) and arr.size == ty.size:  # a rule's scalar met a [1] constant
        arr = arr.reshape(ty.shape)
    return relax.const(arr, str(arr.dtype))


def lower_graph(graph: TensorGraph, bb: relax.BlockBuilder, inputs: Mapping[str, Any],
                outputs_as: Optional[Sequence[bool]] = None,
                opaque_vars: Optional[Mapping[str, Mapping[int, Any]]] = None,
                fold_weights: bool = True) -> list[Any]:
    """Emit the graph's nodes in topological order into `bb` (inside a dataflow block).

    `inputs` maps input names to Relax expressions. `outputs_as[i]` says whether graph output i is emitted with
    `emit_output` (a block output). Weight-only subgraphs are evaluated with NumPy and emitted as constants when
    `fold_weights` is set. Returns one Relax var (or expression) per graph output.
    """
    out = _Outputs(graph, bb, outputs_as)
    values: dict[int, list] = {}
    arrays: dict[int, list] = {}  # folded weight values
    weight_only: dict[int, bool] = {}
    opaque_vars = opaque_vars or {}
    for node in graph.topo_order():
        if node.op == "input":
            values[node.id] = [inputs[node.attrs["name"]]]
            weight_only[node.id] = False
        elif node.op == "weight":
            values[node.id] = [_const(node)]
            weight_only[node.id] = True
        elif node.op == "opaque":
            values[node.id] = [_lower_opaque(node, bb, values, opaque_vars.get(node.attrs["key"], {}), out)]
            weight_only[node.id] = False
            continue
        else:
            wo = fold_weights and all(weight_only[i] for i, _ in node.inputs)
            weight_only[node.id] = wo
            if not wo:
                values[node.id] = _lower_op(graph, node, bb, values, out)
                continue
            arrays[node.id] = _fold(graph, node, arrays)
            values[node.id] = [relax.const(a, str(a.dtype)) for a in arrays[node.id]]
        for ref in node.outputs:  # sources and folded constants: bound only where they are block outputs
            if ref in out.positions:
                out.emit(ref, values[node.id][ref[1]])
    return out.finish(values)


class _Outputs:
    """Binds lowered values in the block builder and collects the graph's outputs: the first binding of a graph
    output asked for as a block output is emitted with `emit_output`."""

    def __init__(self, graph: TensorGraph, bb: relax.BlockBuilder, outputs_as: Optional[Sequence[bool]]) -> None:
        self.graph = graph
        self.bb = bb
        self.outputs_as = list(outputs_as) if outputs_as is not None else [False] * len(graph.outputs)
        self.positions: dict[tuple, list[int]] = {}
        for i, ref in enumerate(graph.outputs):
            self.positions.setdefault(ref, []).append(i)
        self.result: list[Any] = [None] * len(graph.outputs)

    def emit(self, ref: tuple, expr: Any) -> Any:
        """Bind `expr` (the value of tensor `ref`) unless it is a var or constant already; returns the binding."""
        pos = self.positions.get(ref)
        if pos and any(self.outputs_as[p] for p in pos) and self.result[pos[0]] is None:
            var = self.bb.emit_output(expr)
        elif isinstance(expr, (relax.Var, GenericConst)):
            var = expr
        else:
            var = self.bb.emit(expr)
        for p in pos or []:
            if self.result[p] is None:
                self.result[p] = var
        return var

    def finish(self, values: Mapping[int, list]) -> list[Any]:
        """One Relax value per graph output; those asked for as block outputs are made block outputs."""
        result = self.result
        for i, ref in enumerate(self.graph.outputs):
            if result[i] is None:
                result[i] = values[ref[0]][ref[1]]
            if self.outputs_as[i] and not _is_block_output(result[i]):
                result[i] = self.bb.emit_output(result[i])
        return result


def _lower_opaque(node, bb: relax.BlockBuilder, values: Mapping[int, list], vars_by_pos: Mapping[int, Any],
                  out: _Outputs) -> Any:
    """Re-emit an opaque binding with its free vars (`vars_by_pos`: input position -> var) read from the lowered
    inputs."""
    vmap = {var: values[node.inputs[pos][0]][node.inputs[pos][1]] for pos, var in vars_by_pos.items()}
    if isinstance(node.value, relax.MatchCast):
        mc = node.value
        return bb.match_cast(substitute(mc.value, vmap), mc.ty)
    return out.emit(node.outputs[0], substitute(node.value, vmap))


def _lower_op(graph: TensorGraph, node, bb: relax.BlockBuilder, values: Mapping[int, list], out: _Outputs) -> list:
    """Emit an operator node with its definition's Relax lowering; returns one binding per output."""
    args = [values[i][j] for i, j in node.inputs]
    in_types = [graph.type(r) for r in node.inputs]
    res = node.opdef.lower(bb, args, node.attrs, in_types)
    vals = list(res) if isinstance(res, (list, tuple)) else [res]
    return [out.emit(ref, v) for ref, v in zip(node.outputs, vals)]


def _fold(graph: TensorGraph, node, arrays: Mapping[int, list]) -> list[np.ndarray]:
    """The outputs of a weight-only node, computed with NumPy from its (folded or weight) inputs."""
    args = [arrays[i][j] if i in arrays else weight_array(graph.node(i)) for i, j in node.inputs]
    outs = node.opdef.numpy(args, node.attrs)
    return [_as_type(a, t) for a, t in zip(outs, node.types)]


def _as_type(a: np.ndarray, t: Any) -> np.ndarray:
    """`a` with the element type and shape the graph gives it (a [1] constant the importer typed as a scalar
    broadcasts to [1] in NumPy)."""
    a = np.ascontiguousarray(a, dtype=t.dtype)
    return a.reshape(t.shape) if a.shape != tuple(t.shape) and a.size == t.size else a


def _is_block_output(v: Any) -> bool:
    return isinstance(v, relax.Var) and not isinstance(v, relax.DataflowVar)


def lower_to_function(graph: TensorGraph, name: str = "main", params: Optional[Sequence[str]] = None,
                      opaque_vars: Optional[Mapping[str, Mapping[int, Any]]] = None) -> relax.Function:
    """A standalone Relax function for a graph: its inputs become parameters (in `params` order if given).
    `opaque_vars`: for each opaque node's key, the Relax var its expression reads at each input position.
    (Fused operators lowered as composite calls need the module: `lower_to_module`.)"""
    return lower_to_module(graph, name, params, opaque_vars)[name]


def lower_to_module(graph: TensorGraph, name: str = "main", params: Optional[Sequence[str]] = None,
                    opaque_vars: Optional[Mapping[str, Mapping[int, Any]]] = None) -> "tvm.IRModule":
    """An IRModule whose function `name` computes the graph (see `lower_to_function`), with the private functions
    that composite-lowered fused operators call."""
    in_nodes = {n.attrs["name"]: n for n in graph.inputs()}
    order = list(params) if params is not None else sorted(in_nodes)
    pvars = []
    for p in order:
        ty = in_nodes[p].types[0]
        pvars.append(relax.Var(p, relax.TensorType(list(ty.shape), ty.dtype)))
    bb = relax.BlockBuilder()
    with bb.function(name, pvars):
        with bb.dataflow():
            outs = lower_graph(graph, bb, dict(zip(order, pvars)), outputs_as=[True] * len(graph.outputs),
                               opaque_vars=opaque_vars)
        ret = outs[0] if len(outs) == 1 else relax.Tuple(outs)
        bb.emit_func_output(ret)
    return bb.get()
