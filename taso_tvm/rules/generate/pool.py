"""The generator's input pool: typed rule inputs with symbolic shapes, and the sizes they take while enumerating.

Every dimension of an input kind is a *dimension class* (a letter) or a literal size. While enumerating, a class
has one size (`CLASS_SIZES`), distinct between classes, so that only shapes the pool means to match do match; the
generalizer later gives each class occurrence its own size where the rule allows it. All 2-D tensors share one
square shape, as in TASO's generator, so that activations and weights combine freely (x @ w, w1 @ w2).

The *heads* family is a transformer's attention: a sequence activation [B, L, E] whose embedding E is heads times
head size (E = G * D at the class sizes), and per-head tensors [B, G, L, D]. A reshape splits E into G heads of D
(the head count `HEADS` is a pseudo input dimension the generalizer varies like the others), merges the last two
axes back, or flattens all but the batch; the sizes keep B, L, G, D and E distinct, so only the intended shapes meet.
"""
from __future__ import annotations

from dataclasses import dataclass

# family: enumerations never mix families (a 2-D and a 4-D tensor share no operator but broadcasting)
KINDS: dict[str, tuple[str, tuple, str]] = {
    # kind: (variable prefix, shape, family)
    "mat": ("x", ("S", "S"), "2d"),
    "scalar": ("s", (), "any"),
    "row": ("r", ("S",), "2d"),
    "batched": ("q", ("B", "S", "S"), "3d"),
    "act4": ("a", ("N", "C", "H", "H"), "4d"),
    "conv3x3": ("k", ("C", "C", "K", "K"), "4d"),
    "conv1x1": ("j", ("C", "C", "I", "I"), "4d"),
    "conv1x3": ("h", ("C", "C", "I", "K"), "4d"),
    "conv3x1": ("v", ("C", "C", "K", "I"), "4d"),
    "dwconv": ("d", ("C", "I", "K", "K"), "4d"),
    "chan": ("c", ("C",), "4d"),
    "seq": ("e", ("B", "L", "E"), "heads"),
    "heads": ("q", ("B", "G", "L", "D"), "heads"),
}
CLASS_SIZES = {"S": 3, "B": 2, "N": 2, "C": 4, "H": 5, "K": 3, "I": 1, "L": 3, "G": 4, "D": 10, "E": 40}
# the head count of a split-heads reshape: a pseudo input (one dimension of class G) in the shapes the generalizer
# tries; absent, the reshape splits into CLASS_SIZES["G"] heads
HEADS = "#heads"
# sizes the generalizer gives to split-off classes (distinct from each other and from CLASS_SIZES where it can)
FRESH_SIZES = (6, 7, 8, 9, 10, 11, 12, 13)


@dataclass(frozen=True)
class InputVar:
    """One rule input: its name (prefix + number), kind and symbolic shape."""

    name: str
    kind: str
    shape: tuple

    @property
    def family(self) -> str:
        return KINDS[self.kind][2]


def build_pool(kinds: set, per_kind: int) -> list:
    """`per_kind` variables of each kind, in a fixed order (kind order of KINDS, then number)."""
    pool = []
    for kind, (prefix, shape, _fam) in KINDS.items():
        if kind in kinds:
            n = 1 if kind in ("scalar",) else per_kind
            pool += [InputVar(f"{prefix}{i + 1}", kind, shape) for i in range(n)]
    return pool


def families(pool: list) -> list:
    """The families to enumerate separately, each with its inputs (the 'any' kinds join every family)."""
    fams = sorted({v.family for v in pool if v.family != "any"})
    return [(f, [v for v in pool if v.family in (f, "any")]) for f in fams]


def dim_class(var: InputVar, axis: int) -> str:
    """The class of one input dimension (a literal size is its own class)."""
    d = var.shape[axis]
    return d if isinstance(d, str) else str(d)
