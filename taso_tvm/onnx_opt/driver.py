"""ONNX in, ONNX out: prepare the user's model, split it into regions TVM can import, search each region, keep
the regions that compute what they computed at every binding of the symbolic dims, splice them back, check the
whole model, and keep the result only if ONNX Runtime runs it faster than the original."""
from __future__ import annotations

import copy
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import onnx

from ..errors import is_interrupt
from ..onnx_io import weights
from ..progress import Progress, phase
from .onnx_graph import node_reads
from .partition import Partition, partition
from .prepare import Binding, Prepared, bind_inputs, infer, make_binding, prepare, second_bindings, simplify
from .region import RegionResult, region_model, relax_boundary, search_region
from .fold_constants import binding_independent_constants, fold_into
from .shape_reads import restore_shape_reads, rewire_shape_reads
from .splice import PREFIX, splice
from .expand_fused import expand_fused
from .embed_positions import fuse_embed_positions
from .padding_mask import fuse_padding_masks
from .fused_census import census_line, fused_census
from .peer_starts import PEER_STARTS, checked_output, not_a_candidate

log = logging.getLogger(__name__)

# the way out when random inputs do not fit the model (token ids past a table, a sample rate, ...)
INPUTS_HINT = "give real inputs with --inputs sample.npz (one array per input name)"
# the phases a report accounts for (`OnnxReport.phases`), in the order they run
# the guard stops timing a candidate that its interval shows cannot be faster than the original by this much: more
# rounds could only find a gain under 1 %. (At 3 % it threw away the 1-3 % that fusing a small encoder's attention,
# layer norms and GELU gives, which ONNX Runtime's optimizer keeps.)
GUARD_MIN_GAIN = 0.01
# a model whose runs take most of a second (a 3 GB decoder's prefill) has run a dozen rounds when the time cap ends,
# too few to show any gain: its timing goes on to this many rounds, up to this multiple of the cap
GUARD_FLOOR_ROUNDS, GUARD_FLOOR_CAP = 30, 3.0
# each model timed in this many sessions in turn: where ONNX Runtime places a session's buffers moves its runs by
# several % (a decoder's sessions: medians up to 6.6 % apart), enough for a single session's luck to decide; the
# extra sessions hold their own copies of the weights ONNX Runtime prepacks, so models larger together than
# GUARD_SESSION_BYTES get one each
GUARD_SESSIONS, GUARD_SESSION_BYTES = 3, 1 << 30
PHASES = ("prepare", "partition", "captures", "search", "splice", "folding", "checks", "candidates", "peer start",
          "guard")


@dataclass
class OnnxReport:
    """What `optimize_onnx` did: the partition, each region's search, the checks and the timing."""

    nodes: int = 0
    searchable: int = 0
    regions: list[RegionResult] = field(default_factory=list)
    bindings: list[dict] = field(default_factory=list)
    folding: bool = True
    timing: Any = None  # the timing helper's result, when the result was timed
    decision: str = ""  # what was written and why
    seconds: float = 0.0
    not_searched: dict = field(default_factory=dict)  # reason -> node count
    folded_nodes: int = 0  # nodes whose binding-independent values were written as constants
    expanded: int = 0  # com.microsoft nodes searched as their decomposition (expand_fused)
    predicted_saving_ms: Optional[float] = None  # the cost model's saving on the regions of the model the guard timed
    phases: dict = field(default_factory=dict)  # where the time went: phase -> seconds (`PHASES`), in order
    measure_seconds: float = 0.0  # of the search's time: kernels measured (not in the cost cache)
    fused: dict = field(default_factory=dict)  # the written model's {kind: (fused, of how many)} (fused_census.py)

    @property
    def gain(self) -> Optional[dict]:
        """The rewritten model's gain as predicted and as measured, in points of the original's measured latency:
        predicted = the cost model's saving on its searched regions / the original's latency, measured = 1 - the
        guard's optimized/original ratio. None unless the guard timed a rewritten model."""
        t = self.timing
        names = [lat.name for lat in t.latencies] if t is not None else []
        if self.predicted_saving_ms is None or "optimized" not in names:
            return None
        original_ms = t.latencies[0].median * 1e3
        measured = t.ratios[names.index("optimized") - 1].ratio
        return {"predicted_points": 100 * self.predicted_saving_ms / original_ms,
                "measured_points": 100 * (1 - measured), "predicted_saving_ms": self.predicted_saving_ms,
                "original_ms": original_ms, "measured_ratio": measured}

    @property
    def fused_line(self) -> str:
        """The written model's fused kinds as the summary says them ('attention 6 of 6, layer norm 13 of 13')."""
        return census_line(self.fused)

    @property
    def accepted(self) -> list[RegionResult]:
        return [r for r in self.regions if r.accepted is not None]

    @property
    def rules_applied(self) -> Counter:
        c: Counter = Counter()
        for r in self.accepted:
            c.update(r.rules_applied)
        return c

    def _sum(self, before: str, after: str) -> tuple[float, float]:
        b = sum(getattr(r, before) for r in self.regions)
        a = sum(getattr(r, after) if r.accepted is not None else getattr(r, before) for r in self.regions)
        return b, a

    @property
    def operators(self) -> tuple[int, int]:
        """Relax operators in the searched regions, before and after (accepted regions only)."""
        b, a = self._sum("ops_before", "ops_after")
        return int(b), int(a)

    @property
    def cost(self) -> tuple[float, float]:
        """The cost model's prediction for the searched regions, before and after (accepted regions only)."""
        return self._sum("cost_before", "cost_after")

    @property
    def share_searchable(self) -> float:
        return self.searchable / self.nodes if self.nodes else 0.0


