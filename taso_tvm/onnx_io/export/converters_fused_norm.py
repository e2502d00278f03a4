"""The fused layer and RMS norms of `graph/ops/fused_norm.py` and `rms_norm.py`, and the rotary embedding of
`rotary.py`, as ONNX Runtime's nodes (domain ``com.microsoft``).

Registered into the fused converters' table (`converters_fused.register_fused`); a converter returns None where the
call has no fused form, and the exporter then writes the decomposition.
"""
from __future__ import annotations

from typing import Optional

from onnx import TensorProto

from .converters_fused import MS, register_fused, scalar_of, skip_layernorm_inputs, target_below
from .tensor_types import static_dims

SKIP_SUM_OUTPUT = 3  # SkipLayerNormalization's input_skip_bias_sum (outputs 1 and 2, mean and inv_std_var, unused)


@register_fused("skip_layernorm_sum")
def convert_skip_layernorm_sum(ctx, call, attrs, args) -> Optional[list]:
    inputs = skip_layernorm_inputs(ctx, call, args)
    eps = float(attrs["epsilon"]) if len(call.args) == 5 else scalar_of(ctx, args[5])
    if inputs is None or eps is None:  # an epsilon computed at run time: the decomposition
        return None
    elem = ctx.types.get(args[0], TensorProto.FLOAT)
    outputs = [ctx.fresh("skip_ln"), "", "", ctx.fresh("skip_sum")]
    out = ctx.node("SkipLayerNormalization", inputs, outputs=outputs, domain=MS, out_types=[elem, None, None, elem],
                   epsilon=eps)
    return [out[0], out[SKIP_SUM_OUTPUT]]





def _int32(ctx, name: str) -> str:
    """`name` as int32 (EmbedLayerNormalization's CPU kernel reads int32 ids only): a Cast where it is not."""
    if ctx.types.get(name) == TensorProto.INT32:
        return name
    return ctx.node("Cast", [name], domain="", out_types=[TensorProto.INT32], to=TensorProto.INT32)[0]


@register_fused("embed_layernorm")
def convert_embed_layernorm(ctx, call, attrs, args) -> Optional[str]:
    n = len(call.args)
    eps = float(attrs["epsilon"]) if n in (6, 8) else scalar_of(ctx, args[n - 1])
    if eps is None:  # an epsilon computed at run time: the decomposition
        return None
    if n in (8, 9):
        ids, seg_ids, word, pos, seg, gamma, beta, pos_ids = (args[i] for i in range(8))
        segment = [_int32(ctx, seg_ids)]
        tables = [word, pos, seg]
    else:
        ids, word, pos, gamma, beta, pos_ids = (args[i] for i in range(6))
        segment, tables = [""], [word, pos, ""]
    elem = ctx.types.get(word, TensorProto.FLOAT)
    inputs = [_int32(ctx, ids)] + segment[:1] + tables + [gamma, beta, "", _int32(ctx, pos_ids)]
    outputs = [ctx.fresh("embed_ln"), ctx.fresh("embed_mask_index")]
    return ctx.node("EmbedLayerNormalization", inputs, outputs=outputs, domain=MS,
                    out_types=[elem, TensorProto.INT32], epsilon=eps)[0]


def _skip_rmsnorm(ctx, call, attrs, args, with_sum: bool) -> Optional[list]:
    inputs = skip_layernorm_inputs(ctx, call, args, bias_at=3)
    eps = float(attrs["epsilon"]) if len(call.args) == 4 else scalar_of(ctx, args[4])
    if inputs is None or eps is None:  # an epsilon computed at run time: the decomposition
        return None
    elem = ctx.types.get(args[0], TensorProto.FLOAT)
    outputs = [ctx.fresh("skip_rms")] + (["", "", ctx.fresh("skip_sum")] if with_sum else [])
    out = ctx.node("SkipSimplifiedLayerNormalization", inputs, outputs=outputs, domain=MS,
                   out_types=[elem] + ([None, None, elem] if with_sum else []), epsilon=eps)
    return [out[0], out[SKIP_SUM_OUTPUT]] if with_sum else [out[0]]


@register_fused("skip_rmsnorm")
def convert_skip_rmsnorm(ctx, call, attrs, args) -> Optional[str]:
    out = _skip_rmsnorm(ctx, call, attrs, args, with_sum=False)
    return None if out is None else out[0]


@register_fused("skip_rmsnorm_sum")
def convert_skip_rmsnorm_sum(ctx, call, attrs, args) -> Optional[list]:
    return _skip_rmsnorm(ctx, call, attrs, args, with_sum=True)


def _to_batch(ctx, table: str, x: str) -> str:
    """A [1 or batch, S, D/2] table expanded to x's batch (ONNX 23's RotaryEmbedding takes [batch, S, D/2]
    caches)."""
    return ctx.op("Expand", table, ctx.op("Concat", ctx.dim_of(x, 0), ctx.i64([1, 1]), axis=0))


