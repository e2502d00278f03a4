"""Verify candidates cheapest and smallest first, dropping those the rules kept so far imply.

Candidates are ordered by cost class (2-D inputs, then 4-D activations, then convolution kernels: the verifier's
conv proofs take seconds to a minute each), then by size (operators on both sides), then by distinct inputs (most
first: the general form before its instances). Before a candidate is
generalized and verified (in a worker), it is tested against the kept rules (`derive.Deriver`) and dropped when they
rewrite its source and target into one graph. Each verified rule joins the kept rules, in both directions where
its sides read the same inputs. After the forward candidates of a cost class, the reverse of each kept rule (where
it applies) is verified too, so that the search, which applies a rule from source to target, can use both
directions; each unordered pair is so verified once per direction at most, and a pair's second direction is never
a candidate of its own. A candidate that the kept rules imply only together with rules the verifier left
unproven is skipped as well (`implied_by_unproven`): it would most likely stay unproven, at a solver timeout each.
A time budget, shared between the cost classes, stops new verifications: what is left is reported as unverified
and never written.
"""
from __future__ import annotations

import hashlib
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..language.rule import RuleError
from ..language.compile import parse_rules
from .derive import Deriver, candidate_graphs
from .emit import entry_yaml, rule_entry
from .generalize import generalize, source_groups, split_variables
from .graphs import graph_inputs
from .pairs import Candidate
from .pool import dim_class

log = logging.getLogger(__name__)

CLASS_SHARE = {0: 2.0, 1: 1.0, 2: 2.0}  # how a time budget is shared between the cost classes
FORWARD_SHARE = 0.8  # of a class's time, what its forward candidates may use (the rest: the kept rules' reverses)
LOOKAHEAD = 64  # candidates started (tested, sent) ahead of the first one not yet settled
HEAVY_KINDS = ("conv3x3", "conv1x1", "conv1x3", "conv3x1", "dwconv")
# a candidate's solver calls stop after this many seconds (a rule's own default is 10 s): the proofs of kept
# candidates take well under a second each; a candidate the solver cannot decide this fast is left unproven (a
# shorter limit can only turn "verified" into "unproven", never the reverse)
SOLVER_TIMEOUT_S = 3.0


@dataclass
class Item:
    """One candidate on its way: its generalized entry (and fallback), dimension groups, and what became of it."""

    cand: Candidate  # as paired (the derivability test builds it at the pool's shapes)
    entry: Optional[dict] = None  # the generalized rule (set by `prepare`)
    fallback: Optional[dict] = None  # the rule at the pool's classes, where it differs
    groups: list = field(default_factory=list)
    fallback_groups: list = field(default_factory=list)
    gcand: Optional[Candidate] = None  # the candidate with repeated inputs split
    status: str = "pending"  # verified | refuted | unproven | derivable | implied_by_unproven | duplicate |
    # unverified | not_compiled
    result: object = None  # the verifier's VerifyResult
    rule: object = None  # the compiled rule that was verified
    used: Optional[dict] = None  # the entry that was verified (entry or fallback)
    used_groups: list = field(default_factory=list)
    path: list = field(default_factory=list)  # kept rules implying it (derivable)
    reverse_of: Optional[str] = None
    tested_with: tuple = ()  # rules known (kept, kept or unproven) when last tested
    future: Optional[Future] = None

    @property
    def name(self) -> str:
        """The rule's name once generalized, else one from the candidate's fingerprint and text."""
        if self.entry is not None:
            return self.entry["name"]
        return "cand_" + hashlib.sha256(self.cand.canonical().encode()).hexdigest()[:10]


def cost_class(c: Candidate, pool: dict) -> int:
    """0: no 4-D input; 1: 4-D activations only; 2: convolution kernels."""
    kinds = {pool[v].kind for v in c.inputs}
    if kinds & set(HEAVY_KINDS):
        return 2
    return 1 if any(pool[v].family == "4d" for v in c.inputs) else 0


def order_key(item: Item, pool: dict) -> tuple:
    """Cost class, size, then more distinct inputs first: a candidate that reads one input twice (concat(a, a))
    is most often an instance of one with distinct inputs, which, kept first, implies it (no verification)."""
    c = item.cand
    return cost_class(c, pool), len(c.src) + len(c.dst), -len(set(c.inputs)), -len(c.src)


