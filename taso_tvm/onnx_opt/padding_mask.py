"""Attention biases that are a padding mask, handed to ONNX Runtime's attention as the mask itself.

Exporters build the additive attention bias of an encoder from its 2-D `attention_mask` input with a chain of
shape arithmetic (transformers 5: Range, Gather, Unsqueeze, And, Expand, Where ... about 60 nodes, depending on
the run-time sequence length, so the partition keeps the chain out of every region). The fused Attention /
MultiHeadAttention nodes the search writes read that [B, 1, Sq, Skv] bias; ONNX Runtime's optimizer instead
gives its Attention the [B, Skv] mask as `mask_index` and drops the chain. This pass does the same where the bias
*is* a padding mask: bias[b, h, i, j] = 0 where mask[b, j] != 0, else one constant c.

That is decided by evaluating the chain, not by matching one exporter's node pattern: the bias must depend, by
value, on one integer graph input of rank 2 only (other inputs through their Shape alone), and equal
where(mask != 0, 0, c) on every test mask (all ones, random bits, left and right padding, a fully masked row,
values other than 0 and 1) at every binding the model is checked at. The node then reads the mask's nonzero bits
as an int32 2-D mask with `mask_filter_value` c, which ONNX Runtime adds where the mask is 0 (the same sum as the
bias; equal to the bit on fully masked rows too), and the chain, when nothing else reads it, is removed. The result
is checked against the user's model like every rewrite.

ONNX 23's Attention (the grouped attention of decoders) has no 2-D mask input: it reads the padding mask as the
bias where(mask != 0, 0, c) of shape [B, 1, 1, Skv] made from the mask by three nodes (Cast, Unsqueeze, Where). A
decode step's causal mask is such a bias (one query sees every cached position), so its chain goes; a prefill's is
not (the test masks tell).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph_match import GraphView, fresh_name, remove_dead

log = logging.getLogger(__name__)

MS = "com.microsoft"
# (input position of the 2-D padding mask, of the additive bias) per ONNX Runtime attention operator
MASK_SLOTS = {"Attention": (3, 5), "MultiHeadAttention": (4, 5)}
MASK_TYPES = (TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL)
STANDARD_MASK_SLOT = 3  # ONNX 23's Attention: its attn_mask input (additive where it is a float tensor)


def _bias_readers(view: GraphView) -> dict[str, list[onnx.NodeProto]]:
    """bias tensor -> the attention nodes that read it as their additive bias and have no mask input."""
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in view.graph.node:
        if n.op_type == "Attention" and n.domain in ("", "ai.onnx"):  # ONNX 23's: attn_mask, then past key, value
            if len(n.input) > STANDARD_MASK_SLOT and n.input[STANDARD_MASK_SLOT]:
                out.setdefault(n.input[STANDARD_MASK_SLOT], []).append(n)
            continue
        slots = MASK_SLOTS.get(n.op_type) if n.domain == MS else None
        if slots is None or len(n.input) <= slots[1] or not n.input[slots[1]]:
            continue
        if len(n.input) > slots[0] and n.input[slots[0]]:
            continue
        if any(x for x in n.input[slots[1] + 1:]):  # a past state after the bias: not this form
            continue
        out.setdefault(n.input[slots[1]], []).append(n)
    return out


def _ancestors(view: GraphView, name: str, by_value: bool) -> tuple[set[str], list[onnx.NodeProto], set[str]]:
    """(the graph inputs `name` depends on, the nodes that compute it, every tensor name met). `by_value`: a Shape
    node's input counts for its shape only (not followed), and a node with subgraphs reads "" (anything)."""
    inputs, nodes, seen, stack = set(), [], set(), [name]
    while stack:
        x = stack.pop()
        if not x or x in seen:
            continue
        seen.add(x)
        if x in view.inputs:
            inputs.add(x)
            continue
        n = view.prod.get(x)
        if n is None:
            continue
        nodes.append(n)
        if by_value and n.op_type == "Shape" and n.domain in ("", "ai.onnx"):
            continue
        if by_value and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            inputs.add("")  # a subgraph may read anything: not matched
        stack.extend(n.input)
    return inputs, nodes, seen


