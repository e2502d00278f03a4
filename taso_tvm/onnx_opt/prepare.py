"""Import preparation: a working copy of the user's model with its symbolic dims bound and its shape arithmetic
folded, used only to decide what TVM can import and to search; the user's model itself is never changed here.

Binding: the user's `--input-shapes`, else `DEFAULT_DIM_AXIS0` for a symbolic dim on axis 0 (the batch) and
`DEFAULT_DIM_OTHER` elsewhere. Folding: onnxsim (the tool users run for exactly this) with its graph optimizations
off, so every node that survives is the user's node under the same name; shape chains (Shape -> Gather -> Concat
-> Reshape/Pad/Resize/Expand) become constants where the bound shapes allow. The model is prepared at two
bindings of its symbolic dims; a folded constant that differs between them depends on a symbolic dim, and the
node that reads it stays out of the search.
"""
from __future__ import annotations

import copy
import inspect
import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..onnx_io.export import fused_opset
from ..onnx_io.weights import LARGE_ELEMENTS, as_inputs, is_reference
from ..quiet import quiet
from ..runtime.dim_expr import base_dims, dim_value
from ..runtime.dim_expr import parse as parse_dim
from .. import errors as _errors
from .onnx_graph import can_raise_opset

log = logging.getLogger(__name__)

DEFAULT_DIM_AXIS0 = 1  # a symbolic batch dim is costed at batch 1
DEFAULT_DIM_OTHER = 64  # other symbolic dims (sequence, height, width)
NODE_PREFIX = "__taso_node_"


class PrepareError(_errors.ModelError, ValueError):
    """Input shapes that do not fit the model; one line."""


@dataclass
class Binding:
    """Values for a model's symbolic dims and the static input shapes they give."""

    dims: dict[str, int]
    shapes: dict[str, list[int]]

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items())) or "static"


@dataclass
class Folded:
    """The working copy at one binding: which of the model's nodes survive, and their constant inputs."""

    binding: Binding
    model: onnx.ModelProto  # shape-inferred working copy (node names NODE_PREFIX + index)
    kept: dict[int, onnx.NodeProto]  # model node index -> the working copy's node
    consts: dict[str, np.ndarray]  # the working copy's initializers
    types: dict[str, onnx.TypeProto]  # tensor name -> inferred type at this binding

    def const_inputs(self, index: int) -> dict[int, np.ndarray]:
        """Input position -> constant value, for the inputs of kept node `index` that are constants here."""
        node = self.kept[index]
        return {p: self.consts[x] for p, x in enumerate(node.input) if x in self.consts}


@dataclass
class Prepared:
    """The user's model with its working copies at one or two bindings."""

    model: onnx.ModelProto
    folded: list[Folded] = field(default_factory=list)
    folding_used: bool = True
    _dependent: dict = field(default_factory=dict, repr=False)  # dim_dependent_inputs, per node (it compares arrays)

    @property
    def first(self) -> Folded:
        return self.folded[0]

    @property
    def symbolic(self) -> bool:
        return len(self.folded) > 1

    @cached_property
    def opset_ceiling(self) -> int:
        """The newest opset the model may be written at: the one the newest fused forms need (ONNX 23's Attention)
        where its operators mean the same there (`onnx_graph.can_raise_opset`), else 0 (its own)."""
        newest = fused_opset()
        return newest if can_raise_opset(self.model, newest) else 0

    def dim_dependent(self, index: int) -> bool:
        """Whether node `index` reads a folded constant whose value depends on a symbolic dim (or is folded at
        one binding and not at the other)."""
        return bool(self.dim_dependent_inputs(index))

    def dim_dependent_inputs(self, index: int) -> frozenset:
        """The input positions of node `index` whose folded constant depends on a symbolic dim ({-1}: the node is
        folded at one binding and not at the other)."""
        if not self.symbolic:
            return frozenset()
        if index not in self._dependent:
            self._dependent[index] = frozenset(self._compare_bindings(index))
        return self._dependent[index]

    def _compare_bindings(self, index: int) -> set:
        a, b = self.folded[0], self.folded[1]
        if (index in a.kept) != (index in b.kept):
            return {-1}
        if index not in a.kept:
            return set()
        ca, cb = a.const_inputs(index), b.const_inputs(index)
        out = set(ca) ^ set(cb)
        return out | {p for p in set(ca) & set(cb)
                      if ca[p].shape != cb[p].shape or not np.array_equal(ca[p], cb[p])}


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dim_name(vi: onnx.ValueInfoProto, axis: int, dim: onnx.TensorShapeProto.Dimension) -> Optional[str]:
    if dim.HasField("dim_value") and dim.dim_value > 0:
        return None
    return dim.dim_param if dim.HasField("dim_param") and dim.dim_param else f"{vi.name}:{axis}"


