"""The tools a user would otherwise run on a transformer, as candidates of the never-slower guard and as starts of a
second search: ONNX Runtime's transformer optimizer (`onnxruntime.transformers.optimizer`, shipped with onnxruntime;
heads and hidden size detected from the graph) and onnxscript's ORT fusions (`optimize_for_ort`, the fuser torch's
dynamo exporter's users run). Each output is checked like any rewrite and timed with the search's result, so what
`optimize` writes is never behind either.
"""
from __future__ import annotations

import copy
import logging
from typing import Optional, Sequence

import onnx

from ..errors import is_interrupt
from ..onnx_io import weights
from ..progress import phase
from ..quiet import quiet

log = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"


def looks_like_a_transformer(model: onnx.ModelProto) -> bool:
    """Whether the graph has an attention's softmax (or a fused attention) and matrix products."""
    ops = {n.op_type for n in model.graph.node}
    return "MatMul" in ops and bool(ops & {"Softmax", "Attention", "MultiHeadAttention"})


def ort_optimizer_output(model: onnx.ModelProto, feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                         wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """ONNX Runtime's transformer optimizer's output for the user's model (opt_level 0: its fusions, not the
    session's), if it fused something and equals the model at every binding checked; None for a model that is not
    a transformer or whose weights are kept out of it, where the optimizer fails or fuses nothing."""
    from ..runtime.check import check_onnx

    if weights.has_references(model) or not looks_like_a_transformer(model):
        return None
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        with phase("ORT's transformer optimizer"), quiet():
            out = optimize_model(copy.deepcopy(model), model_type="bert", num_heads=0, hidden_size=0,
                                 opt_level=0).model
        if not any(n.domain == MS_DOMAIN for n in out.graph.node):
            return None
        check_onnx(model, out, feeds, rtol=rtol, atol=atol, threads=threads, wants=wants)
    except Exception as e:  # the optimizer's own failures, a wrong result: it is just not a candidate
        not_a_candidate("ORT's transformer optimizer's output", e)
        return None
    return out


def onnxscript_output(model: onnx.ModelProto, feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                      wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """onnxscript's ORT fusions' output for the user's model (`onnxscript.rewriter.ort_fusions.optimize_for_ort`), if
    it fused something and equals the model at every binding checked; None for a model that is not a transformer or
    whose weights are kept out of it, where onnxscript fails or fuses nothing."""
    from ..runtime.check import check_onnx

    if weights.has_references(model) or not looks_like_a_transformer(model):
        return None
    try:
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        with phase("onnxscript's ORT fusions"), quiet():
            fused, counts = optimize_for_ort(ir.from_proto(copy.deepcopy(model)))
            out = ir.to_proto(fused)
        if not any(counts.values()) or not any(n.domain == MS_DOMAIN for n in out.graph.node):
            return None
        check_onnx(model, out, feeds, rtol=rtol, atol=atol, threads=threads, wants=wants)
    except Exception as e:  # onnxscript's own failures, a wrong result: it is just not a candidate
        not_a_candidate("onnxscript's ORT fusions' output", e)
        return None
    return out


# (name in the report, the tool's output): the peers whose outputs are candidates and starts of a second search
PEER_STARTS = (("ort-optimizer", ort_optimizer_output), ("onnxscript", onnxscript_output))


def not_a_candidate(what: str, e: BaseException) -> None:
    """Log why `what` is not a candidate of the guard (its first line); an interrupt goes on up."""
    if is_interrupt(e):
        raise e
    log.info("%s is not a candidate (%s)", what, str(e).splitlines()[0] if str(e) else type(e).__name__)


__all__ = ["ort_optimizer_output", "onnxscript_output", "PEER_STARTS", "looks_like_a_transformer", "not_a_candidate"]