class Capture:
    """The user's model run at one binding, with every region boundary tensor read out."""

    def __init__(self, feeds: dict[str, np.ndarray], values: dict[str, np.ndarray]):
        self.feeds, self.values = feeds, values


def _with_outputs(model: onnx.ModelProto, names: Sequence[str],
                  types: Mapping[str, onnx.TypeProto]) -> onnx.ModelProto:
    """A copy of the model that also outputs the tensors `names` (those `types` knows)."""
    m = copy.deepcopy(model)
    have = {o.name for o in m.graph.output}
    for x in names:
        if x not in have and x in types:
            vi = onnx.ValueInfoProto()
            vi.name = x
            vi.type.tensor_type.elem_type = types[x].tensor_type.elem_type
            m.graph.output.append(vi)
            have.add(x)
    return m


def _region_feeds(rm_inputs: Sequence[str], cap: Capture) -> dict[str, np.ndarray]:
    return {x: cap.values[x] if x in cap.values else cap.feeds[x] for x in rm_inputs}


def _settle_region(res: RegionResult, optimized: onnx.ModelProto, rm_inputs: Sequence[str],
                   rm_outputs: Sequence[str], captures: Sequence[Capture], sym_types: Mapping[str, onnx.TypeProto],
                   rtol: float, atol: float, strict: bool, keep_out: bool = False) -> None:
    """Accept the optimized region if, shape-free at its boundary, it matches the original nodes at every binding
    (with `strict`, a mismatch raises CheckFailed instead of keeping the region as it was). `keep_out`: the
    accepted region's weights go to the weight store (the model's are kept out of it too)."""
    from ..runtime.check import CheckFailed, compare_outputs, run_onnx

    relaxed = relax_boundary(optimized, sym_types)
    try:
        onnx.checker.check_model(weights.as_inputs(relaxed), full_check=False)
    except Exception as e:  # the checker raises ValidationError and others
        res.note = f"exported region is not valid ONNX ({str(e).splitlines()[0]}); kept as is"
        weights.forget(optimized)
        return
    for cap in captures:
        try:
            got = run_onnx(relaxed, _region_feeds(rm_inputs, cap))
            compare_outputs(got, {o: cap.values[o] for o in rm_outputs}, rtol=rtol, atol=atol)
        except CheckFailed as e:
            if strict:
                raise
            res.note = f"rewrite rejected at {_label(cap)}: {e}; kept as is"
            log.warning("region %d failed its check (%s): kept as it was", res.region.index, e)
            weights.forget(optimized)
            return
    res.accepted = weights.offload(relaxed) if keep_out else relaxed  # (the search's export is offloaded already)