def _runtime_rotary(ctx, x: str, tables: list, half: int, seq_axis: int, **attrs) -> str:
    """ONNX Runtime's RotaryEmbedding on x with the half tables ([1 or batch, (1,) sequence, half], the sequence on
    `seq_axis`) as its caches, their rows flattened: one cache per table, however many rotations read it (a layer's
    query and key), and position_ids that read each batch row's own rows (`_table_rows`)."""
    caches = [ctx.memo(("rotary_cache", t, half), lambda t=t: ctx.op("Reshape", t, ctx.i64([-1, half])))
              for t in tables]
    ids = ctx.memo(("rotary_rows", tables[0], half), lambda: _table_rows(ctx, caches[0], tables[0], seq_axis, x))
    return ctx.node("RotaryEmbedding", [x, ids, *caches], domain=MS,
                    out_types=[ctx.types.get(x, TensorProto.FLOAT)], **attrs)[0]


def _table_rows(ctx, cache: str, table: str, seq_axis: int, x: str) -> str:
    """position_ids [batch, S] for a cache of the table's rows: b * S + s where the table holds a row per batch entry
    (positions a model takes as an input: optimum's exports), s where it holds one for the whole batch (expanded).
    A table's batch is 1 at the binding searched either way, so the rows are counted at run time."""
    s = ctx.dim_of(table, seq_axis)
    rows = ctx.op("Reshape", ctx.dim_of(cache, 0), ctx.i64([]))
    ids = ctx.op("Range", ctx.scalar(0, TensorProto.INT64), rows, ctx.scalar(1, TensorProto.INT64))
    ids = ctx.op("Reshape", ids, ctx.op("Concat", ctx.i64([-1]), s, axis=0))
    return ctx.op("Expand", ids, ctx.op("Concat", ctx.dim_of(x, 0), s, axis=0))


@register_fused("rotary", standard=True, opsets=(0, 23))  # with standard_ops: ONNX 23's RotaryEmbedding
def convert_rotary(ctx, call, attrs, args) -> Optional[str]:
    """RotaryEmbedding on x [batch, heads, sequence, head size] with half tables [1, 1, sequence, head size / 2] (at
    the binding: one for the batch or a batch row's, `_table_rows`): ONNX Runtime's (`_runtime_rotary`); with
    standard_ops ONNX 23's, the tables
    as its [batch, sequence, head size / 2] caches (below opset 23: the decomposition); anything else is written as
    the decomposition."""
    x, tables = static_dims(call.args[0].ty), static_dims(call.args[1].ty)
    if x is None or tables is None or len(x) != 4 or len(tables) != 4 or tuple(tables[:2]) != (1, 1):
        return None
    half, interleaved = x[3] // 2, int(attrs.get("interleaved", 0))
    if not ctx.standard_ops:
        return _runtime_rotary(ctx, args[0], [args[1], args[2]], half, 2, interleaved=interleaved)
    if target_below(ctx, "rotary"):
        return None
    caches = [ctx.memo(("rotary_batch_cache", args[i], half), lambda i=i: _to_batch(
        ctx, ctx.op("Reshape", args[i], ctx.i64([0, -1, half])), args[0])) for i in (1, 2)]  # its own batch kept
    return ctx.node("RotaryEmbedding", [args[0], *caches], out_types=[ctx.types.get(args[0], TensorProto.FLOAT)],
                    interleaved=interleaved)[0]


@register_fused("rotary_heads", standard=True, opsets=(0, 23))
def convert_rotary_heads(ctx, call, attrs, args) -> Optional[str]:
    """RotaryEmbedding on x [batch, sequence, heads * head size] (its 3-D form, num_heads given; a partial rotary's
    rotary_dim as rotary_embedding_dim), tables [1 or batch, sequence, rotary size / 2]: ONNX Runtime's with one
    table for the batch (`_runtime_rotary`), ONNX 23's (standard_ops) with the tables as its [batch, sequence,
    rotary size / 2] caches."""
    x, tables = static_dims(call.args[0].ty), static_dims(call.args[1].ty)
    if x is None or tables is None:
        return None
    n, interleaved = int(attrs["num_heads"]), int(attrs.get("interleaved", 0))
    rd = int(attrs.get("rotary_dim") or 0)
    partial = {"rotary_embedding_dim": rd} if rd and rd != x[2] // n else {}  # the first rd entries of each head
    if not ctx.standard_ops:  # a table per batch row: ONNX Runtime's caches are one for the batch
        return None if tables[0] != 1 else _runtime_rotary(ctx, args[0], [args[1], args[2]], tables[2], 1,
                                                           num_heads=n, interleaved=interleaved, **partial)
    if target_below(ctx, "rotary_heads"):
        return None
    caches = [args[i] if tables[0] != 1 else ctx.memo(("rotary_heads_batch_cache", args[i]),
                                                       lambda i=i: _to_batch(ctx, args[i], args[0])) for i in (1, 2)]
    return ctx.node("RotaryEmbedding", [args[0], *caches], out_types=[ctx.types.get(args[0], TensorProto.FLOAT)],
                    interleaved=interleaved, num_heads=n, **partial)[0]


__all__ = ["convert_skip_layernorm_sum", "convert_embed_layernorm", "convert_skip_rmsnorm", "convert_skip_rmsnorm_sum",
           "convert_rotary", "convert_rotary_heads"]
