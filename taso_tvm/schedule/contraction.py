"""The contraction rule: one reduction block with spatial output axes (conv2d in any stride, padding, groups or
depthwise form, matmul, dense, batch matmul, pooling) plus spatial producers (padding) and an element-wise epilogue
(bias, ReLU, residual add, a width slice).

Schedule, for the output tile [t_i x v_i] of each outer iteration:
- the vector axis v is one every read using it reads contiguously: the output channels when they fill whole
  vector halves and a read runs along them (a conv with IHWO weights, see conv_layout.py), else the output's
  innermost axis (the width of an OIHW conv, widened by pad_width.py; the columns of a matmul); v_i is vectorized;
- the register-tile axis t is a spatial axis that the reads feeding v do not use (IHWO conv: the width, read as
  broadcast scalars; OIHW conv: the output channel; matmul: the row), unrolled by t_i;
- t is blocked so that the broadcast operand's panel stays in L2 while the spatial tiles stream by;
- the accumulator tile lives in a local buffer (the epilogue's input, or a cache_write stage), laid out with v
  innermost and written back through the epilogue computed at the tile;
- all outer loops fused and parallel (not for tiny kernels); producers (padding) get their own parallel,
  vectorized nest;
- vectorize and unroll before `decompose_reduction` (after it, the init block would break the compact dataflow).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tvm import s_tir, tirx
from tvm.target import Target

from .blocks import BlockFacts, FuncFacts, func_facts
from .common import dtype_bits, inline_spatial, schedule_spatial, vector_lanes, vector_split, whole_vectors

ACCUMULATOR_REGISTERS = 16  # vector registers given to the accumulator tile (AVX-512 and AVX2 have 32 and 16)
MAX_ROW_TILE = 8  # at most this many rows of the tile axis per tile
# vectors over a channel axis: the rows are broadcast scalars straight from memory, so all but a few of the
# registers can hold accumulators (AVX-512: 32 registers)
WIDE_ACCUMULATORS, WIDE_VECTOR_BITS = 24, 512
MIN_PARALLEL_MACS = 1 << 21  # smaller kernels (< ~0.1 ms) run on one thread: a launch waits for a busy core
STREAM_VECTORS = 16  # vectors per row of a tile with no register-tile axis (long contiguous runs of weights)
MIN_DIVISOR_ROWS = 6  # a divisor of the row axis at least this big beats a tail tile
CACHE_BLOCK_BYTES = 256 * 1024  # the broadcast operand's panel of one cache block stays within L2
ELEMENT_BYTES = 4
UNROLL_REDUCTION = 8  # innermost reduction loops up to this extent are unrolled (kernel windows)


@dataclass
class Plan:
    """The loop structure chosen for the main block (iterator positions and inner factors)."""

    order: list  # spatial iterator positions, outermost first (v and t appear once each, split)
    v: int
    v_inner: int
    t: Optional[int]
    t_inner: int
    t_block: int = 0  # rows of the tile axis per cache block (a multiple of t_inner); 0: the whole axis


def _divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _channel_rows(extent: int, lanes: int, regs_per_row: int) -> int:
    """Rows of the register tile when vectors run over channels: a divisor of the row axis when a big enough one
    fits the registers, else MAX_ROW_TILE rows with a tail tile (only a condition around whole vectors)."""
    regs = WIDE_ACCUMULATORS if lanes * 32 >= WIDE_VECTOR_BITS else ACCUMULATOR_REGISTERS
    rows = max(1, regs // regs_per_row)
    if extent <= rows:
        return extent
    best = _divisor_at_most(extent, rows)
    if best >= MIN_DIVISOR_ROWS:
        return best
    return min(rows, MAX_ROW_TILE)  # measured: 8-row tail tiles beat 6, 9 and 12 rows (17 and 71 wide)


def _loads_along(main: BlockFacts, a: int) -> bool:
    """Whether every read that uses iterator `a` uses it in its innermost dimension only (vector loads)."""
    for r in main.reads:
        if a in r.used and (not r.dims or a not in r.dims[-1] or any(a in d for d in r.dims[:-1])):
            return False
    return True


def plan(main: BlockFacts, lanes: int) -> Optional[Plan]:
    """Choose vector and tile axes for the main block; None when its output is not plainly indexed."""
    out = main.writes[0]
    axes = []
    for dim in out.dims:
        if len(dim) > 1:
            return None
        axes.extend(dim)
    spatial = main.spatial()
    if sorted(axes) != sorted(set(axes)) or set(axes) != set(spatial):
        return None  # an output dim mixing iterators, or a spatial iterator not in the output
    sized = [a for a in axes if main.extents[a] > 1]
    if not sized:
        return None
    contiguous = [a for a in sized if _loads_along(main, a)]
    v = sized[-1] if sized[-1] in contiguous else None
    if v is not None and v != axes[-1] and any(main.extents[a] > 1 for a in axes[axes.index(v) + 1:]):
        v = None
    # an axis read contiguously that fills whole vectors (the output channels of a conv whose weights were put
    # in IHWO layout): no stride, no odd width in the vector loads; the accumulator is transposed at the tile
    channel = [a for a in contiguous if a != sized[-1] and main.extents[a] % max(lanes // 2, 1) == 0
               and any(a in r.used for r in main.reads)]
    if channel:
        v = channel[-1]
    if v is None:
        return None
    v_extent = main.extents[v]
    v_inner = vector_split(v_extent, lanes) or lanes
    # the read(s) that use v: the vector loads; a spatial axis they do not use is reused from registers
    vector_reads = [r for r in main.reads if v in r.used]
    candidates = [a for a in axes if a != v and main.extents[a] > 1
                  and all(a not in r.used for r in vector_reads)]
    if not candidates:  # e.g. depthwise conv: reuse the weight over output rows instead
        candidates = [a for a in axes if a != v and main.extents[a] > 1
                      and any(a not in r.used for r in main.reads)]
    t, t_inner = None, 1
    if candidates and whole_vectors(v_inner, lanes):  # an odd-sized vector tile would spill
        t = candidates[-1]
        regs_per_row = max(1, -(-v_inner // lanes))
        if v != sized[-1]:
            t_inner = _channel_rows(main.extents[t], lanes, regs_per_row)
        else:
            rows = max(1, min(MAX_ROW_TILE, ACCUMULATOR_REGISTERS // regs_per_row))
            t_inner = _divisor_at_most(main.extents[t], rows)
        if t_inner == 1:
            t = None
    if t is None and v_inner % lanes == 0:  # no row reuse (vector-matrix): stream longer contiguous rows
        v_inner = max((c for c in range(v_inner, min(v_extent, STREAM_VECTORS * lanes) + 1, lanes)
                       if v_extent % c == 0), default=v_inner)
    t_block = 0
    if t is not None:
        reduce_size = 1
        for a in main.reduce():
            reduce_size *= main.extents[a]
        panel_rows = max(t_inner, CACHE_BLOCK_BYTES // max(reduce_size * ELEMENT_BYTES, 1))
        if main.extents[t] % t_inner == 0:
            t_block = max(b for b in range(t_inner, main.extents[t] + 1, t_inner)
                          if main.extents[t] % b == 0 and (b <= panel_rows or b == t_inner))
    return Plan(order=axes, v=v, v_inner=v_inner, t=t, t_inner=t_inner, t_block=t_block)


def _main_block(facts: FuncFacts) -> Optional[int]:
    idx = [i for i, b in enumerate(facts.blocks) if not b.is_spatial]
    if len(idx) != 1:
        return None
    b = facts.blocks[idx[0]]
    if not (b.is_reduction and b.has_init and b.static and len(b.writes) == 1):
        return None
    if not all(x.static for x in facts.blocks):
        return None
    return idx[0]


def _attach_writer(sch: s_tir.Schedule, main: BlockFacts, epilogue: Optional[BlockFacts], fused) -> Optional[object]:
    """Compute the block that writes the main block's result (its epilogue, else a new copy stage) at the tile
    loop and make the accumulator local; None when the epilogue cannot move there (it also reads a stage computed
    at the root), in which case the accumulator stays a full buffer."""
    if fused is None:
        return None
    if epilogue is None:
        writer = sch.cache_write(main.rv, 0, "local")
        sch.reverse_compute_at(writer, fused, preserve_unit_loops=True)
        return writer
    try:
        sch.reverse_compute_at(epilogue.rv, fused, preserve_unit_loops=True)
    except s_tir.ScheduleError:
        return None
    sch.set_scope(main.rv, 0, "local")
    return epilogue.rv


def _vector_axis_last(sch: s_tir.Schedule, main: BlockFacts, p: Plan) -> None:
    """Lay the local accumulator out with the vector axis innermost (a no-op when it already is)."""
    dims = [next(iter(d)) for d in main.writes[0].dims]
    k = dims.index(p.v)
    if k == len(dims) - 1:
        return
    order = [i for i in range(len(dims)) if i != k] + [k]
    sch.transform_layout(main.rv, ("write", 0), lambda *idx: [idx[i] for i in order])


def schedule_contraction(func: tirx.PrimFunc, target: Target) -> Optional[s_tir.Schedule]:
    """Schedule a PrimFunc with one reduction block; None when the function has another shape."""
    sch = s_tir.Schedule(func)
    facts = func_facts(sch)
    if facts is None:
        return None
    i = _main_block(facts)
    if i is None:
        return None
    main = facts.blocks[i]
    lanes = vector_lanes(target, dtype_bits(sch, main))
    p = plan(main, lanes)
    if p is None:
        return None
    producers = facts.blocks[:i]
    epilogue = inline_spatial(sch, facts, facts.blocks[i + 1:])
    if len(epilogue) > 1:
        return None
    loops = sch.get_loops(main.rv)
    if len(loops) != len(main.kinds):
        return None
    # split v and t; order: outer spatial (t_o innermost of them), reductions, t_i, v_i
    v_o, v_i = sch.split(loops[p.v], factors=[None, p.v_inner]) if p.v_inner < main.extents[p.v] \
        else (None, loops[p.v])
    t_oo, t_o, t_i = None, None, None
    if p.t is not None and p.t_block:
        t_oo, t_o, t_i = sch.split(loops[p.t], factors=[None, p.t_block // p.t_inner, p.t_inner])
    elif p.t is not None:
        t_o, t_i = sch.split(loops[p.t], factors=[None, p.t_inner])
    # cache blocks of the tile axis outermost (their broadcast operand stays in L2 while the spatial tiles
    # stream by), then the spatial tiles, then the register tiles of the block (the vector operand stays in L1)
    outer = [t_oo] if t_oo is not None else []
    for a in p.order:
        if a == p.v:
            if v_o is not None:
                outer.append(v_o)
        elif a == p.t:
            continue
        else:
            outer.append(loops[a])
    if t_o is not None:
        outer.append(t_o)
    reduce = [loops[a] for a in main.reduce()]
    inner = ([t_i] if t_i is not None else []) + [v_i]
    sch.reorder(*outer, *reduce, *inner)
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if math.prod(main.extents) >= MIN_PARALLEL_MACS:
            sch.parallel(fused)
    else:
        fused = None
    # accumulator: a local tile written back by the epilogue (or a copy stage) computed at the tile
    writer = _attach_writer(sch, main, epilogue[0] if epilogue else None, fused)
    if writer is not None or epilogue:  # the main block writes an intermediate: lay it out for the vectors
        _vector_axis_last(sch, main, p)
    if writer is not None:
        w_loops = sch.get_loops(writer)[1 if fused is not None else 0:]
        if w_loops:
            sch.vectorize(w_loops[-1])
    elif epilogue:  # the epilogue reads another stage computed at the root: it runs as its own nest
        schedule_spatial(sch, epilogue[0], lanes)
    sch.vectorize(v_i)
    if t_i is not None:
        sch.unroll(t_i)
    last_r = reduce[-1] if reduce else None
    if last_r is not None and main.extents[main.reduce()[-1]] <= UNROLL_REDUCTION and len(reduce) > 1:
        sch.unroll(last_r)
    if reduce:
        sch.decompose_reduction(main.rv, reduce[0])
    for b in producers:
        schedule_spatial(sch, b, lanes)
    return sch
