"""Emitter context shared by all Relax -> ONNX converters.

The context owns the ONNX graph under construction (a list of :class:`NodeSpec`, the
initializers and the element type of every ONNX tensor name), knows which Relax binding
is being converted (for error messages and output naming), and offers small helpers that
converters use to emit the common ONNX idioms (constants, casts, reshapes, shape tensors,
reductions whose ``axes`` moved from an attribute to an input between opsets, ...).

Nodes are kept as :class:`NodeSpec` rather than ``onnx.NodeProto`` because their final
form depends on the opset, which is only known once the whole graph has been converted
(see :mod:`taso_tvm.onnx_io.export.opset`).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto

import tvm
from tvm import relax

from ... import errors as _errors
from .tensor_types import (ONNX_TO_NP, TYPESTR_TO_ELEM, _relax_tensor_type, is_tir_var, onnx_dtype, prim_to_py,
                           tensor_to_numpy)


class ExportError(_errors.ExportError, RuntimeError):
    """Raised when a Relax program cannot be expressed in ONNX.

    The message is a single line naming the Relax operator and the binding, e.g.
    ``cannot export relax.foo in binding 'lv12': no ONNX mapping``.
    """


# --------------------------------------------------------------------------------------
# attribute access with consumption tracking ("never drop an attribute")
# --------------------------------------------------------------------------------------
def _attr_fields(attrs) -> List[str]:
    if attrs is None:
        return []
    ti = getattr(type(attrs), "__tvm_ffi_type_info__", None)
    names: List[str] = []
    while ti is not None:
        names = [f.name for f in ti.fields] + names
        ti = ti.parent_type_info
    return names


class AttrView:
    """Read-only view of a Relax call's attrs that records which fields were read.

    After a converter ran, the exporter raises if a field was never read, so no
    attribute can be silently dropped.
    """

    def __init__(self, attrs):
        object.__setattr__(self, "_attrs", attrs)
        object.__setattr__(self, "_fields", _attr_fields(attrs))
        object.__setattr__(self, "_used", set())

    def __getattr__(self, name):
        fields = object.__getattribute__(self, "_fields")
        if name not in fields:
            raise AttributeError(name)
        object.__getattribute__(self, "_used").add(name)
        raw = getattr(object.__getattribute__(self, "_attrs"), name)
        return _norm_attr(raw)

    def raw(self, name):
        self._used.add(name)
        return getattr(self._attrs, name)

    def fields(self) -> List[str]:
        return list(self._fields)

    def unused(self) -> List[str]:
        return [f for f in self._fields if f not in self._used]

    def consume_all(self):
        self._used.update(self._fields)


def _norm_attr(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tvm.tirx.IntImm) or isinstance(v, tvm.tirx.FloatImm):
        return prim_to_py(v)
    if isinstance(v, tvm.ir.StringImm):
        return str(v.value)
    cls = type(v).__name__
    if cls in ("DataType", "dtype") or "DataType" in cls:
        return str(v)
    if hasattr(v, "__len__") and not isinstance(v, (str, bytes)):
        try:
            return [_norm_attr(x) for x in v]
        except TypeError:
            pass
    try:
        import tvm_ffi

        if isinstance(v, tvm_ffi.core.String):  # pragma: no cover - depends on ffi version
            return str(v)
    except Exception:  # pragma: no cover
        pass
    return v


# --------------------------------------------------------------------------------------
# node specs
# --------------------------------------------------------------------------------------
class SinceAttr:
    """An attribute written only from opset ``since`` on, where an older schema lacks it but
    its default there equals ``value`` (RoiAlign's coordinate_transformation_mode)."""

    __slots__ = ("value", "since")

    def __init__(self, value, since: int):
        self.value = value
        self.since = int(since)

    def __repr__(self):  # pragma: no cover - debugging aid
        return f"SinceAttr({self.value!r}, {self.since})"


class NodeSpec:
    """An ONNX node whose final form is rendered once the opset is known.

    ``flex`` maps a name (``axes`` / ``split``) to a python list of ints that must become
    an attribute in opsets whose schema has such an attribute, and an int64 input
    otherwise (ReduceMean axes: attribute <= 17, input >= 18; Squeeze/Unsqueeze/ReduceSum/
    Split: attribute <= 12, input >= 13).  ``lo``/``hi`` bound the opsets in which the node
    has the intended semantics beyond what the schema says.  ``fill`` maps the index of an
    omitted (``""``) input to ``(array, elem)``: the constant to pass where the opset's
    schema makes that input required (Resize-11's ``roi``/``scales``).
    """

    __slots__ = (
        "op_type", "inputs", "outputs", "attrs", "domain", "name", "flex", "lo", "hi",
        "relax_op", "binding", "alive", "in_types", "out_types", "subgraphs", "implicit", "fill",
    )

    def __init__(self, op_type, inputs, outputs, attrs, domain="", name="", flex=None,
                 lo=None, hi=None, relax_op="", binding="", fill=None):
        self.op_type = op_type
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = attrs
        self.domain = domain
        self.name = name
        self.flex = flex or {}
        self.fill = fill or {}
        self.lo = lo
        self.hi = hi
        self.relax_op = relax_op
        self.binding = binding
        self.alive = True
        self.in_types = ()
        self.out_types = ()
        # attr name -> (list of NodeSpec, list of output ValueInfoProto, graph name)
        self.subgraphs = {}
        # outer-scope names read by the subgraphs (for dead-code elimination)
        self.implicit = []

    def __repr__(self):  # pragma: no cover - debugging aid
        return f"NodeSpec({self.op_type}, {self.inputs} -> {self.outputs}, {self.attrs}, flex={self.flex})"


_LATEST = onnx.defs.onnx_opset_version()
_schema_cache: Dict[tuple, Any] = {}


def latest_schema(op_type: str, domain: str = ""):
    key = (op_type, domain)
    if key not in _schema_cache:
        _schema_cache[key] = onnx.defs.get_schema(op_type, _LATEST, domain)
    return _schema_cache[key]


def infer_output_types(op_type, in_types, attrs, n_out, domain=""):
    """Element types of a node's outputs, from the (latest) schema's type constraints."""
    if op_type == "Cast":
        return [int(attrs["to"])]
    if op_type == "CastLike":
        return [in_types[1]]
    if op_type == "ConstantOfShape":
        val = attrs.get("value")
        return [val.data_type if val is not None else TensorProto.FLOAT]
    if op_type in ("EyeLike", "RandomNormalLike", "RandomUniformLike") and "dtype" in attrs:
        return [int(attrs["dtype"])]
    schema = latest_schema(op_type, domain)
    tc = {t.type_param_str: list(t.allowed_type_strs) for t in schema.type_constraints}
    bind: Dict[str, int] = {}
    for i, t in enumerate(in_types):
        if t is None or not schema.inputs:
            continue
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]
        bind.setdefault(formal.type_str, t)
    outs = []
    for j in range(n_out):
        formal = schema.outputs[min(j, len(schema.outputs) - 1)]
        ts = formal.type_str
        if ts in bind:
            outs.append(bind[ts])
        elif ts in tc and len(tc[ts]) == 1 and tc[ts][0] in TYPESTR_TO_ELEM:
            outs.append(TYPESTR_TO_ELEM[tc[ts][0]])
        elif ts in TYPESTR_TO_ELEM:
            outs.append(TYPESTR_TO_ELEM[ts])
        else:
            raise ValueError(f"cannot infer output type {j} of {op_type}; pass out_types")
    return outs


