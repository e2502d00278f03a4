"""Relax -> ONNX exporter driver: `export_relax` binds the function's inputs, has the walker (`walker.py`) convert
its body, binds and names the outputs, keeps the live nodes, assembles the ``onnx.ModelProto`` and picks the opset.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper

import tvm
from tvm import relax

from ...errors import one_line
from . import opset as _opset
from .context import ExportError
from .tensor_types import fill_tensor_proto, onnx_dtype, tensor_to_numpy
from .opset import RUNTIME_DOMAINS
from .walker import RelaxExporter, _flatten_types, _flatten_values, _value_info


# --------------------------------------------------------------------------------------
# model assembly
# --------------------------------------------------------------------------------------
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
                 relative_reshape: Union[bool, str] = False,
                 broadcast_inputs: Sequence[str] = (),
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
    relative_reshape : bool or "trailing", optional
        Write each static reshape relative to its input (the leading dims it keeps as 0, the first other one as
        -1), so that a graph exported at one binding of a model's symbolic dims also computes the same at others
        (a region of a model with a symbolic batch or sequence).
        ``"trailing"``: also the trailing dims it keeps, read from the input's shape at run time (Shape, Concat):
        ``[B, Hk, R, T, D] -> [B, H, T, D]`` holds at every T (a KV cache's length), not at one.
    broadcast_inputs : sequence of str, optional
        Graph inputs whose type has a fixed dim of 1 where the model's other tensors may have a symbolic one (a
        position table ``[1, S, H]`` beside ``[B, S, H]``): an operator that takes its shape from one operand (ONNX
        Runtime's SkipLayerNormalization) never takes it from these, whatever the binding's shapes were.

    Every failure is an :class:`ExportError` with a one-line message.
    """
    try:
        model = _export(mod_or_func, opset, input_names, output_names, model_name, origins, standard_ops,
                        relative_reshape, initializer, broadcast_inputs)
    except ExportError:
        raise
    except Exception as e:  # an exporter bug must still read as one line, not a traceback
        raise ExportError(f"cannot export model: internal error {type(e).__name__}: {one_line(e)}") from e
    if name_prefix:
        keep = {v.name for v in model.graph.input} | {v.name for v in model.graph.output}
        apply_name_prefix(model.graph, name_prefix, keep)
    return model


def _export(mod_or_func, opset, input_names, output_names, model_name, origins=None,
            standard_ops: bool = False, relative_reshape: Union[bool, str] = False, initializer=None,
            broadcast_inputs: Sequence[str] = ()) -> onnx.ModelProto:
    mod, func = _get_main(mod_or_func)
    exp = RelaxExporter(mod)
    ctx = exp.ctx
    ctx.target_opset = opset
    ctx.standard_ops = standard_ops
    ctx.relative_reshape = relative_reshape
    ctx.broadcast_inputs = frozenset(broadcast_inputs)
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
