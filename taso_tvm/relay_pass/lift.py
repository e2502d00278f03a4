"""Lift a Relax dataflow block into a TensorGraph.

Every binding whose operator the registry knows becomes a node; anything else (an unknown operator, a call on
symbolic shapes, a tuple the registry cannot see through) becomes an *opaque* node that keeps the original
expression, so lowering can put it back unchanged: nothing is ever dropped.

Three identities are applied while lifting. As TVM's arithmetic simplifier would: x + 0, x - 0, x * 1 and x / 1,
with a constant that does not broadcast x to a larger shape, are x (paddle2onnx writes `scale` as x * s + 0;
transformers scales its rotary tables by an `attention_scaling` of 1); a cast to the
dtype its operand has is that operand (torch's TorchScript exporter casts every RMS norm's input and output to
float32 in a float32 model). And a take of
indices in the ONNX frontend's negative-index form (`gather_form`) is the registry's take (ONNX's Gather) of the
raw indices, so that an embedding lookup reads the model's ids.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from tvm import relax
from tvm.ir import GenericConst

from ..graph import GraphError, NodeStore, TensorGraph, TensorType
from ..graph.ops import RELAX_TO_OP, get_op
from ..graph.ops.gather_form import gather_form, raw_indices
from ..graph.ops.relax_util import tensor_type

log = logging.getLogger(__name__)

OPAQUE_TYPE = TensorType((), "opaque")  # the type of an opaque value that is not a tensor (a tuple, a shape...)


@dataclass
class LiftedBlock:
    """A dataflow block as a TensorGraph, with what lowering needs to put it back in its function."""

    graph: TensorGraph
    inputs: dict[str, relax.Var]  # input node name -> the Relax var defined outside the block
    output_vars: list[relax.Var]  # block outputs (visible outside), aligned with graph.outputs
    opaque_vars: dict[str, dict[Any, relax.Var]] = field(default_factory=dict)  # opaque key -> {input pos: var}

    @property
    def num_opaque(self) -> int:
        return sum(1 for n in self.graph.topo_order() if n.op == "opaque")


def _static_type(ty: Any) -> Optional[TensorType]:
    t = tensor_type(ty)
    return t if t is not None and t.is_static else None


class _Lifter:
    def __init__(self, block: relax.DataflowBlock, store: Optional[NodeStore] = None):
        self.block = block
        self.store = store or NodeStore()
        self.env: dict[Any, Any] = {}  # relax var -> TensorRef, or ("tuple", node) for a lifted tuple-valued call
        self.inputs: dict[str, relax.Var] = {}
        self.input_names: dict[Any, str] = {}
        self.consts: dict[Any, tuple] = {}
        self.opaque_inputs: dict[str, dict[Any, relax.Var]] = {}
        self.tuple_uses: dict[Any, set] = {}  # var -> indices read by TupleGetItem; None entry = other use
        self.bound = {b.var: b.value for b in block.bindings
                      if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Call)}
        self.kept = self._gather_forms()
        self._scan_uses()

    def _scan_uses(self) -> None:
        uses: dict[Any, set] = {}
        for b in self.block.bindings:
            v = b.value
            if isinstance(v, relax.TupleGetItem) and isinstance(v.tuple_value, relax.Var):
                uses.setdefault(v.tuple_value, set()).add(int(v.index))
                continue
            for fv in relax.analysis.free_vars(v) if not isinstance(v, relax.Var) else [v]:
                uses.setdefault(fv, set()).add(None)
        for b in self.block.bindings:
            if not isinstance(b.var, relax.DataflowVar):
                uses.setdefault(b.var, set()).add(None)  # block output: used as a whole
        self.tuple_uses = uses

    def _gather_forms(self) -> set:
        """The vars of the frontend's negative-index normalizations of Gather indices: kept opaque, so that a
        take the registry cannot hold (a table of another rank, another axis) is still written as one Gather."""
        kept: set = set()
        for value in self.bound.values():
            found = gather_form(value, self.bound.get) if getattr(value.op, "name", "") == "relax.take" else None
            if found is not None:
                kept.update(found[1])
        return kept

    # ------------------------------------------------------------------ operands
    def _input(self, var: relax.Var) -> tuple:
        if var in self.input_names:
            name = self.input_names[var]
        else:
            base = name = var.name
            k = 1
            while name in self.inputs:
                k += 1
                name = f"{base}_{k}"
            self.inputs[name] = var
            self.input_names[var] = name
        ty = tensor_type(var.ty) or OPAQUE_TYPE
        return self.store.input(name, ty)

    def _operand(self, expr: Any) -> Optional[tuple]:
        """TensorRef for a call argument, or None if it is not a tensor the graph can carry."""
        if isinstance(expr, relax.Var):
            ref = self.env.get(expr)
            if ref is None:
                if isinstance(expr, relax.DataflowVar):
                    return None
                return self._input(expr)
            return ref if isinstance(ref, tuple) and ref and ref[0] != "tuple" else None
        if isinstance(expr, GenericConst):
            if expr in self.consts:
                return self.consts[expr]
            ty = tensor_type(expr.ty)
            if ty is None:
                return None
            ref = self.store.weight(expr, ty)
            self.consts[expr] = ref
            return ref
        return None

    # ------------------------------------------------------------------ bindings
    def _lift_call(self, var: relax.Var, call: relax.Call) -> bool:
        op = getattr(call.op, "name", None)
        if op == "relax.astype" and len(call.args) == 1:
            same = self._operand(call.args[0])
            if same is None or self.store.type(same).dtype != str(call.attrs.dtype):
                return False
            self.env[var] = same
            return True
        opdef = RELAX_TO_OP.get(op) if isinstance(op, str) else None
        if opdef is None or opdef.lift is None:
            return False
        raw = raw_indices(call, self.bound.get) if opdef.name == "take" else None  # the frontend's Gather form
        if isinstance(raw, GenericConst) and call.attrs.axis is not None:  # of a constant: the index itself (pick)
            call, raw = relax.op.take(call.args[0], raw, axis=int(call.attrs.axis), mode=str(call.attrs.mode)), None
        lifted = opdef.lift(call)
        if lifted is None:
            return False
        args, attrs = lifted[0], lifted[1]
        if len(lifted) > 2:  # the call lifts as another registered operator (take of a scalar index: pick)
            opdef = get_op(lifted[2])
        if opdef.name == "take" and raw is not None:
            args = [args[0], raw]
        refs = [self._operand(a) for a in args]
        if any(r is None for r in refs):
            return False
        if any(not self.store.type(r).is_static or self.store.type(r).dtype == "opaque" for r in refs):
            return False
        same = _identity_operand(opdef.name, args, refs, self.store, _static_type(var.ty))
        if same is not None:
            self.env[var] = same
            return True
        try:
            node = self.store.make(opdef.name, refs, attrs)
        except GraphError as e:
            log.debug("binding %s (%s) kept opaque: %s", var.name, op, e)
            return False
        uses = self.tuple_uses.get(var, set())
        if isinstance(var.ty, relax.TupleType):
            if None in uses or any(i >= len(node.types) for i in uses):
                return False
            self.env[var] = ("tuple", node)
            return True
        want = _static_type(var.ty)
        if len(node.types) != 1 or want != node.types[0]:
            log.debug("binding %s: inferred %s, Relax says %s; kept opaque", var.name, node.types, var.ty)
            return False
        self.env[var] = node.outputs[0]
        return True

    def _lift_opaque(self, var: relax.Var, value: Any) -> None:
        free = [] if isinstance(value, GenericConst) else list(relax.analysis.free_vars(value))
        refs, vmap = [], {}
        for fv in free:
            ref = self.env.get(fv)
            if ref is None:
                ref = self._input(fv)
            elif ref[0] == "tuple":  # a lifted tuple used as a whole after all: cannot happen (scan), guard
                raise GraphError(f"tuple {fv.name} used as a value")
            vmap[len(refs)] = fv
            refs.append(ref)
        key = self.store.fresh_key("opaque")
        ty = tensor_type(var.ty) or OPAQUE_TYPE
        node = self.store.opaque(value, refs, [ty], key)
        self.opaque_inputs[key] = vmap
        self.env[var] = node.outputs[0]

    def run(self) -> LiftedBlock:
        outputs, output_vars = [], []
        for b in self.block.bindings:
            var, value = b.var, b.value
            if not isinstance(b, relax.VarBinding):  # MatchCast: keep it as it is
                self._lift_opaque(var, b)
            elif isinstance(value, relax.Call) and var not in self.kept and self._lift_call(var, value):
                pass
            elif isinstance(value, relax.TupleGetItem) and isinstance(self.env.get(value.tuple_value), tuple) \
                    and self.env[value.tuple_value][0] == "tuple":
                node = self.env[value.tuple_value][1]
                self.env[var] = (node.id, int(value.index))
            elif isinstance(value, relax.Var) and isinstance(self.env.get(value), tuple) \
                    and self.env[value][0] != "tuple":
                self.env[var] = self.env[value]  # alias
            elif isinstance(value, GenericConst) and tensor_type(value.ty) is not None:
                self.env[var] = self._operand(value)
            else:
                self._lift_opaque(var, value)
            if not isinstance(var, relax.DataflowVar):
                outputs.append(self.env[var])
                output_vars.append(var)
        graph = TensorGraph(self.store, outputs)
        return LiftedBlock(graph, self.inputs, output_vars, self.opaque_inputs)


IDENTITY_SIDES = {"add": (0, ((1, 0), (0, 1))), "sub": (0, ((1, 0),)), "mul": (1, ((1, 0), (0, 1))),
                  "div": (1, ((1, 0),))}  # op: (its identity element, (constant side, operand side) pairs)


def _identity_operand(op: str, args: list, refs: list, store: NodeStore,
                      want: Optional[TensorType]) -> Optional[tuple]:
    """The operand an add (either side) or a subtract (right side) of a zero constant, or a multiply (either side)
    or a divide (right side) by a constant one, leaves unchanged, when the result has that operand's type; else
    None."""
    if op not in IDENTITY_SIDES or len(args) != 2 or want is None:
        return None
    unit, sides = IDENTITY_SIDES[op]
    for const, other in sides:
        value = getattr(args[const], "value", None) if isinstance(args[const], GenericConst) else None
        if value is not None and store.type(refs[other]) == want:
            arr = value.numpy()
            if arr.size and np.all(arr == unit):
                return refs[other]
    return None


def lift_block(block: relax.DataflowBlock, store: Optional[NodeStore] = None) -> LiftedBlock:
    """Lift one dataflow block. Vars defined outside the block become graph inputs."""
    return _Lifter(block, store).run()


def lift_function(func: relax.Function) -> list[LiftedBlock]:
    """Lift every dataflow block of a function's body (blocks that are not dataflow blocks are not lifted)."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [lift_block(b) for b in body.blocks if isinstance(b, relax.DataflowBlock)]