def reversed_candidate(c: Candidate) -> Optional[Candidate]:
    """The candidate with its sides swapped, when the swap is a rule: the target is operators that read every input
    and give distinct outputs."""
    if not c.dst or any(r[0] == "i" for r in c.dst_outputs) or len(set(c.dst_outputs)) != len(c.dst_outputs):
        return None
    if set(graph_inputs(c.dst)) != set(c.inputs):
        return None
    return Candidate(c.dst, c.dst_outputs, c.src, c.src_outputs, c.inputs, c.fingerprint)


def _compile(entry: dict) -> Optional[object]:
    try:
        return parse_rules(entry_yaml(entry, "candidate"), "<generated>")[0]
    except RuleError as err:
        log.warning("generated rule %s does not compile: %s", entry["name"], err)
        return None


def reverse_entry(item: Item, pool: dict, entry: Optional[dict] = None, groups: Optional[list] = None) \
        -> Optional[tuple]:
    """(reversed candidate, its entry) of a verified item (or of its `entry` with `groups`), or None."""
    rc = reversed_candidate(item.gcand)
    if rc is None:
        return None
    cls = {(v, a): dim_class(pool[v], a) for v in rc.inputs for a in range(len(pool[v].shape))}
    return rc, rule_entry(rc, item.used_groups if groups is None else groups, pool, cls, source_groups(rc, pool))


def prepare(item: Item, pool: dict) -> None:
    """Generalize the item's candidate (split repeated inputs, then dimension groups) into its rule entries;
    `pool` gains the fresh inputs it names."""
    c = split_variables(item.cand, pool)
    groups, implied = generalize(c, pool), source_groups(c, pool)
    cls = {(v, a): dim_class(pool[v], a) for v in c.inputs for a in range(len(pool[v].shape))}
    item.gcand, item.groups = c, groups
    item.entry = rule_entry(c, groups, pool, cls, implied)
    item.fallback_groups = [[p for p in cls if cls[p] == k] for k in sorted(set(cls.values()))]
    fb = rule_entry(c, item.fallback_groups, pool, cls, implied)
    item.fallback = fb if fb["digest"] != item.entry["digest"] else None


_AXIOMS: dict = {}  # (axiom file hash, cache path) -> (verified axioms, cache): once per worker process


def _verdict(rule, use_cache: bool) -> object:
    """The verifier's verdict on one rule. The shipped axioms are loaded and checked once per process (and again
    only when their file changes), not once per candidate: that took a fifth of a 2-D candidate's time."""
    from ..verify.verdict import Cache, axioms_file_hash, cache_path, verify_axioms, verify_rules

    key = (axioms_file_hash(), str(cache_path()) if use_cache else None)
    if key not in _AXIOMS:
        cache = Cache() if use_cache else None
        _AXIOMS.clear()
        _AXIOMS[key] = (verify_axioms(jobs=1, use_cache=use_cache, cache=cache)[0], cache)
    axioms, cache = _AXIOMS[key]
    return verify_rules([rule], jobs=1, use_cache=use_cache, axioms=axioms, cache=cache, axiomatic_first=True)[0]


def generalize_and_verify(cand: Candidate, pool: dict, use_cache: bool, entry: Optional[dict] = None,
                          groups: Optional[list] = None) -> dict:
    """Run in a worker: generalize the candidate (unless `entry` is given), verify its entry, and where that fails
    its fallback; returns the fields of the item that change and the verdict."""
    it = Item(cand, entry, None, groups or [], [], cand)
    pool = dict(pool)
    if entry is None:
        prepare(it, pool)
    out = {"gcand": it.gcand, "entry": it.entry, "fallback": it.fallback, "groups": it.groups,
           "fallback_groups": it.fallback_groups, "vars": {v: pool[v] for v in it.gcand.inputs}, "used": None,
           "result": None}
    first = None
    for e in (it.entry, it.fallback):
        if e is None:
            continue
        rule = _compile(e)
        if rule is None:
            continue
        rule.verify.timeout = min(rule.verify.timeout, SOLVER_TIMEOUT_S)
        res = _verdict(rule, use_cache)
        out["result"], out["used"] = res, e
        first = first or res
        if res.ok:
            return out
    if first is not None:  # the generalized entry's verdict names the failure
        out["result"], out["used"] = first, it.entry
    return out


class _Inline:
    """An executor that runs each call at once (one process)."""

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        f.set_result(fn(*args))
        return f