def symbolic_dims(model: onnx.ModelProto) -> dict[str, list[tuple[str, int]]]:
    """Symbolic dim name -> the (input, axis) places it appears; unnamed unknown dims get 'input:axis'."""
    out: dict[str, list[tuple[str, int]]] = {}
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            name = _dim_name(vi, axis, d)
            for base in (base_dims(name) if name is not None else ()):
                out.setdefault(base, []).append((vi.name, axis))
    return out


def make_binding(model: onnx.ModelProto, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 dims: Optional[Mapping[str, int]] = None) -> Binding:
    """Values for every symbolic dim: from explicit `dims`, from the user's input shapes, else the defaults."""
    sym = symbolic_dims(model)
    values: dict[str, int] = dict(dims or {})
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    derived: list[tuple[str, int]] = []  # (a dim written as an expression of others, the value given for it)
    for name, shape in (shapes or {}).items():
        vi = inputs.get(name)
        if vi is None:
            raise PrepareError(f"--input-shapes names '{name}', which is not a graph input "
                               f"(inputs: {', '.join(inputs)})")
        have = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if have and len(have) != len(shape):
            raise PrepareError(f"--input-shapes gives '{name}' {len(shape)} dims; the model says {len(have)}")
        for axis, (d, v) in enumerate(zip(have, shape)):
            dn = _dim_name(vi, axis, d)
            if dn is None:
                if d.dim_value != v:
                    raise PrepareError(f"--input-shapes gives '{name}' dim {axis} = {v}; the model fixes it at "
                                       f"{d.dim_value}")
            elif parse_dim(dn) is not None:
                derived.append((dn, int(v)))
            elif values.setdefault(dn, int(v)) != int(v):
                raise PrepareError(f"--input-shapes gives symbolic dim '{dn}' two values ({values[dn]} and {v})")
    for dn, v in sorted(derived, key=lambda x: len(parse_dim(x[0]).names)):
        values.update(parse_dim(dn).solve(v, values) or {})
        if all(n in values for n in parse_dim(dn).names) and dim_value(dn, values) != v:
            raise PrepareError(f"--input-shapes gives dim '{dn}' the value {v}; the other inputs make it "
                               f"{dim_value(dn, values)}")
    for dn, places in sym.items():
        if dn not in values:
            values[dn] = DEFAULT_DIM_AXIS0 if any(axis == 0 for _, axis in places) else DEFAULT_DIM_OTHER
    return Binding(values, _shapes_at(model, values))


