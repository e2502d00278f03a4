"""Extraction: pick one e-node per needed class so the graph they form is cheapest, and build that TensorGraph.

* Fixed classes first: a weight-only class is extracted as a weight-only term (fewest nodes; lowering folds it
  to a constant and the cost model gives it no kernel), a class holding a graph input as that input.
* `greedy`: the classic bottom-up fixpoint (egg's extractor): a class's cost is the cheapest e-node's cost plus
  its children classes' costs, improved until nothing improves. Strict improvement over non-negative costs
  never closes a cycle. It optimizes tree cost (a shared class counted once per use), so it is a heuristic for
  the graph's cost, which counts a shared kernel once.
* `ilp`: Tensat's integer program, solved by HiGHS: a binary x_n per e-node, sum of cost_n x_n minimized; each
  root class has a chosen e-node; a chosen e-node's children classes each have one; at most one per class;
  and cycle constraints: a continuous t_c in [0, 1] per class with t_c - t_h - A x_n >= eps - A for every
  e-node n of class c and child class h (A = 2, eps = 1 / (classes + 1)), so the chosen e-nodes are ordered
  and form no cycle. Beyond Tensat, fused pairs (`costs.py`): a variable y <= x_m, x_n (and <= x of the Get
  through which n reads m) per pair with a discount, at most one pair per e-node on either side, adds
  discount * y. The greedy solution is the solver's starting point; on its time limit the best solution found
  is used, and the greedy one if the solver found none better.
"""
from __future__ import annotations

import heapq
import os
import logging
import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...graph import GraphError, TensorGraph
from ...graph.tensor_graph import NodeStore
from ...quiet import quiet
from .costs import ENodeCosts
from .egraph_view import EGraphView

log = logging.getLogger(__name__)

CYCLE_BIG_M = 2.0
LAZY_ROUNDS = 40  # cycle cuts before the ILP is solved again with Tensat's ordering constraints
MIP_GAP = 0.0


class ExtractionError(GraphError):
    """The chosen e-nodes do not form a graph (a cycle, or a type that changed): a bug, never silently kept."""


@dataclass
class Extraction:
    """One extraction: `choice[class] = e-node` for the classes the graph needs; `cost`: the sum of their costs."""

    choice: dict
    cost: float
    method: str  # greedy | ilp | ilp+refine | greedy+refine
    status: str  # greedy: "done"; ilp: HiGHS's model status, or "fallback: ..." when the greedy one was kept
    seconds: float = 0.0
    best: Optional[list] = None  # greedy: each class's tree cost (inf: no finite term)


def fixed_classes(view: EGraphView) -> dict:
    """{class: e-node} for the classes whose choice costs nothing and needs no search: weight-only classes (a
    weight-only term with the fewest nodes) and classes holding a graph input or a weight."""
    size = [math.inf] * view.num_classes
    pick: dict = {}
    for i, n in enumerate(view.enodes):
        if n.kind in ("input", "weight"):
            size[n.cls], pick[n.cls] = 0, i
    # weight-only terms: operators (not opaque) over weight-only classes, grown from the weights to a fixpoint
    cand = [i for i, n in enumerate(view.enodes) if view.wo[n.cls] and n.kind in ("op", "get") and n.op != "opaque"]
    changed = True
    while changed:
        changed = False
        for i in cand:
            n = view.enodes[i]
            if n.cls in pick and size[n.cls] == 0:
                continue
            s = 1 + sum(size[c] for c in set(n.children))
            if s < size[n.cls]:
                size[n.cls], pick[n.cls] = s, i
                changed = True
    return pick