class Keeper:
    """Runs the ordered, pruned verification of `items` (see the module doc).

    Verification streams through `executor` (up to `jobs` rules in flight, each tested against the rules kept so
    far before it is sent); verdicts are committed in order, and a candidate whose test ran before all earlier
    verdicts were in is tested again at its commit: the result does not depend on `jobs` or timing (save the time
    budget)."""

    def __init__(self, items: list, pool: dict, jobs: int, use_cache: bool, counts: dict,
                 progress: Callable, deadline: Optional[float] = None, reverse: bool = True,
                 deriver: Optional[Deriver] = None, executor=None, skip_unproven: bool = True):
        self.items = sorted(items, key=lambda it: order_key(it, pool))
        self.pool, self.jobs, self.use_cache, self.counts = pool, jobs, use_cache, counts
        self.progress, self.deadline, self.reverse = progress, deadline, reverse
        self.deriver = deriver or Deriver()
        self.class_deadline = deadline
        self.shadow = Deriver() if skip_unproven else None  # kept rules and rules left unproven
        self.executor = executor or _Inline()
        self.reverses: list = []  # Items for the second directions
        self.t_derive = self.t_wait = 0.0
        self.n_kept = self.n_implied = 0
        self.seen: set = set()  # digests of generalized entries

    def _out_of_time(self) -> bool:
        return self.class_deadline is not None and time.monotonic() > self.class_deadline

    def _derivable(self, item: Item) -> bool:
        """Whether the kept rules imply the item (status "derivable"), or, with `skip_unproven`, the kept rules
        together with rules the verifier could not prove (status "implied_by_unproven": verifying it would most
        likely end the same way; it is not written either)."""
        t = time.perf_counter()
        try:
            item.tested_with = (self.deriver.n_rules, self.shadow.n_rules if self.shadow else 0)
            graphs = candidate_graphs(item.cand, self.pool)
            path = self.deriver.derive(*graphs) if graphs is not None else None
            status = "derivable"
            if path is None and graphs is not None and self.shadow is not None and self.shadow.n_rules:
                path, status = self.shadow.derive(*graphs), "implied_by_unproven"
        finally:
            self.t_derive += time.perf_counter() - t
        item.path = path or []
        if path is not None:
            item.status = status
        return path is not None

    def _stale(self, item: Item) -> bool:
        return item.tested_with != (self.deriver.n_rules, self.shadow.n_rules if self.shadow else 0)

    def _start(self, item: Item, test: bool) -> None:
        """Test the item against the kept rules, and if not implied, send it to be generalized and verified."""
        if self._out_of_time():
            item.status = "unverified"
            return
        if test and self._derivable(item):
            return
        item.future = self.executor.submit(generalize_and_verify, item.cand, self.pool, self.use_cache,
                                           item.entry, item.groups)

    def _commit(self, item: Item, test: bool) -> bool:
        """Settle the item if it can be now (True); False while its verdict is awaited."""
        if item.status != "pending":
            return True
        if test and self._stale(item):  # rules were kept since it was tested
            if self._derivable(item):
                item.future = None
                return True
            if item.future is None:  # it was implied at its first test, not since: verify it now
                self._start(item, test=False)
                return item.status != "pending"
        if item.future is None:
            return True
        if not item.future.done():
            return False
        out = item.future.result()
        item.future = None
        self.pool.update(out["vars"])
        for k in ("gcand", "entry", "fallback", "groups", "fallback_groups"):
            setattr(item, k, out[k])
        if item.reverse_of is None:
            if item.entry["digest"] in self.seen:  # equal to an earlier candidate once generalized
                item.status = "duplicate"
                return True
            self.seen.add(item.entry["digest"])
        res, entry = out["result"], out["used"]
        if res is None:
            item.status = "not_compiled"
        elif res.ok:
            rule = _compile(entry)
            self._keep(item, rule, res, entry, item.groups if entry is item.entry else item.fallback_groups)
        else:
            item.status, item.result = res.status, res
            if res.status == "unproven" and self.shadow is not None:
                rule = _compile(entry)
                self.shadow.add(rule)
                rc = reverse_entry(item, self.pool, entry, item.groups if entry is item.entry else
                                   item.fallback_groups)
                rrule = _compile(rc[1]) if rc is not None else None
                if rrule is not None:
                    self.shadow.add(rrule)
        return True

    def _keep(self, item: Item, rule, result, entry: dict, groups: list) -> None:
        item.status, item.result, item.rule, item.used, item.used_groups = "verified", result, rule, entry, groups
        self.deriver.add(rule)
        if self.shadow is not None:
            self.shadow.add(rule)
        if item.reverse_of is not None:
            return
        rev = reverse_entry(item, self.pool)
        if rev is None:
            return
        rc, e = rev
        rrule = _compile(e)
        if rrule is None:
            return
        self.deriver.add(rrule)  # an equality holds both ways: the reverse implies candidates now
        if self.shadow is not None:
            self.shadow.add(rrule)
        if self.reverse:
            self.reverses.append(Item(rc, e, None, item.used_groups, [], rc, reverse_of=entry["name"]))

    def _phase(self, items: list, desc: str, test: bool) -> None:
        """Start items in order while fewer than `jobs` verifications are running (looking at most LOOKAHEAD ahead
        of the first unsettled one), and settle them in order. A finished verification behind a slow one frees its
        worker at once: the next items start while the slow one runs (counting unsettled items instead of running
        ones left a worker idle behind every slow candidate)."""
        with self.progress(len(items), desc) as bar:
            nxt = done = 0
            while done < len(items):
                running = sum(1 for it in items[done:nxt] if it.future is not None and not it.future.done())
                while nxt < len(items) and running < max(1, self.jobs) and nxt - done < LOOKAHEAD:
                    self._start(items[nxt], test)
                    running += items[nxt].future is not None and not items[nxt].future.done()
                    nxt += 1
                moved = False
                while done < nxt:
                    it = items[done]
                    if not self._commit(it, test):
                        break
                    done += 1
                    moved = True
                    self.n_kept += it.status == "verified"
                    self.n_implied += it.status == "derivable"
                    bar.update(1, f"{self.n_kept} kept, {self.n_implied} implied")
                if not moved and done < nxt:
                    t = time.perf_counter()
                    pending = [it.future for it in items[done:nxt] if it.future is not None and
                               not it.future.done()]
                    if pending:
                        wait(pending, return_when=FIRST_COMPLETED)
                    self.t_wait += time.perf_counter() - t

    def run(self) -> list:
        """All items, each with its status: per cost class, the forward candidates, then the reverses of the rules
        kept (a reverse equal to a kept rule up to renaming is that rule)."""
        rev_all: list = []
        digests: set = set()
        classes = sorted({cost_class(it.cand, self.pool) for it in self.items})
        for k, cls in enumerate(classes):
            class_end = None
            if self.deadline is not None:  # each cost class gets its share of the time left, its forward
                # candidates a part of it: the reverses of the rules kept are few, cheap and mostly verified
                share = CLASS_SHARE[cls] / sum(CLASS_SHARE[c] for c in classes[k:])
                now = time.monotonic()
                class_end = now + max(0.0, self.deadline - now) * share
                self.class_deadline = now + (class_end - now) * FORWARD_SHARE
            self._phase([it for it in self.items if cost_class(it.cand, self.pool) == cls], "verifying", test=True)
            self.class_deadline = class_end
            digests |= {it.used["digest"] for it in self.items if it.status == "verified"}
            rev = [it for it in self.reverses if it.entry["digest"] not in digests]
            self.counts["reverse_same_as_kept"] = self.counts.get("reverse_same_as_kept", 0) + \
                len(self.reverses) - len(rev)
            self.reverses = []
            rev.sort(key=lambda it: order_key(it, self.pool))
            self._phase(rev, "verifying reverses", test=False)
            rev_all += rev
        self.reverses = rev = rev_all
        c = self.counts
        fwd = self.items
        for k in ("derivable", "implied_by_unproven", "duplicate", "verified", "refuted", "unproven", "unverified",
                  "not_compiled"):
            c[f"forward_{k}"] = sum(1 for it in fwd if it.status == k)
        for k in ("verified", "refuted", "unproven", "unverified"):
            c[f"reverse_{k}"] = sum(1 for it in rev if it.status == k)
        for k in ("refuted", "unproven", "unverified"):
            c[k] = c[f"forward_{k}"] + c[f"reverse_{k}"]
        c["derive_tests"], c["derive_states"] = self.deriver.stats["tests"], self.deriver.stats["states"]
        c["t_derive_s"], c["t_wait_verifier_s"] = round(self.t_derive, 1), round(self.t_wait, 1)
        return fwd + rev
