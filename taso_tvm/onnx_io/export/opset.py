"""Opset selection and rendering of :class:`NodeSpec` into ``onnx.NodeProto``.

Every emitted node is checked against the ONNX operator schemas: a node is *valid* at
opset ``v`` when the schema active at ``v`` exists and is not deprecated, knows all the
node's attributes, accepts its number of inputs/outputs and the element types of its
inputs/outputs, and ``v`` lies inside the node's explicit ``[lo, hi]`` range (used for
semantic changes that the schema does not show, e.g. Softmax before 13).  Nodes with a
``flex`` field (axes / split) are rendered with an attribute where the schema has one and
an int64 input otherwise, so they are valid on both sides of the change.

Without an explicit opset, the exporter picks the smallest ``v >= DEFAULT_MIN_OPSET`` at
which every node is valid, i.e. the max over nodes of the minimum opset that node needs.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper

from .context import ExportError, NodeSpec, SinceAttr
from .tensor_types import ELEM_TO_TYPESTR

MAX_OPSET = onnx.defs.onnx_opset_version()
DEFAULT_MIN_OPSET = 13
MIN_SUPPORTED_OPSET = 7

_valid_cache: Dict[tuple, bool] = {}
_schema_at_cache: Dict[tuple, object] = {}


def schema_at(op_type: str, version: int, domain: str = ""):
    key = (op_type, version, domain)
    if key not in _schema_at_cache:
        try:
            _schema_at_cache[key] = onnx.defs.get_schema(op_type, version, domain)
        except onnx.defs.SchemaError:
            _schema_at_cache[key] = None
    return _schema_at_cache[key]


def _signature(n: NodeSpec) -> tuple:
    return (
        n.op_type,
        n.domain,
        tuple(sorted((k, v.since if isinstance(v, SinceAttr) else 0) for k, v in n.attrs.items())),
        tuple(sorted(n.flex)),
        tuple(sorted(n.fill)),
        tuple(i for i, x in enumerate(n.inputs) if x == ""),
        len(n.inputs),
        n.in_types,
        len(n.outputs),
        n.out_types,
    )


def _types_ok(formals, types, schema) -> bool:
    tc = {t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints}
    if not formals:
        return all(t is None for t in types)
    for i, t in enumerate(types):
        if t is None:
            continue
        if i >= len(formals):
            last = formals[-1]
            if last.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
                return False
            formal = last
        else:
            formal = formals[i]
        allowed = tc.get(formal.type_str, {formal.type_str})
        if ELEM_TO_TYPESTR.get(t) not in allowed:
            return False
    return True


def _flex_input_index(schema, name: str) -> Optional[int]:
    for i, f in enumerate(schema.inputs):
        if f.name == name:
            return i
    return None


# variadic ops that broadcast only from opset 8 on (the exporter does not track shapes, so
# any multi-input use is taken to need it)
_BROADCAST_SINCE_8 = {"Max", "Min", "Sum", "Mean"}


RUNTIME_DOMAINS = {"com.microsoft": 1}  # operator domains of ONNX Runtime's own kernels -> their opset version


def node_valid(n: NodeSpec, v: int) -> bool:
    if n.domain in RUNTIME_DOMAINS:  # the runtime's fused operators: no ONNX schema, valid beside any opset
        return True
    if n.lo is not None and v < n.lo:
        return False
    if v < 8 and n.op_type in _BROADCAST_SINCE_8 and not n.domain and len(n.inputs) > 1:
        return False
    if n.hi is not None and v > n.hi:
        return False
    sig = _signature(n) + (v,)
    hit = _valid_cache.get(sig)
    if hit is not None:
        return hit
    ok = _schema_valid(n, v)
    _valid_cache[sig] = ok
    return ok


def _schema_valid(n: NodeSpec, v: int) -> bool:
    s = schema_at(n.op_type, v, n.domain)
    if s is None or s.deprecated:
        return False
    for a, val in n.attrs.items():
        if a not in s.attributes and not (isinstance(val, SinceAttr) and v < val.since):
            return False
    n_in = len(n.inputs)
    for k in n.flex:
        if k in s.attributes:
            continue
        idx = _flex_input_index(s, k)
        if idx is None:
            return False
        n_in = max(n_in, idx + 1)
    if n_in < s.min_input or n_in > s.max_input:
        return False
    for i, x in enumerate(n.inputs):
        # an omitted input is allowed where the formal is optional (or a constant can fill it)
        if x == "" and i < len(s.inputs) and i not in n.fill \
                and s.inputs[i].option == onnx.defs.OpSchema.FormalParameterOption.Single:
            return False
    if len(n.outputs) < s.min_output or len(n.outputs) > s.max_output:
        return False
    if not _types_ok(s.inputs, list(n.in_types), s):
        return False
    if not _types_ok(s.outputs, list(n.out_types), s):
        return False
    return True


def min_valid_opset(n: NodeSpec, lo: int = 1) -> Optional[int]:
    for v in range(lo, MAX_OPSET + 1):
        if node_valid(n, v):
            return v
    return None


def all_nodes(nodes: List[NodeSpec]) -> List[NodeSpec]:
    """Nodes including those nested in subgraphs (If branches)."""
    out = []
    for n in nodes:
        out.append(n)
        for sub, _, _ in n.subgraphs.values():
            out.extend(all_nodes(sub))
    return out


def choose_opset(nodes: List[NodeSpec], requested: Optional[int], origins: Optional[dict] = None) -> int:
    nodes = all_nodes(nodes)
    if requested is not None:
        requested = int(requested)
        if requested < MIN_SUPPORTED_OPSET or requested > MAX_OPSET:
            raise ExportError(
                f"cannot export at opset {requested}: supported opsets are "
                f"{MIN_SUPPORTED_OPSET}..{MAX_OPSET}")
        for n in nodes:
            if not node_valid(n, requested):
                raise ExportError(_explain(n, requested, origins))
        return requested
    # distinct signatures only
    seen = {}
    for n in nodes:
        key = _signature(n) + (n.lo, n.hi)
        if key not in seen:
            seen[key] = n
    uniq = list(seen.values())
    v = DEFAULT_MIN_OPSET
    while v <= MAX_OPSET:
        bad = None
        for n in uniq:
            if not node_valid(n, v):
                bad = n
                break
        if bad is None:
            return v
        # jump to the first version where the offending node is valid
        nv = min_valid_opset(bad, v + 1)
        if nv is None:
            raise ExportError(_explain(bad, v, origins))
        v = nv
    raise ExportError("cannot find an ONNX opset in which all exported nodes are valid")


def _explain(n: NodeSpec, v: int, origins: Optional[dict] = None) -> str:
    where = f"{n.relax_op or 'expression'} in binding '{n.binding or '?'}'"
    if origins and origins.get(n.binding):
        where += f" (from ONNX node '{origins[n.binding]}')"
    types = ", ".join(ELEM_TO_TYPESTR.get(t, "?") for t in n.in_types if t is not None)
    mv = min_valid_opset(n, 1)
    lo_note = ""
    if mv is not None:
        later = [x for x in range(v + 1, MAX_OPSET + 1) if node_valid(n, x)]
        if mv > v:
            lo_note = f"needs opset >= {mv}"
        elif later:
            lo_note = f"is valid in opsets {mv}..{max(x for x in range(mv, MAX_OPSET + 1) if node_valid(n, x))} but not {v}"
        else:
            lo_note = f"is not valid at opset {v}"
    else:
        lo_note = "has no valid form in any opset"
    return (f"cannot export {where} at opset {v}: ONNX {n.op_type}({types}) {lo_note}")


def render(nodes: List[NodeSpec], v: int, initializers: dict, types: dict) -> List[onnx.NodeProto]:
    """NodeSpecs -> NodeProtos for opset ``v`` (flex axes become attributes or inputs)."""
    consts = _ConstantInputs(initializers, types)
    return [_render_node(n, v, consts) for n in nodes]


class _ConstantInputs:
    """The initializers rendering adds (flex axes given as inputs, filled empty inputs): one per distinct
    value, under a name no other tensor has."""

    def __init__(self, initializers: dict, types: dict) -> None:
        self.initializers, self.types = initializers, types
        self.by_key: Dict[tuple, str] = {}
        self.used_names = set(types) | set(initializers)

    def name(self, key: tuple, base: str, arr: np.ndarray, elem: int) -> str:
        if key not in self.by_key:
            nm, j = base, 0
            while nm in self.used_names:
                j += 1
                nm = f"{base}__{j}"
            self.used_names.add(nm)
            self.initializers[nm] = (arr, elem)
            self.types[nm] = elem
            self.by_key[key] = nm
        return self.by_key[key]


def _render_node(n: NodeSpec, v: int, consts: _ConstantInputs) -> onnx.NodeProto:
    inputs = list(n.inputs)
    attrs = dict(n.attrs)
    if n.domain in RUNTIME_DOMAINS:
        while inputs and inputs[-1] == "":
            inputs.pop()
        return helper.make_node(n.op_type, inputs, list(n.outputs), name=n.name or None, domain=n.domain, **attrs)
    if n.flex:
        _place_flex(n, v, inputs, attrs, consts)
    _fill_empty_inputs(n, v, inputs, consts)
    attrs = {k: (val.value if isinstance(val, SinceAttr) else val) for k, val in attrs.items()
             if not (isinstance(val, SinceAttr) and v < val.since)}
    attrs = {k: (val(v) if callable(val) else val) for k, val in attrs.items()}
    for k, (sub, outs, gname) in n.subgraphs.items():
        sub_nodes = render(sub, v, consts.initializers, consts.types)
        attrs[k] = helper.make_graph(sub_nodes, gname, [], outs)
    # drop trailing empty optional inputs
    while inputs and inputs[-1] == "":
        inputs.pop()
    return helper.make_node(n.op_type, inputs, list(n.outputs), name=n.name or None, domain=n.domain or None,
                            **attrs)


def _place_flex(n: NodeSpec, v: int, inputs: list, attrs: dict, consts: _ConstantInputs) -> None:
    """Each flex value (axes, split sizes, ...) as the attribute or the int64 input the schema at ``v`` has."""
    s = schema_at(n.op_type, v, n.domain)
    for k, vals in n.flex.items():
        if k in s.attributes:
            attrs[k] = [int(x) for x in vals]
            continue
        idx = _flex_input_index(s, k)
        key = tuple(int(x) for x in vals)
        base = f"{k}_{'_'.join(str(x).replace('-', 'm') for x in key)}" if len(key) <= 6 else k
        nm = consts.name(key, base, np.asarray(key, dtype=np.int64), TensorProto.INT64)
        while len(inputs) < idx:
            inputs.append("")
        if len(inputs) == idx:
            inputs.append(nm)
        else:
            inputs[idx] = nm


def _fill_empty_inputs(n: NodeSpec, v: int, inputs: list, consts: _ConstantInputs) -> None:
    """Give an omitted input the node's fill value where the schema at ``v`` makes that input required."""
    for idx, (arr, elem) in n.fill.items():
        s = schema_at(n.op_type, v, n.domain)
        if idx < len(inputs) and inputs[idx] == "" and idx < len(s.inputs) \
                and s.inputs[idx].option == onnx.defs.OpSchema.FormalParameterOption.Single:
            key = ("fill", elem, tuple(np.shape(arr)), np.asarray(arr).tobytes())
            inputs[idx] = consts.name(key, f"{n.op_type.lower()}_in{idx}_empty", np.asarray(arr), elem)
