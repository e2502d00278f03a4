"""What the schedule rules read off a TIR PrimFunc: its blocks, their iteration kinds and extents, the block
iterators each buffer access uses, and which buffers the function writes out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import tvm_ffi
from tvm import s_tir, tirx

SPATIAL, REDUCE, OTHER = "S", "R", "O"


def _kind(iv: tirx.IterVar) -> str:
    return {tirx.IterVar.DataPar: SPATIAL, tirx.IterVar.CommReduce: REDUCE}.get(int(iv.iter_type), OTHER)


def _vars_in(expr: tirx.Expr) -> set:
    found: set = set()
    tvm_ffi.structural_walk(expr, (tirx.Var, found.add), order="post")
    return found


def const_int(expr) -> Optional[int]:
    """The value of an integer constant, None for anything symbolic."""
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


@dataclass
class Access:
    """One buffer access of a block: the buffer and, per dimension, the indices of the block iterators used."""

    buffer: tirx.Var
    dims: list  # per buffer dimension: frozenset of iterator positions

    @property
    def used(self) -> frozenset:
        return frozenset().union(*self.dims) if self.dims else frozenset()


@dataclass
class BlockFacts:
    """One block of a PrimFunc, as the rules see it."""

    rv: s_tir.schedule.SBlockRV
    name: str
    kinds: str  # one letter per iterator: S spatial, R reduction, O other
    extents: list  # per iterator: int, or None when symbolic
    reads: list  # [Access]
    writes: list  # [Access]
    has_init: bool

    @property
    def is_spatial(self) -> bool:
        return REDUCE not in self.kinds and OTHER not in self.kinds

    @property
    def is_reduction(self) -> bool:
        return REDUCE in self.kinds and OTHER not in self.kinds

    @property
    def static(self) -> bool:
        return all(e is not None for e in self.extents)

    def spatial(self) -> list:
        return [i for i, k in enumerate(self.kinds) if k == SPATIAL]

    def reduce(self) -> list:
        return [i for i, k in enumerate(self.kinds) if k == REDUCE]


def _access(region, positions: dict) -> Access:
    dims = []
    for rng in region.region:
        dims.append(frozenset(positions[v] for v in _vars_in(rng.min) if v in positions))
    return Access(region.source, dims)


def block_facts(sch: s_tir.Schedule, rv: s_tir.schedule.SBlockRV) -> BlockFacts:
    """Read the facts of one block."""
    block = sch.get(rv)
    positions = {iv.var: i for i, iv in enumerate(block.iter_vars)}
    return BlockFacts(
        rv=rv,
        name=block.name_hint,
        kinds="".join(_kind(iv) for iv in block.iter_vars),
        extents=[const_int(iv.dom.extent) for iv in block.iter_vars],
        reads=[_access(r, positions) for r in block.reads],
        writes=[_access(w, positions) for w in block.writes],
        has_init=block.init is not None,
    )


@dataclass
class FuncFacts:
    """The blocks directly under a PrimFunc's root block, in program order, and the buffers it writes out."""

    blocks: list  # [BlockFacts]
    outputs: set  # buffer vars written by the function (not allocated inside it)

    def writes_output(self, b: BlockFacts) -> bool:
        return any(w.buffer in self.outputs for w in b.writes)


def root_block(sch: s_tir.Schedule) -> s_tir.schedule.SBlockRV:
    body = sch.mod["main"].body
    if not isinstance(body, s_tir.SBlockRealize):
        raise ValueError("the function body is not a root block")
    return sch.get_sblock(body.block.name_hint)


def func_facts(sch: s_tir.Schedule) -> Optional[FuncFacts]:
    """Facts of the blocks at the top of the function; None when the function is not in plain block form
    (nested blocks, opaque blocks, loops holding more than one block)."""
    try:
        root = root_block(sch)
    except ValueError:
        return None
    allocated = list(sch.get(root).alloc_buffers)
    blocks = [block_facts(sch, rv) for rv in sch.get_child_blocks(root)]
    if not blocks:
        return None
    for b in blocks:
        if sch.get_child_blocks(b.rv):
            return None  # nested blocks: not a plain compute block
    written = {w.buffer for b in blocks for w in b.writes}
    outputs = {buf for buf in written if not any(buf.same_as(a) for a in allocated)}
    return FuncFacts(blocks, outputs)
