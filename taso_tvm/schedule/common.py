"""Schedule steps the rules share: vector width, inlining, the parallel + vectorized loop nest of a spatial block."""
from __future__ import annotations

from typing import Optional

from tvm import s_tir
from tvm.target import Target

from .blocks import BlockFacts, FuncFacts, block_facts

DEFAULT_VECTOR_BITS = 128  # when the target does not say (SSE, NEON)
MAX_WHOLE_VECTOR = 4  # an inner loop up to this many vectors long is vectorized whole rather than split
MIN_PARALLEL_WORK = 1 << 16  # fewer elements than this in a spatial block: run it serially (threads cost more)


def vector_lanes(target: Target, bits: int = 32) -> int:
    """SIMD lanes of `bits`-wide elements on the target (16 fp32 lanes on AVX-512, 8 on AVX2)."""
    width = DEFAULT_VECTOR_BITS
    try:
        from tvm.target.codegen import llvm_get_vector_width

        with target:
            width = int(llvm_get_vector_width(target)) or DEFAULT_VECTOR_BITS
    except Exception:  # noqa: BLE001 - not an llvm target, or no LLVM: assume the narrowest common width
        pass
    return max(width // max(bits, 8), 2)


def dtype_bits(sch: s_tir.Schedule, b: BlockFacts) -> int:
    """Bit width of the element type a block writes."""
    try:
        return int(sch.get(b.rv).writes[0].source.ty.dtype.bits)
    except Exception:  # noqa: BLE001
        return 32


def inline_spatial(sch: s_tir.Schedule, facts: FuncFacts, blocks: list) -> list:
    """Inline every block of `blocks` that can be inlined into its consumers (never one that writes a function
    output); return the blocks that remain, in order."""
    remaining = list(blocks)
    changed = True
    while changed:
        changed = False
        for b in list(remaining):
            if facts.writes_output(b):
                continue
            try:
                sch.compute_inline(b.rv)
            except s_tir.ScheduleError:
                continue
            remaining.remove(b)
            changed = True
    return remaining


def whole_vectors(c: int, lanes: int) -> bool:
    """Whether a loop of `c` elements maps onto whole registers: half a vector, one, or two."""
    return c in (max(lanes // 2, 1), lanes, 2 * lanes)


def vector_split(extent: int, lanes: int) -> Optional[int]:
    """The inner (vector) factor for a loop of `extent`: the largest of two vectors, one, or half a vector that
    divides it; else the whole loop when it is at most MAX_WHOLE_VECTOR vectors long (LLVM splits an odd-sized
    vector into legal pieces: fine for a single row, too many registers for a tile of rows); else None (the
    caller splits by `lanes` and accepts a predicated tail)."""
    if extent <= 1:
        return None
    for c in (2 * lanes, lanes, max(lanes // 2, 1)):
        if extent % c == 0:
            return c
    if extent <= MAX_WHOLE_VECTOR * lanes:
        return extent
    return None


def schedule_spatial(sch: s_tir.Schedule, b: BlockFacts, lanes: int) -> None:
    """Parallel outer loops, vectorized inner loop, for a spatial block at the top of the function."""
    loops = sch.get_loops(b.rv)
    if not loops:
        return
    extents = b.extents if len(b.extents) == len(loops) else [None] * len(loops)
    inner_ext = extents[-1]
    inner = loops[-1]
    outer = loops[:-1]
    if inner_ext is not None and inner_ext > 1:
        factor = vector_split(inner_ext, lanes)
        if factor is None:
            factor = lanes
        if factor < inner_ext:
            o, inner = sch.split(inner, factors=[None, factor])
            outer = outer + [o]
        sch.vectorize(inner)
    elif inner_ext == 1:
        outer = loops
    total = 1
    for e in extents:
        total *= e if e is not None else MIN_PARALLEL_WORK
    if outer and total >= MIN_PARALLEL_WORK:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(fused)


def refresh(sch: s_tir.Schedule, b: BlockFacts) -> BlockFacts:
    return block_facts(sch, b.rv)