def greedy(view: EGraphView, costs: ENodeCosts, fixed: Optional[dict] = None) -> Extraction:
    """Bottom-up extraction by tree cost (see the module docstring), in Knuth's order (his generalization of
    Dijkstra's algorithm): a class is settled at the cheapest value among e-nodes whose children are all settled,
    so each class is settled once and its choice reads only settled classes (no cycle). An e-node's cost counts its
    discount against the producers already chosen for its inputs."""
    t0 = time.monotonic()
    fixed = fixed_classes(view) if fixed is None else fixed
    best = [math.inf] * view.num_classes
    choice = dict(fixed)
    for c in fixed:
        best[c] = 0.0
    parents: list[list[int]] = [[] for _ in range(view.num_classes)]
    waiting = [0] * len(view.enodes)  # children classes not settled yet
    heap: list = []
    for i, n in enumerate(view.enodes):
        if n.cls in fixed or not math.isfinite(costs.solo[i]):
            waiting[i] = -1
            continue
        kids = set(n.children)
        for c in kids:
            parents[c].append(i)
        waiting[i] = sum(1 for c in kids if c not in fixed)
        if waiting[i] == 0:
            heapq.heappush(heap, (max(costs.effective(view, choice, i), 0.0) + sum(best[c] for c in kids), i))
    settled = set(fixed)
    while heap:
        v, i = heapq.heappop(heap)
        c = view.enodes[i].cls
        if c in settled:
            continue
        settled.add(c)
        best[c], choice[c] = v, i
        for p in parents[c]:
            if waiting[p] > 0:
                waiting[p] -= 1
                if waiting[p] == 0:
                    n = view.enodes[p]
                    heapq.heappush(heap, (max(costs.effective(view, choice, p), 0.0) +
                                          sum(best[h] for h in set(n.children)), p))
    for r in view.roots:
        if not math.isfinite(best[r]):
            raise ExtractionError("the e-graph has no finite-cost term for a graph output")
    needed = reachable(view, choice, view.roots)
    choice = {c: choice[c] for c in needed}
    return Extraction(choice, dag_cost(view, costs, choice), "greedy", "done", time.monotonic() - t0, best)


def reachable(view: EGraphView, choice: dict, roots: list) -> list:
    """The classes the chosen e-nodes reach from the roots, children before parents; ExtractionError on a cycle."""
    kids = view.unique_children
    order: list = []
    state: dict = {}
    for r in roots:
        if state.get(r) == 2:
            continue
        if r not in choice:
            raise ExtractionError(f"class {r} has no chosen e-node")
        state[r] = 1
        stack = [(r, iter(kids[choice[r]]))]
        while stack:
            c, it = stack[-1]
            for h in it:
                s = state.get(h)
                if s is None:
                    if h not in choice:
                        raise ExtractionError(f"class {h} has no chosen e-node")
                    state[h] = 1
                    stack.append((h, iter(kids[choice[h]])))
                    break
                if s == 1:
                    raise ExtractionError(f"the chosen e-nodes form a cycle through class {h}")
            else:
                stack.pop()
                state[c] = 2
                order.append(c)
    return order


def dag_cost(view: EGraphView, costs: ENodeCosts, choice: dict) -> float:
    """The predicted cost of the graph the chosen e-nodes form (each once, with its fused pairs' discounts)."""
    return costs.total(view, choice)