def feeds_at(model: onnx.ModelProto, binding: Binding, inputs: Optional[Mapping[str, np.ndarray]] = None,
             seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs at a binding: the user's arrays where their shapes fit it, random ones elsewhere (integers drawn from
    the values the user's array holds, when there is one)."""
    from ..runtime.check import random_feeds

    feeds = random_feeds(model, shapes=binding.shapes, seed=seed)
    rng = np.random.default_rng(seed)
    for name, arr in (inputs or {}).items():
        if name not in feeds:
            continue
        arr = np.asarray(arr, dtype=feeds[name].dtype)
        if arr.shape == feeds[name].shape:
            feeds[name] = arr
        elif arr.size and not np.issubdtype(arr.dtype, np.floating):
            feeds[name] = rng.choice(arr.reshape(-1), size=feeds[name].shape).astype(arr.dtype)
    return feeds


def _runs_at(model: onnx.ModelProto, binding: Binding, inputs: Optional[Mapping[str, np.ndarray]], seed: int,
             threads: int = 1) -> bool:
    """Whether the original model runs at the binding (on random inputs, or the user's)."""
    from ..runtime.check import CheckFailed, run_onnx

    try:
        run_onnx(model, feeds_at(model, binding, inputs, seed), threads)
        return True
    except CheckFailed as e:
        log.info("the model does not run at %s (%s)", binding.label(), e)
        return False


def _pick_second(model: onnx.ModelProto, first: Binding, inputs: Optional[Mapping[str, np.ndarray]],
                 seed: int, threads: int = 1, after: Optional[Binding] = None) -> Optional[Binding]:
    """The first candidate second binding (after `after`, one found not to run) at which the original model runs,
    or None."""
    cands = second_bindings(first, model)
    if after is not None:
        cands = cands[[c.dims for c in cands].index(after.dims) + 1:] if after in cands else cands
    return next((c for c in cands if _runs_at(model, c, inputs, seed, threads)), None)


def _label(cap: Capture) -> str:
    return ", ".join(f"{k}{list(v.shape)}" for k, v in list(cap.feeds.items())[:2])


def optimize_onnx(model: onnx.ModelProto, settings: Any = None,
                  shapes: Optional[Mapping[str, Sequence[int]]] = None, fix_shapes: bool = False,
                  fold: bool = True, check: bool = True, time_check: bool = True, time_cap: float = 20.0,
                  threads: int = 2, rtol: float = 1e-3, atol: float = 1e-4, seed: int = 0, strict: bool = False,
                  inputs: Optional[Mapping[str, np.ndarray]] = None,
                  standard_ops: bool = False, peer_starts: bool = True) -> tuple[onnx.ModelProto, OnnxReport]:
    """Optimize an ONNX model region by region; returns the model to write and a report.

    settings: a resolved `relay_pass.Settings`, or TasoOptimize keywords (rules, cost, alpha, budget, time_limit,
        region_size, target, config) resolved here once.
    shapes: input shapes to cost at (symbolic dims keep their names in the output unless `fix_shapes`).
    inputs: sample inputs (name -> array) for the checks, where random ones would not do (a sample rate, token
    ids); their shapes set the binding when `shapes` does not.
    standard_ops: write default-domain ONNX operators only (ONNX Runtime's fused operators are not used).
    peer_starts: a transformer's fusions by ONNX Runtime's optimizer and onnxscript, and the search from each, are
    candidates of the guard (False: the search from the user's model only; onnxsim stays a candidate).
    check: the whole-model numeric check (regions are always checked). strict: a region or model that fails its
    check raises CheckFailed (else it is kept as the user had it). time_check: time the original against the
    result in ONNX Runtime and keep the original unless the result is faster (or level and more fused: `_guard`).
    """
    from ..memory import returning_memory

    mark, result = weights.mark(), model
    # a big model (weights kept out of it): freed weights (Relax constants, prepacked copies) go back at once
    with returning_memory(weights.has_references(model)):
        try:
            result, report = _optimize(model, settings, shapes, fix_shapes, fold, check, time_check, time_cap,
                                       threads, rtol, atol, seed, strict, inputs, standard_ops, peer_starts)
        finally:  # the weights of regions searched and not kept
            weights.release_since(mark, keep=[model, result])
    return result, report


def _optimize(model: onnx.ModelProto, settings: Any, shapes: Optional[Mapping[str, Sequence[int]]],
              fix_shapes: bool, fold: bool, check: bool, time_check: bool, time_cap: float, threads: int,
              rtol: float, atol: float, seed: int, strict: bool, inputs: Optional[Mapping[str, np.ndarray]],
              standard_ops: bool, peer_starts: bool = True) -> tuple[onnx.ModelProto, OnnxReport]:
    from ..runtime.check import CheckFailed, check_onnx, reference_outputs

    t0 = time.monotonic()
    report = OnnxReport(nodes=len(model.graph.node))
    if shapes is None and inputs:
        shapes = {k: list(np.shape(v)) for k, v in inputs.items()}
    if fix_shapes:
        model = bind_inputs(model, make_binding(model, shapes))
        del model.graph.value_info[:]
    users_model = model
    model, report.expanded = expand_fused(model)  # ONNX Runtime's fused nodes searchable as their decomposition
    with phase("shape reads", into=report.phases, label="prepare"):
        model, moved = rewire_shape_reads(model)  # kept only where a rewritten region needs it
    first = make_binding(model, shapes)
    # the first candidate second binding is taken on trust: the captures run the model there anyway (a model with
    # no region to capture is run there on its own); where it does not run, the next candidate that does is taken
    second = second_bindings(first, model)[0] if first.dims else None
    while True:
        with phase("preparing", into=report.phases, label="prepare"):
            prep = prepare(model, shapes, fold=fold, second=second)
        with phase("partitioning", into=report.phases, label="partition"):
            part = partition(prep, speculative=prep.symbolic)
        with phase("region models", into=report.phases, label="partition"):
            rms = [rm for rm in (region_model(prep, r) for r in part.regions) if rm is not None]
        captures, runs = None, True
        if rms:
            with phase("captures", into=report.phases, label="captures"):
                captures, failed = _captures(model, prep, rms, inputs, seed, threads)
            runs = failed != 1  # at the second binding
        elif second is not None:
            with phase("second binding", into=report.phases, label="prepare"):
                runs = _runs_at(model, second, inputs, seed, threads)
        if runs:
            break
        with phase("second binding", into=report.phases, label="prepare"):
            second = _pick_second(model, first, inputs, seed, threads, after=second)
        if second is None:
            report.decision = ("original: the model does not run at any second value of its symbolic dims "
                               f"({', '.join(first.dims)}), so no rewrite could be checked for them")
            report.nodes, report.seconds = len(model.graph.node), time.monotonic() - t0
            return users_model, report
    report.folding = prep.folding_used
    report.bindings = [f.binding.dims for f in prep.folded]
    report.searchable = part.num_searchable
    report.not_searched = dict(Counter(part.reasons.values()))
    sym_types = _sym_types(model)
    result = model
    if rms:
        if captures is None:
            report.decision = ("original: the model does not run on random inputs, so no rewrite could be checked; "
                               f"{INPUTS_HINT}")
        else:
            search = _RegionSearch(prep, sym_types, settings or {}, report, rtol, atol, strict, standard_ops,
                                   keep_out=weights.has_references(model))
            try:
                with phase("region search", into=report.phases, label="search"):
                    replacements = search.run(rms, captures)
                    retry = [r for r in report.regions if r.accepted is None and r.rules_applied
                             and set(r.region.nodes) & part.speculative]
                    if retry:  # again without the reshapes the search was to remove, where it did not
                        replacements += _retry(model, prep, part, retry, search, inputs, seed)
            finally:
                report.measure_seconds = getattr(search.cost, "measure_seconds", 0.0)
                search.close()
            if replacements:
                with phase("splicing", into=report.phases, label="splice"):
                    result = restore_shape_reads(splice(model, replacements), moved)
    check_feeds = [feeds_at(model, f.binding, inputs, seed + 1) for f in prep.folded]
    if not standard_ops:
        result = fuse_embed_positions(result)[0]  # positions sliced to the run-time length
    with phase("padding masks", into=report.phases, label="splice"):  # attention biases that are a 2-D mask
        result = fuse_padding_masks(result, check_feeds, seed, threads)[0]
    folded_only = None  # the user's model with only the folding: what onnxsim gives, the bar a rewrite must pass
    if prep.folding_used and not report.decision:  # never behind onnxsim: binding-independent values folded
        with phase("folding", into=report.phases):
            consts = binding_independent_constants(prep)
            if result is not model and time_check:  # regions were rewritten: the guard also times the folding alone
                folded_only, n = fold_into(users_model, consts)
                folded_only = folded_only if n else None
            folded, report.folded_nodes = fold_into(result if result is not model else users_model, consts)
        if report.folded_nodes:
            result = folded
    wants = None  # the user's model's outputs on check_feeds: computed once, compared with every candidate
    sessions = _Sessions(threads)  # the whole models' sessions: made once for the checks and the guard
    if result is not model and check:
        try:
            with phase("checking", into=report.phases, label="checks"):
                wants = reference_outputs(sessions(users_model, "the original model"), check_feeds)
                check_onnx(users_model, sessions(result, "the optimized model", CheckFailed), check_feeds,
                           rtol=rtol, atol=atol, wants=wants)
                if folded_only is not None:
                    check_onnx(users_model, sessions(folded_only, "the folded model", CheckFailed), check_feeds,
                               rtol=rtol, atol=atol, wants=wants)
        except CheckFailed as e:
            if strict:
                raise
            log.warning("the spliced model failed the check (%s): keeping the original", e)
            report.decision = f"original: the optimized model failed the check ({e})"
            result = model
    if time_check and not report.decision:
        # the equivalent models a user could otherwise run, timed with the result: the fastest is written
        others = [("folded", folded_only)] if folded_only is not None else []
        with phase("candidates", into=report.phases):
            sim = _onnxsim_output(users_model, check_feeds, rtol, atol, threads, wants)
            peers = [] if standard_ops or not peer_starts else \
                [(name, make(users_model, check_feeds, rtol, atol, threads, wants)) for name, make in PEER_STARTS]
        if sim is not None:
            others.append(("onnxsim", sim))
        ours = _fused_layers(result)
        for name, out in peers:  # a transformer: a peer's fusions, never ahead of what is written
            if out is None:
                continue
            others.append((name, out))
            if _fused_layers(out) <= ours:  # the search found every layer the peer fused: nothing to start from
                log.info("%s fused no layer the search did not: not searched again", name)
                continue
            with phase(f"search from {name}'s output", into=report.phases, label="peer start"):
                again = _search_again(out, name, users_model, settings, shapes, fold, check_feeds, threads, rtol,
                                      atol, seed, inputs, wants)
            if again is not None:  # the search from where the peer ended: it finds more from its forms
                others.append((f"{name}+search", again))
        if result is not model or others:
            chosen = _guard(report, users_model, result if result is not model else None, others,
                            feeds_at(model, prep.first.binding, inputs, seed), threads, time_cap, sessions)
            result = model if chosen is None else chosen
    if result is model or result is users_model:
        result = users_model
        if not report.decision:
            report.decision = "original: no rewrite was found"
    elif not report.decision:
        report.decision = f"optimized: {len(report.accepted)} region(s) rewritten" + \
            (f", {report.folded_nodes} node(s) folded into constants" if report.folded_nodes else "")
    report.fused = fused_census(result)
    report.seconds = time.monotonic() - t0
    return result, report


def _fused_layers(model: onnx.ModelProto) -> int:
    """How many attentions, layer norms and GELUs the model runs as fused operators (`fused_census`)."""
    return sum(done for done, _ in fused_census(model).values())


def _search_again(start: onnx.ModelProto, name: str, users_model: onnx.ModelProto, settings: Any,
                  shapes: Optional[Mapping[str, Sequence[int]]], fold: bool, feeds: Sequence[dict], threads: int,
                  rtol: float, atol: float, seed: int, inputs: Optional[Mapping[str, np.ndarray]],
                  wants: Optional[list]) -> Optional[onnx.ModelProto]:
    """The search run on a peer's output (its fused nodes expanded, searched, fused again where that pays), without
    its own timing; the result if it rewrote something and equals the user's model, else None."""
    from ..runtime.check import check_onnx

    try:
        out, rep = _optimize(start, settings, shapes, False, fold, True, False, 0.0, threads, rtol, atol, seed,
                             False, inputs, False)
        if out is start or not rep.accepted:
            return None
        check_onnx(users_model, out, feeds, rtol=rtol, atol=atol, threads=threads, wants=wants)
    except Exception as e:  # a failure or a difference: it is just not a candidate
        not_a_candidate(f"the search from {name}'s output", e)
        return None
    return out


def _onnxsim_output(model: onnx.ModelProto, feeds: Sequence[dict], rtol: float, atol: float, threads: int = 1,
                    wants: Optional[list] = None) -> Optional[onnx.ModelProto]:
    """onnxsim's own output for the user's model (what a user would otherwise run), if it differs from the model and
    equals it at every binding checked; None where onnxsim fails, changes nothing, or the model's weights are kept
    out of it (a big model: onnxsim would hold them all once more)."""
    from ..quiet import quiet

    if weights.has_references(model):
        return None

    def run() -> Optional[onnx.ModelProto]:
        with phase("onnxsim"), quiet():
            out, ok = simplify(copy.deepcopy(model))
        return out if ok and out.graph.SerializeToString() != model.graph.SerializeToString() else None

    return checked_output("onnxsim's output", run, model, feeds, rtol, atol, threads, wants)


def _guard(report: OnnxReport, original: onnx.ModelProto, result: Optional[onnx.ModelProto],
           others: Sequence[tuple], feeds: dict, threads: int, time_cap: float,
           sessions: Optional["_Sessions"] = None) -> Optional[onnx.ModelProto]:
    """The never-slower guard: time the original, the result (None: no rewrite) and the other equivalent models
    (`others`: (name, model), e.g. the folding alone and onnxsim's output) in one alternating run; return the
    fastest of them if it is faster than the original (or the most fused one level with it, `_most_fused_level`);
    where none is, the one level with the original that runs more layers fused (`_more_fused_level_with_original`),
    else None (the original)."""
    from ..runtime.timing import compare_onnx_models

    if result is not None:
        report.predicted_saving_ms = sum(r.cost_before - r.cost_after for r in report.accepted)
    models = [original] + ([result] if result is not None else []) + [m for _, m in others]
    names = ["original"] + (["optimized"] if result is not None else []) + [n for n, _ in others]
    with phase("timing", into=report.phases, label="guard"):
        timed = [sessions.get(m) for m in models] if sessions is not None else list(models)
        if sum(_model_bytes(m) for m in models) <= GUARD_SESSION_BYTES:
            timed = [[first] + [m] * (GUARD_SESSIONS - 1) for first, m in zip(timed, models)]
        t = report.timing = compare_onnx_models(timed, feeds, threads, time_cap, names,
                                                min_gain=GUARD_MIN_GAIN, race=True, floor_rounds=GUARD_FLOOR_ROUNDS,
                                                floor_cap=GUARD_FLOOR_CAP * time_cap)
    fastest = min(range(1, len(models)), key=lambda i: t.latencies[i].median)
    vs = t.ratios[fastest - 1]
    tie = None
    if vs.verdict != "faster":
        tie = _more_fused_level_with_original(models, t)
        if tie is None:
            what = "the optimized model" if names[fastest] == "optimized" else f"the {names[fastest]} model"
            report.decision = f"original: {what} is not faster in ONNX Runtime ({vs.verdict}, ratio {vs.ratio:.3f})"
            return None
    best = _most_fused_level(models, t, fastest) if tie is None else tie
    vs = t.ratios[best - 1]
    name = names[best]
    why = f"{name}/original = {vs.ratio:.3f} [{vs.ci[0]:.3f}, {vs.ci[1]:.3f}]"
    level = "" if tie is None else (f"level with the original in ONNX Runtime ({why}), "
                                    f"{_fused_layers(models[best]) - _fused_layers(original)} more layer(s) fused")
    if best == 1 and result is not None:
        if level:
            report.decision = f"optimized: {len(report.accepted)} region(s) rewritten, {level}"
        return result
    if result is not None:
        for r in report.accepted:
            r.accepted, r.note = None, (f"rewritten, but the {name} model was written (level with the original, "
                                        f"the most fused)" if level else f"rewritten, but the whole was not faster "
                                        f"than the {name} model")
        why += f", optimized/{name} = {t.between(best, 1).ratio:.3f}"
    if level:
        report.decision = f"{name}: {level}"
    elif name == "folded":
        report.decision = f"optimized: {report.folded_nodes} node(s) folded into constants, no region ({why})"
    elif best != fastest:
        report.decision = (f"{name}: the most fused of the models faster than the original and level with the "
                           f"fastest, {names[fastest]} ({why})")
    else:
        report.decision = f"{name}: its output was the fastest equivalent model timed ({why})"
    return models[best]


def _model_bytes(model: onnx.ModelProto) -> int:
    """The model's serialized bytes with those of the weights it keeps out of it (`onnx_io.weights`)."""
    return model.ByteSize() + sum(weights.nbytes(t) for t in weights.references(model))


def _most_fused_level(models: Sequence[onnx.ModelProto], t: Any, fastest: int) -> int:
    """Of the candidates faster than the original (index 0), not shown slower than the fastest one and with a median
    within `GUARD_MIN_GAIN` of its, the one that runs the most layers as fused operators (`fused_census`; ties: the
    faster). Within the noise the fused graph is the one to keep: it is as fast here, and the fused kernels' lead
    grows with the sequence."""
    bound = t.latencies[fastest].median * (1 + GUARD_MIN_GAIN)
    level = [i for i in range(1, len(models)) if i not in t.dropped and t.ratios[i - 1].verdict == "faster"
             and (i == fastest or (t.latencies[i].median <= bound and t.between(fastest, i).verdict != "slower"))]
    return _most_fused(models, t, level)


def _most_fused(models: Sequence[onnx.ModelProto], t: Any, level: Sequence[int]) -> Optional[int]:
    """Of the candidates `level`, the one that runs the most layers as fused operators (ties: the faster); None if
    there is none."""
    return max(level, key=lambda i: (_fused_layers(models[i]), -t.latencies[i].median)) if level else None


def _more_fused_level_with_original(models: Sequence[onnx.ModelProto], t: Any) -> Optional[int]:
    """Where no candidate is faster than the original (index 0): of those level with it (its interval holds 1, its
    median within `GUARD_MIN_GAIN`) that run more layers as fused operators than it (`fused_census`), the most fused
    (ties: the faster); None if there is none. Fusion's gain at a wide prefill is inside the timing's noise (the
    layers' products and the LM head dominate) and grows with the sequence: the fused graph is not slower here and
    is what ONNX Runtime's own optimizer writes."""
    base = _fused_layers(models[0])
    return _most_fused(models, t, [i for i in range(1, len(models)) if i not in t.dropped
                                   and t.ratios[i - 1].verdict == "not different"
                                   and t.ratios[i - 1].ratio <= 1 + GUARD_MIN_GAIN
                                   and _fused_layers(models[i]) > base])


class _Sessions:
    """ONNX Runtime sessions of the whole models, each made once with the guard's options (`threads`, no
    spinning) and used by the checks and the guard alike."""

    def __init__(self, threads: int):
        self.threads, self.made = threads, {}

    def __call__(self, model: onnx.ModelProto, role: str, failure: Optional[type] = None) -> Any:
        """The model's session (made now if new; `failure` as `runtime.check.session`)."""
        from ..runtime.check import CheckError, session

        key = id(model)
        if key not in self.made:
            self.made[key] = (model, session(model, self.threads, role, spin=False, failure=failure or CheckError))
        return self.made[key][1]

    def get(self, model: onnx.ModelProto) -> Any:
        """The model's session if one was made, else the model (the timing makes its own)."""
        hit = self.made.get(id(model))
        return hit[1] if hit is not None else model


def _target(target: Any) -> Any:
    """A tvm Target for 'llvm', 'cuda', a target dict or a Target (None stays None)."""
    if target is None or not isinstance(target, (str, dict)):
        return target
    import tvm

    spec = {"kind": target} if isinstance(target, str) else dict(target)
    if spec.get("kind") == "cuda":
        from ..cost.config import DEFAULT_CUDA_ARCH

        spec.setdefault("arch", DEFAULT_CUDA_ARCH)
        return tvm.target.Target(spec, host={"kind": "llvm"})
    return tvm.target.Target(spec)


def _sym_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    m = infer(model)
    g = m.graph
    return {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}


def _captures(model: onnx.ModelProto, prep: Prepared, rms: list, inputs: Optional[Mapping[str, np.ndarray]],
              seed: int, threads: int = 1) -> tuple[Optional[list[Capture]], int]:
    """The model run at every binding with the regions' boundary tensors read out (one session: the model keeps
    its symbolic dims), and -1; (None, the index of the binding) where it does not run."""
    from ..runtime.check import CheckError, CheckFailed, run_session, session

    names = [x for rm in rms for x in list(rm.inputs) + list(rm.outputs)]
    types = {k: v for f in prep.folded for k, v in f.types.items()}
    sess = None
    out = []
    for i, f in enumerate(prep.folded):
        feeds = feeds_at(model, f.binding, inputs, seed)
        try:
            sess = sess or session(_with_outputs(model, names, types), threads, "the model")
            out.append(Capture(feeds, run_session(sess, feeds, "the model")))
        except (CheckFailed, CheckError) as e:
            log.log(logging.WARNING if i == 0 else logging.INFO, "the original model does not run at %s (%s)%s",
                    f.binding.label(), e, f": no region can be checked; {INPUTS_HINT}" if i == 0 else "")
            return None, i
    return out, -1


def _retry(model: onnx.ModelProto, prep: Prepared, part: Partition, failed: list, search: "_RegionSearch",
           inputs: Optional[Mapping[str, np.ndarray]], seed: int) -> list:
    """Search the nodes of regions that failed with speculative reshapes in them again, without those."""
    nodes = {i for r in failed for i in r.region.nodes}
    log.info("%d region(s) with reshapes the search did not remove: searched again without them", len(failed))
    again = partition(prep, speculative=False, index_base=len(part.regions))
    rms = [rm for rm in (region_model(prep, r) for r in again.regions if set(r.nodes) <= nodes) if rm is not None]
    if not rms:
        return []
    captures, _ = _captures(model, prep, rms, inputs, seed)
    return search.run(rms, captures) if captures is not None else []


class _RegionSearch:
    """Searches regions with one rule set and one cost model; `run` returns the accepted replacements."""

    def __init__(self, prep: Prepared, sym_types: dict, settings: Any, report: OnnxReport, rtol: float,
                 atol: float, strict: bool, standard_ops: bool = False, keep_out: bool = False):
        from ..relay_pass import Settings

        s = settings if isinstance(settings, Settings) else \
            Settings.resolve(settings.get("config"), overrides={k: v for k, v in settings.items() if k != "config"})
        self.rules = s.resolve_rules()
        self.cost, self.owned = s.resolve_cost(_target(s.target), "onnx")
        self.search = {"settings": s}  # resolved once: the regions' passes read this object, not the files again
        self.search["standard_ops"] = standard_ops
        self.sym_types, self.report, self.rtol, self.atol, self.strict = sym_types, report, rtol, atol, strict
        self.keep_out = keep_out

    def close(self) -> None:
        if self.owned:
            self.cost.close()

    def run(self, rms: list, captures: list[Capture]) -> list:
        replacements = []
        with Progress(len(rms), "searching regions", unit="regions") as bar:
            for rm in rms:
                bar.update(note=f"region {rm.region.index}, {len(rm.region.nodes)} nodes")
                res = RegionResult(rm.region)
                self.report.regions.append(res)
                optimized = self._search_one(rm, res)
                if optimized is None:
                    continue
                _settle_region(res, optimized, rm.inputs, rm.outputs, captures, self.sym_types, self.rtol,
                               self.atol, self.strict, self.keep_out)
                if res.accepted is None:
                    log.info("region %d: %s", rm.region.index, res.note)
                    continue
                replacements.append((rm.region.nodes, res.accepted, PREFIX.format(rm.region.index)))
        return replacements

    def _search_one(self, rm: Any, res: RegionResult) -> Optional[onnx.ModelProto]:
        t = time.monotonic()
        try:
            optimized, pass_report = search_region(rm, dict(self.search, rules=self.rules, cost=self.cost))
        except Exception as e:  # an import or export failure only costs this region's rewrite
            if is_interrupt(e):  # TVM's text for a Ctrl-C inside one of our callbacks
                raise KeyboardInterrupt from None
            res.note = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            log.info("region %d (%d nodes) kept as is: %s", rm.region.index, len(rm.region.nodes), res.note)
            return None
        finally:
            res.seconds = time.monotonic() - t
        tot = pass_report.total
        if tot is not None:
            res.cost_before, res.cost_after = tot.cost_before, tot.cost_after
            res.ops_before, res.ops_after = tot.ops_before, tot.ops_after
            res.rules_applied = dict(tot.rules_applied)
            res.expanded, res.stopped_by = tot.expanded, tot.stopped_by
        if optimized is None:
            res.note = "no rewrite found"
        return optimized