class EmitContext:
    """Collects ONNX nodes / initializers while the exporter walks a Relax function."""

    def __init__(self):
        self.nodes: List[NodeSpec] = []
        # name -> (numpy array, ONNX element type); written into the model at the very end
        self.initializers: Dict[str, tuple] = {}
        self.types: Dict[str, int] = {}
        self.producer: Dict[str, NodeSpec] = {}
        self._names: set = set()
        self._name_counter: Dict[str, int] = {}
        self._const_cache: Dict[tuple, str] = {}
        self._obj_const_cache: Dict[Any, str] = {}
        self._shape_cache: Dict[str, str] = {}
        self._memo: Dict[tuple, Any] = {}
        # binding currently being converted
        self.relax_op: str = ""
        self.binding: str = ""
        self.call = None
        self.out_ty = None
        self.out_var = None
        self.target_opset = None  # the opset requested by the caller, if any
        self.standard_ops = False  # write fused operators as their decomposition (default-domain ONNX only)
        self.broadcast_inputs: frozenset = frozenset()  # inputs with a fixed 1 where others may be wider
        self.relative_reshape = False  # static reshapes relative to the input's leading dims (`relative_shape`)
        self.origins: Dict[str, str] = {}  # binding name -> ONNX node name, for messages
        # hooks installed by the exporter
        self.tir_resolver = None  # tir.Var -> ONNX name of a [1]-shaped int64 tensor
        self.exporter = None

    # ---------------------------------------------------------------- naming / errors
    def fresh(self, base: str) -> str:
        base = base or "t"
        if base not in self._names:
            self._names.add(base)
            return base
        k = self._name_counter.get(base, 0)
        while True:
            k += 1
            cand = f"{base}_{k}"
            if cand not in self._names:
                self._name_counter[base] = k
                self._names.add(cand)
                return cand

    def reserve(self, name: str) -> bool:
        if name in self._names:
            return False
        self._names.add(name)
        return True

    def where(self, relax_op: str, binding: str) -> str:
        """``relax.foo in binding 'lv3'`` (+ ``(from ONNX node 'Conv_3')`` when the caller said)."""
        b = binding or "?"
        src = self.origins.get(b) if self.origins else None
        return f"{relax_op or 'expression'} in binding '{b}'" + (f" (from ONNX node '{src}')" if src else "")

    def error(self, reason: str) -> ExportError:
        return ExportError(f"cannot export {self.where(self.relax_op, self.binding)}: {reason}")

    def fail(self, reason: str):
        raise self.error(reason)

    # ---------------------------------------------------------------- nodes
    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, outputs=None,
             out_types=None, domain: str = "", flex=None, lo=None, hi=None, fill=None,
             **attrs) -> List[str]:
        """Append a node; returns its output names."""
        inputs = ["" if i is None else i for i in inputs]
        if outputs is None:
            base = (self.binding or op_type.lower())
            outputs = [self.fresh(base) for _ in range(n_out)]
        else:
            for o in outputs:
                self._names.add(o)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        in_types = [self.types.get(i) if i else None for i in inputs]
        if out_types is None:
            try:
                out_types = infer_output_types(op_type, in_types, attrs, len(outputs), domain)
            except Exception as e:  # internal error, should not happen
                self.fail(f"internal: {e}")
        spec = NodeSpec(op_type, inputs, outputs, attrs, domain, name="", flex=flex, lo=lo,
                        hi=hi, relax_op=self.relax_op, binding=self.binding, fill=fill)
        spec.in_types = tuple(in_types)
        spec.out_types = tuple(out_types)
        for o, t in zip(outputs, out_types):
            if o:
                self.types[o] = t
                self.producer[o] = spec
        self.nodes.append(spec)
        return outputs

    def op(self, op_type: str, *inputs: str, **kw) -> str:
        """Single-output node."""
        return self.node(op_type, list(inputs), **kw)[0]

    # ---------------------------------------------------------------- constants
    def add_initializer(self, name: str, arr, elem: int) -> str:
        self.initializers[name] = (arr, elem)
        self.types[name] = elem
        return name

    def const(self, value, elem: Optional[int] = None, name: Optional[str] = None) -> str:
        """A numpy-convertible value -> initializer name (small ones are deduplicated)."""
        arr = np.asarray(value)
        if elem is None:
            elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        elif elem in ONNX_TO_NP:
            arr = arr.astype(ONNX_TO_NP[elem], copy=False)
        key = None
        if arr.size <= 64:
            key = (elem, arr.shape, arr.tobytes())
            if key in self._const_cache and name is None:
                return self._const_cache[key]
        nm = self.fresh(name or "const")
        self.add_initializer(nm, arr, elem)
        if key is not None and name is None:
            self._const_cache[key] = nm
        return nm

    def i64(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64), TensorProto.INT64)

    def scalar(self, value, elem: int) -> str:
        """0-d constant of element type ``elem``."""
        if elem in ONNX_TO_NP:
            return self.const(np.array(value, dtype=ONNX_TO_NP[elem]), elem)
        if elem == TensorProto.BFLOAT16:
            return self.const(np.array(value, dtype=np.float32), TensorProto.FLOAT)  # caller casts
        self.fail(f"cannot build a constant of ONNX type {elem}")

    def typed_scalar(self, value, elem: int) -> str:
        """0-d constant of exactly ``elem`` (casting through float32 for exotic types)."""
        if elem in ONNX_TO_NP:
            return self.scalar(value, elem)
        f = self.scalar(value, TensorProto.FLOAT)
        return self.memo(("cast", f, elem), lambda: self.op("Cast", f, to=elem))

    def relax_const(self, const) -> str:
        """tvm.ir.GenericConst -> initializer (one per constant object)."""
        key = const.__chandle__()
        if key in self._obj_const_cache:
            return self._obj_const_cache[key]
        dtype = str(const.ty.dtype) if _relax_tensor_type(const) is not None else str(const.value.dtype)
        elem = onnx_dtype(dtype)
        arr = tensor_to_numpy(const.value)
        nm = self.const(arr, elem)
        self._obj_const_cache[key] = nm
        return nm

    def memo(self, key, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    # ---------------------------------------------------------------- common idioms
    def cast(self, x: str, to: int) -> str:
        if self.types.get(x) == to:
            return x
        return self.memo(("cast", x, to), lambda: self.op("Cast", x, to=int(to)))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        shape = [int(s) for s in shape]
        if 0 in shape:
            return self.op("Reshape", x, self.i64(shape), allowzero=1)
        return self.op("Reshape", x, self.i64(shape))

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return x
        return self.op("Transpose", x, perm=perm)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", x, flex={"axes": [int(a) for a in axes]})

    def squeeze(self, x: str, axes: Optional[Sequence[int]]) -> str:
        if axes is None:
            return self.op("Squeeze", x)
        return self.op("Squeeze", x, flex={"axes": [int(a) for a in axes]})

    def reduce(self, op_type: str, x: str, axes: Optional[Sequence[int]], keepdims: bool) -> str:
        if axes is None:
            return self.op(op_type, x, keepdims=int(bool(keepdims)))
        return self.op(op_type, x, keepdims=int(bool(keepdims)), flex={"axes": [int(a) for a in axes]})

    def shape_of(self, x: str) -> str:
        if x not in self._shape_cache:
            self._shape_cache[x] = self.op("Shape", x)
        return self._shape_cache[x]

    def slice1d(self, x: str, start: int, end: int) -> str:
        return self.memo(("slice1d", x, start, end),
                         lambda: self.op("Slice", x, self.i64([start]), self.i64([end]), self.i64([0])))

    def dim_of(self, x: str, i: int) -> str:
        """[1]-shaped int64 tensor holding dim ``i`` of ``x``."""
        return self.slice1d(self.shape_of(x), i, i + 1)

    def concat(self, xs: Sequence[str], axis: int) -> str:
        if len(xs) == 1:
            return xs[0]
        return self.op("Concat", *xs, axis=int(axis))

    # ---------------------------------------------------------------- symbolic shapes
    def prim_expr(self, e) -> str:
        """A tir PrimExpr -> ONNX [1]-shaped int64 tensor name."""
        if isinstance(e, int):
            return self.i64([e])
        if isinstance(e, tvm.tirx.IntImm):
            return self.i64([int(e.value)])
        if is_tir_var(e):
            if self.tir_resolver is None:
                self.fail(f"symbolic variable '{e}' has no definition")
            return self.tir_resolver(e)
        # keyed by the expression *and* the ONNX tensors its variables resolve to (two
        # different vars may print alike; an inlined callee's vars are rebound per call)
        try:
            free = list(tvm.tirx.analysis.undefined_vars(e))
        except Exception:  # pragma: no cover
            free = []
        key = ("prim", str(e), tuple(self.prim_expr(v) for v in free))
        if key in self._memo:
            return self._memo[key]
        T = tvm.tirx
        binops = {T.Add: "Add", T.Sub: "Sub", T.Mul: "Mul", T.Max: "Max", T.Min: "Min"}
        for cls, onnx_op in binops.items():
            if isinstance(e, cls):
                out = self.op(onnx_op, self.prim_expr(e.a), self.prim_expr(e.b))
                break
        else:
            if isinstance(e, (T.Div,)):
                out = self.op("Div", self.prim_expr(e.a), self.prim_expr(e.b))
            elif isinstance(e, T.FloorDiv):
                a, b = self.prim_expr(e.a), self.prim_expr(e.b)
                m = self.op("Mod", a, b, fmod=0)
                out = self.op("Div", self.op("Sub", a, m), b)
            elif isinstance(e, T.FloorMod):
                out = self.op("Mod", self.prim_expr(e.a), self.prim_expr(e.b), fmod=0)
            elif isinstance(e, T.Cast):
                out = self.prim_expr(e.value)
            else:
                self.fail(f"cannot express symbolic expression '{e}' in ONNX")
        self._memo[key] = out
        return out

    def shape_tensor(self, dims: Iterable) -> str:
        """List of int / PrimExpr -> ONNX 1-D int64 tensor."""
        dims = list(dims)
        if all(isinstance(d, (int, tvm.tirx.IntImm)) for d in dims):
            return self.i64([int(d) for d in dims])
        parts: List[str] = []
        run: List[int] = []
        for d in dims:
            if isinstance(d, (int, tvm.tirx.IntImm)):
                run.append(int(d))
                continue
            if run:
                parts.append(self.i64(run))
                run = []
            parts.append(self.prim_expr(d))
        if run:
            parts.append(self.i64(run))
        return self.concat(parts, 0)

    def prim_scalar(self, e, elem: int) -> str:
        """A PrimExpr (constant or symbolic) -> 0-d ONNX tensor of type ``elem``."""
        if isinstance(e, (int, float, bool)):
            return self.typed_scalar(e, elem)
        if isinstance(e, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return self.typed_scalar(prim_to_py(e), elem)
        t = self.prim_expr(e)
        t = self.op("Squeeze", t, flex={"axes": [0]})
        return self.cast(t, elem)
