"""`generate_rules`: enumerate, fingerprint, pair, prune, generalize, verify, write.

Enumeration is split into units (a family of the pool and a prefix of the graphs' first nodes: hundreds at 3 and 4
operators, so that both workers stay busy to the end), run in `jobs` processes. The records of each finished unit
are appended to the checkpoint file and put into their fingerprint buckets; an interrupted run reads the finished
units back and enumerates the rest. Everything is ordered by content, so the output depends on the settings alone.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Optional

from ...fileio import atomic_write
from ...graph.ops import OPS, facet
from ..language.compile import parse_rules
from ..op_facets import GEN_ATTRS, GEN_INPUTS
from ..verify.verdict import main_not_reimported
from .checkpoint import Checkpoint, parse_unit_line, unit_line
from .emit import entry_yaml
from .enumerate import Enumerator
from .keep import Item, Keeper, reversed_candidate
from .pairs import Pairer, canonical_form
from .pool import build_pool, families

log = logging.getLogger(__name__)

TASO_OPS = ("add", "concat", "conv2d", "matmul", "mul", "relu", "split")  # the operators of TASO's rule file
TASO_KINDS = ("mat", "act4", "conv3x3")  # TASO's pool: 2-D tensors, 4-D activations, 3x3 kernels
MAX_BUCKET = 48  # graphs per fingerprint bucket that are paired (the rest are counted, not paired)
FORMAT = "taso-tvm-generate-2"
DEFAULT_TIME_BUDGET_S = 600.0  # the command line's default budget for a whole run


@dataclass
class Settings:
    """Everything the output depends on."""

    max_ops: int
    ops: tuple
    kinds: tuple
    per_kind: int
    seed: int = 0
    attrs: tuple = ()  # ((op, ((attr, values), ...)), ...): values replacing the generator facet's

    def attr_overrides(self) -> dict:
        return {op: {k: tuple(v) for k, v in items} for op, items in self.attrs}

    def digest(self) -> str:
        return hashlib.sha256((FORMAT + json.dumps(asdict(self), sort_keys=True)).encode()).hexdigest()[:16]

    def describe(self) -> str:
        extra = "".join(f" {op}.{k}={list(v)}" for op, items in self.attrs for k, v in items)
        return f"max_ops={self.max_ops} ops={','.join(self.ops)} kinds={','.join(self.kinds)} " \
               f"per_kind={self.per_kind} seed={self.seed}{extra}"


@dataclass
class GenerateResult:
    """What a run produced: the YAML text of the verified rules and the counts of every stage."""

    settings: Settings
    text: str
    rules: list  # compiled verified rules
    counts: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)  # rule name -> status
    candidates: list = field(default_factory=list)  # (candidate, entry, status)
    derivations: dict = field(default_factory=dict)  # name of a candidate dropped as implied -> kept rules' names
    complete: bool = True  # False: the time budget ended the enumeration (nothing verified or written)
    checkpoint: Optional[str] = None  # where an incomplete run's finished units are kept


def generatable_ops() -> list:
    """Operators with a `rules.generate.attrs` facet."""
    return sorted(op for op in OPS if facet(op, GEN_ATTRS) is not None)


def make_settings(max_ops: int, ops: Optional[list] = None, kinds: Optional[list] = None,
                  per_kind: Optional[int] = None, seed: int = 0, attrs: Optional[dict] = None) -> Settings:
    """Defaults: every generatable operator up to 2 operators, TASO's operators (and pool) from 3 on. `attrs`
    ({op: {attribute: values}}) narrows or widens what an operator's generator facet enumerates."""
    if max_ops < 1:
        raise ValueError("max_ops must be at least 1")
    if ops is None:
        ops = generatable_ops() if max_ops <= 2 else list(TASO_OPS)
    bad = [op for op in ops if op not in OPS or facet(op, GEN_ATTRS) is None]
    if bad:
        raise ValueError(f"cannot generate rules for operator(s) {', '.join(bad)} (generatable: "
                         f"{', '.join(generatable_ops())})")
    from .pool import KINDS
    unknown = [k for k in (kinds or ()) if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown input kind(s) {', '.join(unknown)} (kinds: {', '.join(KINDS)})")
    if kinds is None:
        kinds = {k for op in ops for k in facet(op, GEN_INPUTS)}
        if max_ops >= 3:
            kinds = {k for k in kinds if k in TASO_KINDS} or kinds
    frozen = tuple(sorted((op, tuple(sorted((k, tuple(v)) for k, v in d.items()))) for op, d in (attrs or {}).items()))
    for op, _items in frozen:
        if op not in ops:
            raise ValueError(f"attribute values given for {op}, which is not among the operators")
    return Settings(max_ops, tuple(sorted(set(ops))), tuple(sorted(kinds)),
                    per_kind if per_kind is not None else min(max_ops + 1, 4), seed, frozen)


# ---------------------------------------------------------------- enumeration units (run in workers)
_WORKER: dict = {}


def _enumerators(s: Settings) -> dict:
    pool = build_pool(set(s.kinds), s.per_kind)
    return {fam: Enumerator(list(s.ops), p, s.max_ops, s.seed, s.attr_overrides()) for fam, p in families(pool)}


def _unit_depth(s: Settings) -> int:
    """Nodes in a unit's prefix: one (a first node and everything after it) for small runs, two from 3 operators
    on (some first nodes have many times more graphs after them than others)."""
    return 2 if s.max_ops >= 3 else 1


def _init_worker(s: Settings, quiet: bool = True) -> None:
    if quiet:  # a worker process: the parent reports
        logging.getLogger("taso_tvm").setLevel(logging.WARNING)
    _WORKER["enum"] = _enumerators(s)
    _WORKER["units"] = {fam: e.units(_unit_depth(s)) for fam, e in _WORKER["enum"].items()}


def _quiet() -> None:
    logging.getLogger("taso_tvm").setLevel(logging.WARNING)


def _run_unit(unit: tuple) -> tuple:
    """(unit, its checkpoint line): plain text, which the parent appends to the checkpoint as it is."""
    fam, i = unit
    prefix, whole = _WORKER["units"][fam][i]
    return unit, unit_line(unit, list(_WORKER["enum"][fam].run_unit(prefix, whole)))


@contextlib.contextmanager
def _no_progress(total: int, desc: str):
    class _P:
        def update(self, n: int = 1, note: str = "") -> None:
            pass
    yield _P()


def _pool_ctx():
    """forkserver workers (never fork a parent that may hold TVM threads), preloading this module."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


@contextlib.contextmanager
def _workers(jobs: int, **kw):
    """A process pool whose workers do not re-run the caller's `__main__` script (they need only this package)."""
    from concurrent.futures import ProcessPoolExecutor

    with main_not_reimported(), ProcessPoolExecutor(jobs, mp_context=_pool_ctx(), **kw) as ex:
        yield ex


class Buckets:
    """Enumerated graphs grouped by fingerprint key as they arrive (a run holds every graph once, in its bucket)."""

    def __init__(self) -> None:
        self.by_key: dict = {}
        self.graphs = 0
        self.units_total = self.units_left = 0

    def add(self, records: list) -> None:
        for r in records:
            self.by_key.setdefault(r.key, []).append(r)
        self.graphs += len(records)


def enumerate_all(s: Settings, jobs: int, ckpt: Checkpoint, progress: Callable,
                  deadline: Optional[float] = None) -> Buckets:
    """Every graph of the settings in its bucket: the checkpoint's units, then the others enumerated now (each
    appended to the checkpoint as it finishes). Past `deadline` (time.monotonic) no unit is started: the buckets'
    `units_left` says how many were not done."""
    enums = _enumerators(s)
    units = [(fam, i) for fam, e in sorted(enums.items()) for i in range(len(e.units(_unit_depth(s))))]
    buckets = Buckets()
    done = set()
    for unit, recs in ckpt.load():
        if unit in units and unit not in done:
            done.add(unit)
            buckets.add(recs)
    todo = [u for u in units if u not in done]
    ckpt.resumed = len(done)

    def finished(unit: tuple, line: str, bar) -> None:
        ckpt.append(line)
        buckets.add(parse_unit_line(line)[1])  # read as the checkpoint will be
        bar.update(1, f"{buckets.graphs} graphs")

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    try:
        with progress(len(units), "enumerating") as bar:
            bar.update(len(done))
            if jobs > 1 and s.max_ops >= 3 and len(todo) > 1:  # smaller runs take less than starting workers
                from concurrent.futures import as_completed
                with _workers(jobs, initializer=_init_worker, initargs=(s,)) as ex:
                    futs = [ex.submit(_run_unit, u) for u in todo]
                    try:
                        for fut in as_completed(futs):
                            if fut.cancelled():
                                continue
                            unit = fut.result()
                            done.add(unit[0])
                            finished(*unit, bar)
                            if late():
                                break
                    finally:  # out of time or interrupted: start no other unit (the running ones end soon)
                        for f in futs:
                            f.cancel()
            else:
                _init_worker(s, quiet=False)
                for u in todo:
                    if late():
                        break
                    finished(*_run_unit(u), bar)
                    done.add(u)
    finally:  # an interruption keeps what is done
        ckpt.close()
    buckets.units_total, buckets.units_left = len(units), len(units) - len(done)
    return buckets


def pair_all(s: Settings, buckets: Buckets, counts: dict) -> list:
    pool = build_pool(set(s.kinds), s.per_kind)
    input_fps: dict = {}
    for fam, e in sorted(_enumerators(s).items()):
        input_fps.update(e.input_fingerprints())
    pairer = Pairer(pool, s.max_ops)
    capped = 0
    for key in sorted(buckets.by_key):
        recs = buckets.by_key[key]
        if len(recs) < 2 and not any(f in input_fps for f in recs[0].fps):
            continue
        recs = sorted(recs, key=lambda r: (len(r.nodes), repr(r.nodes)))
        if len(recs) > MAX_BUCKET:
            capped += len(recs) - MAX_BUCKET
            recs = recs[:MAX_BUCKET]
        pairer.bucket(key, recs, input_fps)
    counts.update({"graphs": buckets.graphs, "buckets": len(buckets.by_key),
                   "buckets_shared": sum(1 for b in buckets.by_key.values() if len(b) > 1),
                   "bucket_cap_dropped": capped})
    counts.update({f"pruned_{k}" if k not in ("pairs", "identities", "pairs_not_star") else k: v
                   for k, v in pairer.stats.items()})
    counts["candidates"] = len(pairer.kept)
    return pairer.kept


def generate_rules(max_ops: int, ops: Optional[list] = None, jobs: int = 2, out: Optional[str] = None,
                   checkpoint: Optional[str] = None, kinds: Optional[list] = None, per_kind: Optional[int] = None,
                   seed: int = 0, attrs: Optional[dict] = None, use_cache: bool = True,
                   progress: Optional[Callable[[int, str], ContextManager]] = None,
                   time_budget: Optional[float] = None, reverse: bool = True,
                   skip_unproven: bool = True) -> GenerateResult:
    """Discover substitution rules of up to `max_ops` operators per side, verify them, and return (and with `out`,
    write) the verified ones as a YAML rule file.

    `checkpoint` (default: `out` + ".ckpt") keeps finished work across an interruption; `progress(total, desc)`
    returns a context manager with `update(n, note)` (the command line passes the project's progress bar).
    Candidates are verified cheapest and smallest first; one implied by the rules kept so far is dropped unverified
    (see `keep.py`). `time_budget` (seconds, whole run) stops the enumeration (the result is then `complete=False`,
    nothing is written and the checkpoint keeps the finished units) or else the verification (what is left is
    counted as unverified and not written). `reverse` also verifies (and writes) each kept rule's other direction. `skip_unproven` also
    drops, unverified, a candidate that the kept rules imply together with rules the verifier left unproven."""
    s = make_settings(max_ops, ops, kinds, per_kind, seed, attrs)
    progress = progress or _no_progress
    t0 = time.perf_counter()
    ck_path = Path(checkpoint) if checkpoint else Path(str(out) + ".ckpt") if out else None
    ckpt = Checkpoint(ck_path, s.digest())
    counts: dict = {}
    deadline = time.monotonic() + time_budget if time_budget else None
    buckets = enumerate_all(s, jobs, ckpt, progress, deadline)
    counts.update(units=buckets.units_total, units_resumed=ckpt.resumed, units_left=buckets.units_left,
                  graphs=buckets.graphs, t_enumerate_s=round(time.perf_counter() - t0, 1))
    if buckets.units_left:  # out of time while enumerating: nothing to pair yet, the checkpoint keeps what is done
        counts["t_total_s"] = counts["t_enumerate_s"]
        log.warning("enumeration stopped at the time budget: %d of %d units left%s", buckets.units_left,
                    buckets.units_total, f" (checkpoint {ck_path}: the same settings resume)" if ck_path else "")
        return GenerateResult(s, "", [], counts, complete=False, checkpoint=str(ck_path) if ck_path else None)
    t1 = time.perf_counter()
    cands = pair_all(s, buckets, counts)
    del buckets
    counts["t_pair_s"] = round(time.perf_counter() - t1, 1)
    pool = {v.name: v for v in build_pool(set(s.kinds), s.per_kind)}
    # one direction per unordered pair; then, cheapest and smallest first: drop what the kept rules imply,
    # generalize the rest and verify it (keep.py)
    t1 = time.perf_counter()
    items, forms, rev_forms, n_rev = [], set(), set(), 0
    order = sorted(range(len(cands)), key=lambda i: (len(cands[i].src) + len(cands[i].dst), -len(cands[i].src), i))
    for i in order:
        c = cands[i]
        kinds = {v: pool[v].kind for v in c.inputs}
        form = c.form or canonical_form(c, kinds)
        forms.add(form)
        if form in rev_forms:  # the other direction of a kept candidate: verified (and written) as its reverse
            n_rev += 1
            continue
        rc = reversed_candidate(c)
        if rc is not None:
            rev_forms.add(canonical_form(rc, kinds))
        items.append(Item(c))
    counts["pruned_reverse_direction"] = n_rev
    counts["items"] = len(items)
    counts["t_directions_s"] = round(time.perf_counter() - t1, 1)
    t2 = time.perf_counter()
    from .keep import cost_class
    worth = sum(1 for it in items if cost_class(it.cand, pool) == 0) > 100 or \
        sum(1 for it in items if cost_class(it.cand, pool) > 0) > 2  # else starting workers takes longer
    with (_workers(jobs, initializer=_quiet) if jobs > 1 and worth else contextlib.nullcontext()) as ex:
        done = Keeper(items, pool, jobs, use_cache, counts, progress, deadline, reverse=reverse, executor=ex,
                      skip_unproven=skip_unproven).run()
    statuses = [(it.gcand or it.cand, it.used or it.entry, it) for it in done]
    counts["t_verify_s"] = round(time.perf_counter() - t2, 1)
    kept, names = [], set()
    for c, e, it in sorted(((c, e, it) for (c, e, it) in statuses if it.status == "verified"),
                           key=lambda x: (len(x[0].src), len(x[0].dst), x[1]["name"])):
        if e["name"] in names:  # one rule reached twice (two rules' reverses generalized alike): written once
            counts["verified_twice"] = counts.get("verified_twice", 0) + 1
            continue
        names.add(e["name"])
        kept.append((c, e, it))
    header = (f"# Substitution rules generated by `taso-tvm rules generate` ({s.describe()}).\n"
              f"# Every rule below was verified by taso_tvm.rules.verify: {len(kept)} rules from {len(items)} "
              f"candidates ({counts['forward_derivable']} implied by smaller kept rules, not written).\n")
    text = header + "\n".join(entry_yaml(e, _doc(s, c, it)) for c, e, it in kept)
    rules = parse_rules(text, str(out) if out else "<generated>")
    counts["verified"] = len(rules)
    counts["t_total_s"] = round(time.perf_counter() - t0, 1)
    if out:
        atomic_write(str(out), lambda f: f.write(text), mode="w")
    ckpt.remove()  # done: the next run with these settings starts afresh (verdicts stay cached)
    return GenerateResult(s, text, rules, counts, {it.name: it.status for _c, _e, it in statuses},
                          [(c, e, it.status) for c, e, it in statuses],
                          {it.name: it.path for _c, _e, it in statuses if it.status == "derivable"})


def _doc(s: Settings, c, it) -> str:
    rev = f"; reverse of {it.reverse_of}" if it.reverse_of else ""
    return f"generated ({s.describe()}); fingerprint {c.fingerprint}; proof {it.result.proof}{rev}"