def second_bindings(first: Binding, model: onnx.ModelProto) -> list[Binding]:
    """Candidates for a second value of every symbolic dim, best first: 3 for a dim of 1, else twice the value (where
    two or more dims are above 1, first with no two of those in their ratio: `skewed_bindings`); then one eighth
    more (models that want multiples of 8, e.g. audio frames); then one more; then half (a model bound at its
    longest sequence, BERT at 512 positions, runs at no larger one)."""
    steps = [lambda v: 3 if v == 1 else 2 * v, lambda v: 3 if v == 1 else v + max(1, v // 8),
             lambda v: v + 1, lambda v: 3 if v == 1 else max(2, v // 2)]
    out = skewed_bindings(first, model)[:1]  # two or more dims above 1: not all in the first binding's ratio
    for step in steps:
        values = {k: step(v) for k, v in first.dims.items()}
        if all(b.dims != values for b in out):
            out.append(Binding(values, _shapes_at(model, values)))
    return out


def skewed_bindings(first: Binding, model: onnx.ModelProto) -> list[Binding]:
    """Two more values of every symbolic dim that keep no two of them in the first binding's ratio, the second with
    their order reversed (the candidates of `second_bindings` scale every dim alike: a value that depends on an
    image's aspect ratio, on which side is the shorter or on a past length against a sequence length is the same
    there), for models with two or more symbolic dims above 1 (a dim of 1 goes to 3, the others double: their ratio
    to it changes already); none for fewer."""
    scaled = sorted(k for k, v in first.dims.items() if v > 1)
    if len(scaled) < 2:
        return []
    out = []
    for names in (scaled, scaled[::-1]):
        values = {k: 3 if v == 1 else 2 * v for k, v in first.dims.items()}
        values.update({k: 2 * first.dims[k] + j * max(1, first.dims[k] // 2) for j, k in enumerate(names)})
        out.append(Binding(values, _shapes_at(model, values)))
    return out


def _shapes_at(model: onnx.ModelProto, values: Mapping[str, int]) -> dict[str, list[int]]:
    shapes = {}
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        shapes[vi.name] = [dim_value(_dim_name(vi, a, d), values) if _dim_name(vi, a, d) else int(d.dim_value)
                           for a, d in enumerate(tt.shape.dim)]
    return shapes


def bind_inputs(model: onnx.ModelProto, binding: Binding) -> onnx.ModelProto:
    """A copy of the model with its graph inputs fixed at the binding's shapes (value_info re-inferred)."""
    m = copy.deepcopy(model)
    for vi in graph_inputs(m):
        if vi.name not in binding.shapes:
            continue
        shape = vi.type.tensor_type.shape
        for d, v in zip(shape.dim, binding.shapes[vi.name]):
            d.Clear()
            d.dim_value = int(v)
    del m.graph.value_info[:]
    return infer(m)


MAX_FOLD_ROUNDS = 3  # onnxsim + shape inference again while it folds more (shapes it learns unlock chains)
LARGE_CONSTANT = LARGE_ELEMENTS  # larger initializers cannot be shape data, so inference sees only their type


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with value_info from ONNX shape inference (with data propagation); on failure, as it is.

    Inference runs on a light copy in which large initializers are typed graph inputs (weights are never shape
    data), so that it does not serialize the weights."""
    light = onnx.ModelProto()
    _light_copy(model, light)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception as e:  # the checker's errors come in several types
        log.info("shape inference failed (%s); going on without it", str(e).splitlines()[0] if str(e) else e)
        return model
    out = copy.deepcopy(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    outs = {o.name: o for o in inferred.graph.output}
    for o in out.graph.output:
        if o.name in outs:
            o.CopyFrom(outs[o.name])
    return out


def _light_copy(model: onnx.ModelProto, light: onnx.ModelProto) -> None:
    g = model.graph
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    lg = light.graph
    lg.name = g.name
    lg.node.extend(g.node)
    lg.output.extend(g.output)
    lg.value_info.extend(g.value_info)
    names = set()
    for t in g.initializer:
        if np.prod(t.dims, dtype=np.int64) > LARGE_CONSTANT:
            lg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            names.add(t.name)
        else:
            lg.initializer.append(t)
    lg.input.extend(i for i in g.input if i.name not in names)


def simplify(model: onnx.ModelProto, **kwargs) -> tuple[onnx.ModelProto, bool]:
    """`onnxsim.simplify(model, **kwargs)` without the Z3 certificate of its result that onnxsim 0.8 computes by
    default (up to 10 s a call, most of a small decoder's whole run): every model taso-tvm writes is checked
    numerically against the original, and onnxsim's output is only a starting point."""
    import onnxsim

    if "certify" in inspect.signature(onnxsim.simplify, follow_wrapped=False).parameters:
        kwargs.setdefault("certify", False)
    return onnxsim.simplify(model, **kwargs)


def _working_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = copy.deepcopy(model)
    for i, n in enumerate(m.graph.node):
        n.name = f"{NODE_PREFIX}{i}"
    return m


def _fold(model: onnx.ModelProto, binding: Binding) -> tuple[onnx.ModelProto, bool]:
    """onnxsim at `binding` (constant folding and shape inference only); (model, True), or the bound copy and
    False when onnxsim is absent or fails on this model. Weights kept out of the model (`onnx_io.weights`) are
    graph inputs to it: they are never shape data, and onnxsim would serialize them."""
    bound = as_inputs(bind_inputs(model, binding))
    try:
        import onnxsim  # noqa: F401 - `simplify` needs it
    except ImportError:  # pragma: no cover - a declared dependency
        log.warning("onnxsim is not installed: shape arithmetic is not folded")
        return bound, False
    folded = bound
    for _ in range(MAX_FOLD_ROUNDS):
        try:
            with quiet():  # onnxsim prints a line for every node it cannot fold
                out, _ = simplify(folded, perform_optimization=False, check_n=0, skip_shape_inference=False)
        except Exception as e:  # onnxsim raises whatever ORT or its passes raise
            if folded is not bound:
                break
            msg = str(e).strip().splitlines()
            log.warning("onnxsim could not fold this model (%s); searching it unfolded", msg[-1] if msg else e)
            return bound, False
        del out.graph.value_info[:]  # onnxsim leaves the unknown dims of its first inference behind
        done = len(out.graph.node) >= len(folded.graph.node) and folded is not bound
        folded = infer(out)
        if done or not shapes_to_fold(folded):
            break
    return folded, True


def shapes_to_fold(model: onnx.ModelProto) -> bool:
    """Whether another onnxsim round could fold more: a Shape or Size node reads a tensor whose dims (those it
    reads) shape inference now knows. Folding starts from such nodes only (a node with constant inputs alone was
    folded in the round before)."""
    g = model.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for n in g.node:
        if n.op_type not in ("Shape", "Size") or not n.input or n.input[0] not in types:
            continue
        tt = types[n.input[0]].tensor_type
        if not tt.HasField("shape"):
            continue
        dims = list(tt.shape.dim)
        if n.op_type == "Shape":
            attrs = {a.name: a.i for a in n.attribute}
            dims = dims[slice(attrs.get("start", 0), attrs.get("end", len(dims)))]  # negative ends as Python's
        if all(d.HasField("dim_value") for d in dims):
            return True
    return False


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = model.graph
    out = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for init in g.initializer:
        t = onnx.TypeProto()
        t.tensor_type.elem_type = init.data_type
        for d in init.dims:
            t.tensor_type.shape.dim.add().dim_value = d
        out.setdefault(init.name, t)
    return out


def fold_at(model: onnx.ModelProto, binding: Binding, fold: bool = True) -> tuple[Folded, bool]:
    work = _working_copy(model)
    folded, ok = _fold(work, binding) if fold else (bind_inputs(work, binding), False)
    kept = {}
    for n in folded.graph.node:
        if n.name.startswith(NODE_PREFIX):
            kept[int(n.name[len(NODE_PREFIX):])] = n
    consts = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer if not is_reference(i)}
    for n in folded.graph.node:  # Constant nodes the folding kept are constants too
        if n.op_type == "Constant" and len(n.output) == 1:
            try:
                consts[n.output[0]] = numpy_helper.to_array(onnx.helper.get_attribute_value(n.attribute[0]))
            except Exception:  # sparse or odd Constant forms: treat as data
                pass
    return Folded(binding, folded, kept, consts, _types(folded)), ok


def prepare(model: onnx.ModelProto, shapes: Optional[Mapping[str, Sequence[int]]] = None,
            fold: bool = True, second: Optional[Binding] = None) -> Prepared:
    """Working copies of `model` at the user's (or the default) binding and, if it has symbolic dims, at a second
    binding (`second`, else the first of `second_bindings`)."""
    first = make_binding(model, shapes)
    f1, ok1 = fold_at(model, first, fold)
    prep = Prepared(model, [f1], folding_used=ok1)
    if first.dims:
        second = second or second_bindings(first, model)[0]
        f2, ok2 = fold_at(model, second, fold and ok1)
        prep.folded.append(f2)
        prep.folding_used = ok1 and ok2
    log.info("prepared at %s%s; folding %s", first.label(), f" and {prep.folded[1].binding.label()}"
             if prep.symbolic else "", "on" if prep.folding_used else "off")
    return prep