def _test_masks(shape: tuple, dtype: np.dtype, rng: np.random.Generator) -> list[np.ndarray]:
    """Masks of `shape` [B, S] that tell a padding mask from anything else."""
    b, s = shape
    ones = np.ones(shape, dtype)
    right, left, full = ones.copy(), ones.copy(), ones.copy()
    right[:, s // 2 + 1:] = 0
    left[:, : s // 3 + 1] = 0
    full[0] = 0
    masks = [ones, right, left, full] + [(rng.random(shape) < p).astype(dtype) for p in (0.5, 0.8, 0.2)]
    if dtype != np.bool_:
        masks.append(rng.choice(np.array([0, 1, 2, -1, 7]), size=shape).astype(dtype))
    return masks


def _filter_value(bias: np.ndarray, mask: np.ndarray) -> Optional[float]:
    """c where `bias` [B or 1, 1, Sq or 1, Skv] equals where(mask != 0, 0, c) for `mask` [B, Skv]; None where it does
    not (or no position is masked: then 0 where every position is kept)."""
    if bias.ndim != 4 or bias.shape[1] != 1 or bias.shape[3] != mask.shape[1] or \
            bias.shape[0] not in (1, mask.shape[0]) or (bias.shape[0] == 1 and mask.shape[0] != 1):
        return None
    keep = np.broadcast_to((mask != 0)[:, None, None, :], (mask.shape[0], 1, bias.shape[2], mask.shape[1]))
    full = np.broadcast_to(bias, keep.shape)
    if np.any(full[keep] != 0):
        return None
    masked = full[~keep]
    if masked.size == 0:
        return 0.0
    c = masked.reshape(-1)[0]
    return float(c) if np.all(masked == c) and np.isfinite(c) and c < 0 else None


def _probe(model: onnx.ModelProto, view: GraphView, name: str) -> onnx.ModelProto:
    """The model cut down to what computes `name` (its output): the nodes it needs, shapes included, their
    initializers and the graph inputs they read."""
    _, need, seen = _ancestors(view, name, by_value=False)
    keep = {id(n) for n in need}
    g = model.graph
    graph = helper.make_graph([n for n in g.node if id(n) in keep], "attention_mask_chain",
                              [vi for vi in g.input if vi.name in seen and vi.name not in view.inits],
                              [helper.make_empty_tensor_value_info(name)],
                              [t for t in g.initializer if t.name in seen])
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _identify(model: onnx.ModelProto, view: GraphView, bias: str, feeds: Sequence[dict], seed: int,
              threads: int) -> Optional[tuple[str, float, list, np.dtype]]:
    """(mask input, c, the chain's nodes, the bias's dtype) where `bias` is a padding mask of one graph input at
    every binding."""
    from ..runtime.check import CheckError, CheckFailed, run_session, session

    sources, chain, _ = _ancestors(view, bias, by_value=True)
    if len(sources) != 1 or "" in sources:
        return None
    mask = next(iter(sources))
    if view.input_rank(mask) != 2 or view.input_elem(mask) not in MASK_TYPES:
        return None
    probe = _probe(model, view, bias)
    rng = np.random.default_rng(seed)
    c = dtype = None
    try:
        sess = session(probe, threads, "the attention mask's chain")
        names = {vi.name for vi in probe.graph.input}
        for f in feeds:
            f = {k: v for k, v in f.items() if k in names}
            for m in _test_masks(f[mask].shape, f[mask].dtype, rng):
                got = np.asarray(next(iter(run_session(sess, dict(f, **{mask: m}),
                                                       "the attention mask's chain").values())))
                if not np.issubdtype(got.dtype, np.floating):  # a boolean attn_mask: not an additive bias
                    return None
                dtype = got.dtype
                v = _filter_value(got, m)
                if v is None or (c is not None and v != c and v != 0.0):
                    return None
                c = v if v != 0.0 else c
    except (CheckError, CheckFailed) as e:
        log.info("attention bias %s not evaluated (%s): kept", bias, e)
        return None
    return (mask, c, chain, dtype) if c is not None else None


class _MaskForms:
    """The forms of a 2-D mask the attention nodes read, each made once and written at the graph's start in the
    order made (a later one may read an earlier one)."""

    def __init__(self, g: onnx.GraphProto, view: GraphView):
        self.g, self.view, self.made, self.count = g, view, {}, 0

    def _add(self, op: str, inputs: list, base: str, **attrs) -> str:
        out = fresh_name(self.g, base)
        self.g.node.insert(self.count, helper.make_node(op, inputs, [out], name=out, **attrs))
        self.count += 1
        return out

    def _const(self, value: np.ndarray, base: str) -> str:
        name = fresh_name(self.g, base)
        self.g.initializer.append(numpy_helper.from_array(value, name))
        return name

    def bits(self, mask: str) -> str:
        """The mask as booleans, nonzero -> true (ONNX Runtime keeps a position whose mask is > 0, the bias any
        nonzero one)."""
        if self.view.input_elem(mask) == TensorProto.BOOL:
            return mask
        key = ("bool", mask)
        if key not in self.made:
            self.made[key] = self._add("Cast", [mask], f"taso_mask/{mask}_bool_", to=TensorProto.BOOL)
        return self.made[key]

    def int32(self, mask: str) -> str:
        """The mask as ONNX Runtime's attention operators read it: 0 or 1, int32."""
        key = ("int32", mask)
        if key not in self.made:
            self.made[key] = self._add("Cast", [self.bits(mask)], f"taso_mask/{mask}_int32_", to=TensorProto.INT32)
        return self.made[key]

    def bias(self, mask: str, c: float, dtype: np.dtype) -> str:
        """where(mask != 0, 0, c) of `dtype` as [B, 1, 1, S]: what ONNX 23's Attention adds for every query and
        head."""
        key = ("bias", mask, c, np.dtype(dtype).str)
        if key not in self.made:
            base = f"taso_mask/{mask}_"
            axes = self._const(np.array([1, 2], np.int64), base + "axes_")
            zero = self._const(np.zeros((), dtype), base + "zero_")
            fill = self._const(np.array(c, dtype), base + "fill_")
            wide = self._add("Unsqueeze", [self.bits(mask), axes], base + "bits4d_")
            self.made[key] = self._add("Where", [wide, zero, fill], base + "bias_")
        return self.made[key]


def fuse_padding_masks(model: onnx.ModelProto, feeds: Sequence[dict], seed: int = 0,
                       threads: int = 1) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` whose attention nodes read each additive bias that is a padding mask as the 2-D mask
    (see the module docstring); `feeds`: the model's inputs at each binding it is checked at. Returns (model,
    number of attention nodes changed); the model itself where none was."""
    view = GraphView(model.graph)
    readers = _bias_readers(view)
    found = []
    for bias, nodes in readers.items():
        got = _identify(model, view, bias, feeds, seed, threads)
        if got is not None:
            found.append((bias, {n.output[0] for n in nodes}, got))
    if not found:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    forms = _MaskForms(g, view)
    chains, changed = [], 0
    for bias, outs, (mask, c, chain, dtype) in found:
        for n in list(g.node):  # (the mask's forms are inserted at the start meanwhile)
            if n.op_type == "Attention" and n.domain in ("", "ai.onnx") and n.output[0] in outs:
                n.input[STANDARD_MASK_SLOT] = forms.bias(mask, c, dtype)
                changed += 1
                continue
            if n.domain != MS or n.op_type not in MASK_SLOTS or n.output[0] not in outs:
                continue
            m_slot, b_slot = MASK_SLOTS[n.op_type]
            ins = list(n.input) + [""] * max(0, m_slot + 1 - len(n.input))
            ins[m_slot], ins[b_slot] = forms.int32(mask), ""
            while ins and not ins[-1]:
                ins.pop()
            del n.input[:]
            n.input.extend(ins)
            for a in list(n.attribute):
                if a.name == "mask_filter_value":
                    n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("mask_filter_value", c))
            changed += 1
        chains += chain + _ancestors(view, bias, by_value=False)[1]  # and the shapes only it read
    remove_dead(g, chains)
    log.info("%d attention node(s) read their padding mask as a 2-D mask (the bias chain removed)", changed)
    return out, changed


__all__ = ["fuse_padding_masks"]