def ilp(view: EGraphView, costs: ENodeCosts, time_limit: float, warm: Extraction,
        fixed: Optional[dict] = None, cycles: str = "lazy") -> Extraction:
    """Tensat's ILP extraction with HiGHS (see the module docstring); `warm` is the start and the fallback.

    `cycles`: "order" adds Tensat's ordering variables and constraints up front; "lazy" solves without them and,
    while the chosen e-nodes contain a cycle, forbids that cycle (the sum of its e-nodes' x <= its length - 1) and
    solves again, falling back to "order" after `LAZY_ROUNDS`. Both give the same optimum: a solution is
    acyclic under either, and the cuts remove only cyclic choices."""
    import highspy

    t0 = time.monotonic()
    fixed = fixed_classes(view) if fixed is None else fixed
    # the classes a choice may need: reachable from the roots through e-nodes of non-fixed classes
    classes: list = []
    seen = set()
    stack = [r for r in view.roots if r not in fixed]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        classes.append(c)
        for i in view.nodes_of[c]:
            if math.isfinite(costs.solo[i]):
                stack.extend(h for h in view.enodes[i].children if h not in fixed and h not in seen)
    if not classes:
        return Extraction(dict(warm.choice), warm.cost, "ilp", "trivial", time.monotonic() - t0)
    col_of_class = {c: k for k, c in enumerate(classes)}
    nodes = [i for c in classes for i in view.nodes_of[c]
             if math.isfinite(costs.solo[i]) and c not in view.enodes[i].children]
    col_of_node = {i: k for k, i in enumerate(nodes)}
    pairs = [(i, m, via, d) for i in nodes for h, m, via, d in costs.pairs[i]
             if m in col_of_node and via in col_of_node]
    nx, nc, npair = len(nodes), len(classes), len(pairs)
    by_class: dict = {c: [] for c in classes}
    for i in nodes:
        by_class[view.enodes[i].cls].append(col_of_node[i])
    eps = 1.0 / (nc + 1)
    order = cycles == "order"
    rows_lo, rows_hi, starts, idx, val = [], [], [], [], []

    def row(lo: float, hi: float, entries: list) -> None:
        starts.append(len(idx))
        for j, a in entries:
            idx.append(j)
            val.append(a)
        rows_lo.append(lo)
        rows_hi.append(hi)

    inf = highspy.kHighsInf
    for r in dict.fromkeys(view.roots):
        if r not in fixed:
            row(1.0, inf, [(j, 1.0) for j in by_class[r]])
    for c in classes:
        if len(by_class[c]) > 1:
            row(-inf, 1.0, [(j, 1.0) for j in by_class[c]])
    for i in nodes:
        n = view.enodes[i]
        xi = col_of_node[i]
        for h in dict.fromkeys(n.children):
            if h in fixed:
                continue
            row(-inf, 0.0, [(xi, 1.0)] + [(j, -1.0) for j in by_class[h]])
            if order:  # t_c - t_h - A x_n >= eps - A
                row(eps - CYCLE_BIG_M, inf, [(nx + col_of_class[n.cls], 1.0), (nx + col_of_class[h], -1.0),
                                             (xi, -CYCLE_BIG_M)])
    ycol = nx + nc  # pair variables after the classes' order variables
    as_producer: dict = {}
    as_consumer: dict = {}
    for k, (i, m, via, _) in enumerate(pairs):
        y = ycol + k
        for j in {i, m, via}:
            row(-inf, 0.0, [(y, 1.0), (col_of_node[j], -1.0)])
        as_producer.setdefault(m, []).append(y)
        as_consumer.setdefault(i, []).append(y)
    for ys in list(as_producer.values()) + list(as_consumer.values()):
        if len(ys) > 1:
            row(-inf, 1.0, [(y, 1.0) for y in ys])
    with quiet():  # the first solver of a process prints HiGHS's banner on stdout
        h = highspy.Highs()
    h.setOptionValue("output_flag", os.environ.get("TASO_HIGHS_LOG") == "1")
    h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
    h.setOptionValue("mip_rel_gap", MIP_GAP)
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("threads", 1)
    ncol = nx + nc + npair
    lp = highspy.HighsLp()
    lp.num_col_ = ncol
    lp.num_row_ = len(rows_lo)
    lp.col_cost_ = np.array([costs.solo[i] for i in nodes] + [0.0] * nc + [d for _, _, _, d in pairs],
                            dtype=np.double)
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = np.ones(ncol)
    lp.row_lower_ = np.array(rows_lo, dtype=np.double)
    lp.row_upper_ = np.array(rows_hi, dtype=np.double)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(starts + [len(idx)], dtype=np.int32)
    lp.a_matrix_.index_ = np.array(idx, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(val, dtype=np.double)
    lp.a_matrix_.num_col_ = ncol
    lp.a_matrix_.num_row_ = len(rows_lo)
    lp.integrality_ = ([highspy.HighsVarType.kInteger] * nx + [highspy.HighsVarType.kContinuous] * nc +
                       [highspy.HighsVarType.kInteger] * npair)
    h.passModel(lp)
    start = _warm_start(view, warm, nodes, col_of_node, classes, col_of_class, pairs)
    end = t0 + time_limit
    rounds = 0
    while True:
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = start
            sol.value_valid = True
            h.setSolution(sol)
        h.setOptionValue("time_limit", float(max(end - time.monotonic(), 0.01)))
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        values = list(h.getSolution().col_value) if info.primal_solution_status == 2 else None  # 2: feasible
        if values is None:
            return Extraction(dict(warm.choice), warm.cost, "ilp", f"fallback: greedy ({status}, no solution)",
                              time.monotonic() - t0)
        choice = dict(fixed)
        for i in nodes:
            if values[col_of_node[i]] > 0.5:
                choice.setdefault(view.enodes[i].cls, i)
        if order:
            break
        cycle = _chosen_cycle(view, choice)
        if cycle is None:
            break
        rounds += 1
        if rounds > LAZY_ROUNDS or time.monotonic() > end:
            return ilp(view, costs, max(end - time.monotonic(), 0.01), warm, fixed, "order")
        cut = sorted({col_of_node[choice[c]] for c in cycle})
        h.addRow(-inf, float(len(cut) - 1), len(cut), np.array(cut, dtype=np.int32), np.ones(len(cut)))
    if rounds:
        status += f" ({rounds} cycle cuts)"
    try:
        needed = reachable(view, choice, view.roots)
    except ExtractionError as e:  # cannot happen with the cycle constraints; kept as a guard
        log.warning("ILP extraction unusable (%s): keeping the greedy one", e)
        return Extraction(dict(warm.choice), warm.cost, "ilp", f"fallback: greedy ({e})", time.monotonic() - t0)
    choice = {c: choice[c] for c in needed}
    return Extraction(choice, dag_cost(view, costs, choice), "ilp", status, time.monotonic() - t0)


def _chosen_cycle(view: EGraphView, choice: dict) -> Optional[list]:
    """The classes of a cycle among the chosen e-nodes (all of them, reachable from the roots or not), or None."""
    kids = view.unique_children
    state: dict = {}
    for r in choice:
        if r in state:
            continue
        state[r] = 1
        path = [r]
        stack = [iter(kids[choice[r]])]
        while stack:
            for h in stack[-1]:
                if h not in choice:
                    continue
                s = state.get(h)
                if s is None:
                    state[h] = 1
                    path.append(h)
                    stack.append(iter(kids[choice[h]]))
                    break
                if s == 1:
                    return path[path.index(h):]
            else:
                stack.pop()
                state[path.pop()] = 2
    return None


def _warm_start(view: EGraphView, warm: Extraction, nodes: list, col_of_node: dict, classes: list,
                col_of_class: dict, pairs: list) -> Optional[list]:
    """The greedy choice as a feasible point of the ILP (t from its topological order), or None."""
    try:
        order = reachable(view, warm.choice, view.roots)
    except ExtractionError:
        return None
    x = [0.0] * (len(nodes) + len(classes) + len(pairs))  # no pair taken: feasible, if not the best
    pos = {c: k for k, c in enumerate(c for c in order if c in col_of_class)}  # children before parents
    n = len(classes) + 1  # consecutive ranks differ by 1 / n = eps
    for c in classes:
        if c in warm.choice and c in pos:
            i = warm.choice[c]
            if i not in col_of_node:
                return None
            x[col_of_node[i]] = 1.0
        x[len(nodes) + col_of_class[c]] = (pos.get(c, 0) + 1) / n
    return x


def materialize(view: EGraphView, choice: dict, store: NodeStore) -> TensorGraph:
    """The TensorGraph the chosen e-nodes form, built in `store` (the original graph's: its inputs and weights are
    its own nodes, so lowering finds their values)."""
    order = reachable(view, choice, view.roots)
    built: dict = {}
    memo = view.built_memo.setdefault(id(store), {})  # (e-node, input tensors) -> its tensors in `store`
    for c in order:
        i = choice[c]
        n = view.enodes[i]
        if n.kind in ("input", "weight"):
            refs = [(n.payload, 0)]
        elif n.kind == "get":
            refs = [built[n.children[0]][n.payload]]
        else:
            ins = tuple(built[h][0] for h in n.children)
            refs = memo.get((i, ins))
            if refs is None:
                op, attrs, opaque = view.teg.attr_table[n.payload]
                node = store.remake(opaque, ins) if op == "opaque" else store.make(op, ins, attrs)
                refs = memo[(i, ins)] = node.outputs
                want = view.types[c]
                have = tuple(store.type(r) for r in refs) if isinstance(want, tuple) else store.type(refs[0])
                if have != want:
                    raise ExtractionError(f"class {c}: extracted {n.op} has type {have}, the class {want}")
        built[c] = refs
    return TensorGraph(store, [built[r][0] for r in view.roots])


REFINE_WINDOW = 0.01  # moves whose predicted cost rises by more than this share of the total are not tried


def refine(view: EGraphView, costs: ENodeCosts, start: Extraction, base: Extraction, cost_fn, store: NodeStore,
           deadline: float, fixed: dict) -> tuple[Extraction, TensorGraph, float, int]:
    """Local search over the extraction under the cost function itself (the partitioned, measured cost that the
    e-node costs approximate), until no move helps or `deadline` (time.monotonic()). A move changes one class's
    e-node (classes it needs that the graph lacks get the e-nodes that add least: `_complete`), or, for an output
    of a tuple (a split after a merge), every class in the graph that holds an output of that tuple: a merge pays
    only when all its outputs are used. Moves whose predicted change is below `REFINE_WINDOW` of the total are
    tried in the order of that change (they are where the prediction may be wrong); one that lowers the cost
    function is kept. Returns (extraction, its graph, its cost, moves kept)."""
    best = base.best
    cur = dict(start.choice)
    graph = materialize(view, cur, store)
    cur_cost = cost_fn(graph)
    accepted = 0
    tried: set = set()
    gets: dict = {}  # tuple class -> [(class, its Get e-node of that tuple)]
    for j, n in enumerate(view.enodes):
        if n.kind == "get":
            gets.setdefault(n.children[0], []).append((n.cls, j))
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        pred_now = dag_cost(view, costs, cur)
        window = REFINE_WINDOW * max(pred_now, 1e-12)
        refs = _refcounts(view, cur)
        eff_memo: dict = {}

        def eff(i: int) -> float:  # an e-node's cost with the discounts the current producers give it
            v = eff_memo.get(i)
            if v is None:
                v = eff_memo[i] = max(costs.effective(view, cur, i), 0.0)
            return v

        moves = []
        for c in list(cur):
            if time.monotonic() > deadline:
                break
            if c in fixed:
                continue
            for i in view.nodes_of[c]:
                if i == cur[c] or not math.isfinite(costs.solo[i]) or c in view.enodes[i].children:
                    continue
                n = view.enodes[i]
                group = ((c, i),)
                if n.kind == "get":
                    group = tuple(sorted({(h, j) for h, j in gets[n.children[0]] if h in cur and cur[h] != j}
                                         | {(c, i)}))
                if group in tried:
                    continue
                if len(group) == 1:
                    d = _delta(view, cur, refs, costs, eff, best, c, i)
                else:
                    trial = _move(view, cur, costs, best, group)
                    d = math.inf if trial is None else dag_cost(view, costs, trial) - pred_now
                if d <= window:
                    moves.append((d, group))
        moves.sort()
        for _, group in moves:
            if time.monotonic() > deadline:
                break
            if any(cur.get(c) == i or c not in cur for c, i in group):
                continue
            tried.add(group)
            trial = _move(view, cur, costs, best, group)
            if trial is None:
                continue
            g = materialize(view, trial, store)
            tc = cost_fn(g)
            if tc < cur_cost * (1 - 1e-9):
                cur, graph, cur_cost = trial, g, tc
                accepted += 1
                improved = True
    ex = Extraction(cur, dag_cost(view, costs, cur), start.method + "+refine", start.status, start.seconds)
    return ex, graph, cur_cost, accepted


def _refcounts(view: EGraphView, choice: dict) -> dict:
    """{class: uses by the chosen e-nodes (and the graph's outputs)} over the classes of `choice`."""
    refs = dict.fromkeys(choice, 0)
    for r in view.roots:
        refs[r] += 1
    for c, i in choice.items():
        for h in set(view.enodes[i].children):
            refs[h] += 1
    return refs


def _delta(view: EGraphView, cur: dict, refs: dict, costs: ENodeCosts, eff, best: list, c: int, i: int) -> float:
    """The predicted change when class c takes e-node i: i and the classes it adds (picked as `_complete` would),
    with their discounts against the producers they would have, less the old e-node and the classes only it
    needed (`eff(e-node)`: their cost now)."""
    added: dict = {}
    stack = [i]
    while stack:
        j = stack.pop()
        for h in set(view.enodes[j].children):
            if h not in cur and h not in added:
                pick, pick_v = None, math.inf
                for k in view.nodes_of[h]:
                    if math.isfinite(costs.solo[k]) and h not in view.enodes[k].children:
                        v = costs.solo[k] + sum(best[x] for x in set(view.enodes[k].children) if x not in cur)
                        if v < pick_v:
                            pick, pick_v = k, v
                if pick is None:
                    return math.inf
                added[h] = pick
                stack.append(pick)
    trial = dict(cur)
    trial.update(added)
    trial[c] = i
    d = max(costs.effective(view, trial, i), 0.0) - eff(cur[c])
    d += sum(max(costs.effective(view, trial, k), 0.0) for k in added.values())
    more: dict = {}  # uses of current classes by the added e-nodes
    for j in [i] + list(added.values()):
        for h in set(view.enodes[j].children):
            if h in cur:
                more[h] = more.get(h, 0) + 1
    less: dict = {}
    stack = [cur[c]]
    while stack:
        j = stack.pop()
        for h in set(view.enodes[j].children):
            n = less[h] = less.get(h, 0) + 1
            if n == refs[h] + more.get(h, 0) and h != c:  # no use left: h leaves the graph
                d -= eff(cur[h])
                stack.append(cur[h])
    return d


def _move(view: EGraphView, cur: dict, costs: ENodeCosts, best: list, group: tuple) -> Optional[dict]:
    """`cur` with each class c of `group` taking its e-node i (new classes they need get e-nodes by
    `_complete`), trimmed to what the roots reach; None when that closes a cycle."""
    trial = dict(cur)
    trial.update(group)
    for _, i in group:
        for h in view.enodes[i].children:
            _complete(view, trial, costs, best, h)
    try:
        order = reachable(view, trial, view.roots)
    except ExtractionError:
        return None
    return {k: trial[k] for k in order}


def _complete(view: EGraphView, choice: dict, costs: ENodeCosts, best: list, c: int) -> None:
    """Give class c, and the classes its pick needs, an e-node where they have none: the one that adds least,
    counting classes already chosen as free (a tree-cost pick would count shared inputs once per use)."""
    stack = [c]
    while stack:
        h = stack.pop()
        if h in choice:
            continue
        pick, pick_v = None, math.inf
        for i in view.nodes_of[h]:
            n = view.enodes[i]
            if not math.isfinite(costs.solo[i]) or h in n.children:
                continue
            v = costs.solo[i] + sum(best[x] for x in set(n.children) if x not in choice)
            if v < pick_v:
                pick, pick_v = i, v
        if pick is None:
            return
        choice[h] = pick
        stack.extend(view.enodes[pick].children)
