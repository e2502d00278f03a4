"""The tools a user would otherwise run on a transformer, as candidates of the never-slower guard and as starts of a
second search: ONNX Runtime's transformer optimizer (`onnxruntime.transformers.optimizer`, shipped with onnxruntime;
heads and hidden size detected from the graph) and onnxscript's ORT fusions (`optimize_for_ort`, the fuser torch's
dynamo exporter's users run). Each output is checked like any rewrite and timed with the search's result, so what
`optimize` writes is never behind either.
"""
from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Callable, Optional, Sequence

import onnx

from ..errors import is_interrupt
from ..onnx_io import weights
from ..progress import phase
from ..quiet import quiet
from .graph_match import GraphView

log = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"


def looks_like_a_transformer(model: onnx.ModelProto) -> bool:
    """Whether the graph has an attention's softmax (or a fused attention) and matrix products."""
    ops = {n.op_type for n in model.graph.node}
    return "MatMul" in ops and bool(ops & {"Softmax", "Attention", "MultiHeadAttention"})


def heads_and_hidden(model: onnx.ModelProto) -> tuple[int, int]:
    """(attention heads, hidden size) read from the graph, as a user would pass them to ORT's optimizer: the hidden
    size is the commonest width of the square projection weights; the heads that width over the head size, the last
    entry of a 4-D Reshape target [batch, sequence, heads or -1, head size] (a constant, or a Concat whose last piece
    is one); (0, 0), the optimizer's own detection, where either is not found."""
    view = GraphView(model.graph)
    dims = [view.const_type(n.input[1]) for n in model.graph.node if n.op_type in ("MatMul", "Gemm")
            and len(n.input) > 1]
    widths = Counter(d[1][0] for d in dims if d is not None and len(d[1]) == 2 and d[1][0] == d[1][1])
    if not widths:
        return 0, 0
    hidden = widths.most_common(1)[0][0]

    def values(name: str) -> list:
        """The entries of a 1-D shape tensor, None where computed at run time."""
        v = view.const(name)
        if v is not None:
            return v.reshape(-1).tolist()
        n = view.node(name, "Concat")
        return [] if n is None else [e for x in n.input for e in
                                     (values(x) if view.const(x) is not None else [None] * (len(values(x)) or 1))]

    heads = Counter()
    for n in model.graph.node:
        if n.op_type == "Reshape" and len(n.input) > 1:
            shape = values(n.input[1])
            if len(shape) == 4 and isinstance(shape[3], int) and 0 < shape[3] < hidden and hidden % shape[3] == 0:
                heads[hidden // shape[3]] += 1
    return (heads.most_common(1)[0][0], hidden) if heads else (0, 0)


def checked_output(what: str, run: Callable[[], Optional[onnx.ModelProto]], model: onnx.ModelProto,
                   feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                   wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """`run()`'s model (a tool's output for `model`) if it gave one and it equals `model` at every binding checked;
    None where it gave none, failed or differs (`what` is logged as not a candidate, with why)."""
    from ..runtime.check import check_onnx

    try:
        out = run()
        if out is None:
            return None
        check_onnx(model, out, feeds, rtol=rtol, atol=atol, threads=threads, wants=wants)
    except Exception as e:  # the tool's own failures, a wrong result: it is just not a candidate
        not_a_candidate(what, e)
        return None
    return out


def ort_optimizer_output(model: onnx.ModelProto, feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                         wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """ONNX Runtime's transformer optimizer's output for the user's model (opt_level 0: its fusions, not the
    session's), if it fused something and equals the model at every binding checked; None for a model that is not
    a transformer or whose weights are kept out of it, where the optimizer fails or fuses nothing."""
    if weights.has_references(model) or not looks_like_a_transformer(model):
        return None

    def run() -> Optional[onnx.ModelProto]:
        from onnxruntime.transformers.optimizer import optimize_model

        with phase("ORT's transformer optimizer"), quiet():
            heads, hidden = heads_and_hidden(model)
            out = optimize_model(copy.deepcopy(model), model_type="bert", num_heads=heads, hidden_size=hidden,
                                 opt_level=0).model
        if not any(n.domain == MS_DOMAIN for n in out.graph.node):
            return None
        if not any(o.domain == MS_DOMAIN for o in out.opset_import):  # the optimizer leaves it out: onnx.checker
            out.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))  # refuses a file without it
        return out

    return checked_output("ORT's transformer optimizer's output", run, model, feeds, rtol, atol, threads, wants)


def onnxscript_output(model: onnx.ModelProto, feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                      wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """onnxscript's ORT fusions' output for the user's model (`onnxscript.rewriter.ort_fusions.optimize_for_ort`), if
    it fused something and equals the model at every binding checked; None for a model that is not a transformer or
    whose weights are kept out of it, where onnxscript fails or fuses nothing."""
    if weights.has_references(model) or not looks_like_a_transformer(model):
        return None

    def run() -> Optional[onnx.ModelProto]:
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        with phase("onnxscript's ORT fusions"), quiet():
            fused, counts = optimize_for_ort(ir.from_proto(copy.deepcopy(model)))
            out = ir.to_proto(fused)
        return out if any(counts.values()) and any(n.domain == MS_DOMAIN for n in out.graph.node) else None

    return checked_output("onnxscript's ORT fusions' output", run, model, feeds, rtol, atol, threads, wants)


# (name in the report, the tool's output): the peers whose outputs are candidates and starts of a second search
PEER_STARTS = (("ort-optimizer", ort_optimizer_output), ("onnxscript", onnxscript_output))


def not_a_candidate(what: str, e: BaseException) -> None:
    """Log why `what` is not a candidate of the guard (its first line); an interrupt goes on up."""
    if is_interrupt(e):
        raise e
    log.info("%s is not a candidate (%s)", what, str(e).splitlines()[0] if str(e) else type(e).__name__)


__all__ = ["checked_output", "heads_and_hidden", "ort_optimizer_output", "onnxscript_output", "PEER_STARTS", "looks_like_a_transformer", "not_a_candidate"]
