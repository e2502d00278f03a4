"""Candidate rules from fingerprint buckets, pruned as TASO prunes them.

Within a bucket, graphs are paired with the bucket's smallest graph (both ways), not with each other: any other pair
is the composition of two of these. A pair (source, target) is a candidate when the target reads only inputs
the source reads, the two share no operator applied to the same arguments (a common subgraph: the rule would be
a smaller rule in context), and no kept candidate equals it up to renaming the inputs of a kind. A graph whose
outputs equal inputs gives a candidate whose target is those inputs.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .graphs import expr_text, node_texts


@dataclass
class Candidate:
    """A source graph, a target graph (possibly empty), and for each source output the target ref it maps to."""

    src: tuple  # GNode nodes
    src_outputs: tuple  # refs
    dst: tuple
    dst_outputs: tuple  # refs (an input ref for an identity), aligned with src_outputs
    inputs: tuple  # input names the source reads
    fingerprint: str  # hex of the bucket key
    form: Optional[str] = field(default=None, compare=False, repr=False)  # `canonical_form`, once computed

    def canonical(self, rename: Optional[dict] = None) -> str:
        memo_s: dict = {}
        memo_d: dict = {}
        pairs = sorted((expr_text(self.src, s, rename, memo_s), expr_text(self.dst, d, rename, memo_d))
                       for s, d in zip(self.src_outputs, self.dst_outputs))
        return repr(pairs)


def _renamings(inputs: tuple, kinds: dict) -> Iterable[dict]:
    """Every renaming that permutes the used inputs of each kind among themselves."""
    by_kind: dict = {}
    for v in inputs:
        by_kind.setdefault(kinds[v], []).append(v)
    groups = [sorted(vs) for _, vs in sorted(by_kind.items())]
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
        ren = {}
        for g, p in zip(groups, perms):
            ren.update(dict(zip(g, p)))
        yield ren


def canonical_form(c: Candidate, kinds: dict) -> str:
    """The candidate's text, minimised over renamings of its inputs within kinds."""
    # the texts are built once with a placeholder per input and renamed by substitution (a placeholder cannot occur
    # in a text otherwise): the same strings as `c.canonical(renaming)` for every renaming, at a fraction of the cost
    marks = {v: f"\x00{i}\x01" for i, v in enumerate(c.inputs)}
    memo_s: dict = {}
    memo_d: dict = {}
    texts = [(expr_text(c.src, s, marks, memo_s), expr_text(c.dst, d, marks, memo_d))
             for s, d in zip(c.src_outputs, c.dst_outputs)]
    best = None
    for ren in _renamings(c.inputs, kinds):
        subst = [(marks[v], ren.get(v, v)) for v in c.inputs]
        pairs = []
        for a, b in texts:
            for m, v in subst:
                a, b = a.replace(m, v), b.replace(m, v)
            pairs.append((a, b))
        text = repr(sorted(pairs))
        if best is None or text < best:
            best = text
    return best


def _common_subgraph(a: tuple, b: tuple) -> bool:
    return bool(set(node_texts(a)) & set(node_texts(b)))


class Pairer:
    """Collects candidates bucket by bucket; `stats` counts what each pruning step removed."""

    def __init__(self, pool: list, max_ops: int):
        self.kinds = {v.name: v.kind for v in pool}
        self.max_ops = max_ops
        self.seen: set = set()
        self.kept: list = []
        self.stats = {"pairs": 0, "pairs_not_star": 0, "input_subset": 0, "common_subgraph": 0, "renaming": 0,
                      "identities": 0}

    def _offer(self, c: Candidate) -> None:
        canon = c.form = canonical_form(c, self.kinds)
        if canon in self.seen:
            self.stats["renaming"] += 1
            return
        self.seen.add(canon)
        self.kept.append(c)

    def bucket(self, key: tuple, records: list, input_fps: dict) -> None:
        """All candidates of one bucket (records sorted deterministically by the caller)."""
        fp = key[0].hex() if len(key) == 1 else "+".join(k.hex()[:8] for k in key)
        # identities: every output equals an input the graph reads; such a bucket gives nothing else (a pair of
        # its graphs is one identity followed by the other's inverse)
        names = [input_fps.get(f) for f in key]
        if all(n is not None for n in names):
            for r in records:
                if all(input_fps[f] in r.inputs for f in r.fps):
                    self.stats["identities"] += 1
                    self._offer(Candidate(r.nodes, r.outputs, (), tuple(("i", input_fps[f]) for f in r.fps),
                                          r.inputs, fp))
            return
        # a star around the smallest graph: g -> g2 is g -> rep followed by rep -> g2, so pairing every graph with
        # the representative both ways keeps what all pairs give (up to composing two rules)
        rep = records[0]
        star = [(r, rep) for r in records[1:]] + [(rep, r) for r in records[1:]]
        self.stats["pairs_not_star"] += len(records) * (len(records) - 1) - len(star)
        for s, d in star:
            self.stats["pairs"] += 1
            if not set(d.inputs) <= set(s.inputs):
                self.stats["input_subset"] += 1
                continue
            if _common_subgraph(s.nodes, d.nodes):
                self.stats["common_subgraph"] += 1
                continue
            where = {f: ref for f, ref in zip(d.fps, d.outputs)}
            self._offer(Candidate(s.nodes, s.outputs, d.nodes, tuple(where[f] for f in s.fps), s.inputs, fp))
