"""A TensorGraph as an egglog e-graph, and equality saturation over the rules' pattern rewrites.

The e-graph is egglog's (`egglog.bindings`, the egg authors' engine): hash-consing, union-find, congruence closure,
rebuilding and e-matching (semi-naive, so each round finds only the matches new facts make). This module declares
the sorts and constructors, inserts a graph, turns each rule's source into an egglog rule that records its matches,
and runs rounds of: egglog matches -> each new match is checked and its target built in Python
(`PatternRewrite.apply`, the rules' own code) -> the new e-nodes and unions go back into egglog. That split is
egg's `Applier` with an `Analysis`, as Tensat uses them: the conditions that need shapes run on the classes' types.

Encoding
* Sorts `T` (a tensor) and `Tup` (the outputs of a multi-output operator; `(Get tup i)` is output i).
* An operator node is `(O_<op>_<arity> child... attrs)`: children are classes, `attrs` an i64 naming the node's
  attribute dict in a Python table (so equal attributes are one value and congruence works).
* Graph inputs `(Input id)` and weights `(Weight id)` carry the id of their node in the graph's store; a rule's
  constant becomes a weight there too.
* Every class Python creates holds a `(Ref k)` e-node: `k` names the class in the commands Python sends back
  (the smallest `k` of a class is its canonical name in a round). Its type is kept in Python under `k`: all the
  e-nodes of a class have one type (a rule's output is checked to keep the type; congruent nodes have equal
  types), so the type is a property of the class.
* `(IsW c)`: the class holds a weight-only term (egglog derives it: weights are, and so is an operator over
  weight-only classes); `(Rank c)`: the tensor's rank (set when some rule asks for ranks). Both prefilter
  queries: a rule's top-level `weight(t)` and `ndim(t) == k` conjuncts are atoms of its egglog query.
* Python sends e-nodes and unions as egglog command objects (`egglog.bindings`), one rule without a query per
  batch (egglog runs a batch of actions as one rule faster than as separate commands, and parsing program text
  copies the whole text into every span of it, which is quadratic).
* Rule i's query records each match as a row of relation `M<i>`: the classes of its variables and pattern-node
  outputs and each pattern node's attribute id. A commutative pattern node gives one query per argument order.

Tensat's remedies: multi-pattern rules (several source roots) run only in the first `multi_iters` rounds; cycles
(a class that reaches itself, e.g. after `split(concat(a, b)) -> a`) are allowed in the e-graph and kept out of
the extracted graph by the extraction (`extract.py`).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from ...graph import TensorGraph
from ...graph.tensor_graph import NodeStore, TensorRef, from_weights, weight_array
from .config import EGraphConfig, StopReason

log = logging.getLogger(__name__)
if logging.getLogger("egglog").level == logging.NOTSET:  # egglog logs every command it runs at INFO
    logging.getLogger("egglog").setLevel(logging.WARNING)

_PRELUDE = """
(sort T)
(sort Tup)
(constructor Ref (i64) T)
(constructor TRef (i64) Tup)
(constructor Input (i64) T)
(constructor Weight (i64) T)
(constructor Get (Tup i64) T)
(relation IsW (T))
(relation IsWT (Tup))
(function Rank (T) i64 :merge (min old new))
(ruleset rw)
(ruleset rwmulti)
(ruleset ana)
(rule ((= e (Get t i)) (IsWT t)) ((IsW e)) :ruleset ana)
(rule ((= e (Weight i))) ((IsW e)) :ruleset ana)
"""
LEAF_CTORS = ("Input", "Weight")
_PARSED: dict = {}  # declaration text -> its parsed egglog commands
NOT_ENODES = ("Ref", "TRef")  # class names, not operators


@dataclass(frozen=True)
class Ctor:
    """An egglog constructor for the nodes of one operator with one arity."""

    name: str
    op: str
    arity: int
    tup: bool  # outputs through a tuple


@dataclass
class EGraphStats:
    """What saturation did."""

    iterations: int = 0
    enodes: int = 0
    eclasses: int = 0
    stop: StopReason = StopReason.SATURATED
    seconds: float = 0.0
    matches: int = 0  # matches checked in Python
    fired: Counter = field(default_factory=Counter)  # rule -> applications that added an e-node or a union


class Snapshot:
    """One frozen state of the e-graph: classes (canonical `k`), weight-only classes, rule match rows, e-nodes."""

    def __init__(self, eg: Any, frozen: Any):
        v2i = eg.value_to_i64
        self.frozen = frozen
        self.v2i = v2i
        funcs = frozen.functions
        self.canon: dict = {}  # class Value -> its smallest k
        self.cls_of: dict[int, Any] = {}  # k -> class Value
        for name in ("Ref", "TRef"):
            for row in funcs[name].rows:
                k, c = v2i(row.inputs[0]), row.output
                self.cls_of[k] = c
                have = self.canon.get(c)
                if have is None or k < have:
                    self.canon[c] = k
        self.wo = {row.inputs[0] for row in funcs["IsW"].rows} | {row.inputs[0] for row in funcs["IsWT"].rows}

    def k(self, k: int) -> int:
        """The canonical name of the class named `k` (k itself if it is new since the snapshot)."""
        c = self.cls_of.get(k)
        return k if c is None else self.canon[c]

    def same(self, a: int, b: int) -> bool:
        ca, cb = self.cls_of.get(a), self.cls_of.get(b)
        return ca is not None and ca == cb

    def is_wo(self, k: int) -> bool:
        c = self.cls_of.get(k)
        return c is not None and c in self.wo


class _RuleQuery:
    """A pattern rewrite compiled to egglog rules that fill relation `rel`, and how to read a row."""

    def __init__(self, idx: int, rw: Any, ctor_of: Any):
        self.rw = rw
        self.rel = f"M{idx}"
        cols: list[str] = []  # egglog variable per column
        sorts: list[str] = []
        var_col: dict[str, int] = {}
        for v in rw.variables:
            var_col[v] = len(cols)
            cols.append(f"v_{v}")
            sorts.append("T")
        self.out_col: dict[tuple, int] = {}
        self.tup_col: dict[int, int] = {}
        self.attr_col: dict[int, int] = {}
        self.ctors = []
        for i, p in enumerate(rw.nodes):
            ctor = ctor_of(p.op, len(p.args), p.multi_output)
            self.ctors.append(ctor)
            if ctor.tup:
                self.tup_col[i] = len(cols)
                cols.append(f"t{i}")
                sorts.append("Tup")
            for o in (p.used_outputs if ctor.tup else (0,)):
                self.out_col[(i, o)] = len(cols)
                cols.append(f"n{i}_{o}")
                sorts.append("T")
            self.attr_col[i] = len(cols)
            cols.append(f"a{i}")
            sorts.append("i64")
        self.var_col = var_col
        self.ncols = len(cols)
        self.decl = f"(relation {self.rel} ({' '.join(sorts)}))"
        self.rules = []
        comm = [i for i, p in enumerate(rw.nodes) if p.commutative and len(p.args) == 2]
        for variant in range(1 << len(comm)):
            swapped = {i for b, i in enumerate(comm) if variant >> b & 1}
            atoms = []
            for i, p in enumerate(rw.nodes):
                args = list(p.args)
                if i in swapped:
                    args.reverse()
                terms = [f"v_{a[1]}" if a[0] == "var" else f"n{a[1]}_{a[2]}" for a in args]
                call = f"({self.ctors[i].name} {' '.join(terms)} a{i})"
                if self.ctors[i].tup:
                    atoms.append(f"(= t{i} {call})")
                    atoms.extend(f"(= n{i}_{o} (Get t{i} {o}))" for o in p.used_outputs)
                else:
                    atoms.append(f"(= n{i}_0 {call})")
            for name in sorted(rw.weight_vars):
                col = var_col.get(name)
                atoms.append(f"(IsW {cols[col] if col is not None else self._named(name)})")
            for name, rank in sorted(rw.ranks.items()):
                atoms.append(f"(= (Rank v_{name}) {rank})")  # Rank is set for every class when a rule has these
            ruleset = "rwmulti" if rw.multi_root else "rw"
            self.rules.append(f"(rule ({' '.join(atoms)}) (({self.rel} {' '.join(cols)})) :ruleset {ruleset} "
                              f":name \"{rw.name}#{variant}\")")

    def _named(self, name: str) -> str:
        ref = self.rw.rule.src_names[name]
        return f"n{ref.node}_{ref.out}"


class TensorEGraph:
    """An e-graph of one TensorGraph under a list of pattern rewrites (`rules.matching.eqsat.PatternRewrite`)."""

    def __init__(self, graph: TensorGraph, rewrites: list, config: Optional[EGraphConfig] = None):
        from egglog import bindings

        self.config = (config or EGraphConfig()).validate()
        self.graph = graph
        self.store = graph.store  # constants the rules make become weights here
        self.scratch = NodeStore()  # placeholders and targets, built over class types
        self.eg = bindings.EGraph()
        self._b = bindings
        self._span = bindings.PanicSpan()
        self._pending: list[str] = [_PRELUDE]
        self.ctors: dict[tuple, Ctor] = {}
        self.multi_ops = {p.op for rw in rewrites for p in rw.nodes if p.multi_output}
        self.attr_table: list[tuple] = []  # id -> (op, attrs dict, opaque node or None)
        self._attr_ids: dict[tuple, int] = {}
        self.types: dict[int, Any] = {}  # k -> TensorType (a T class) or tuple of them (a Tup class)
        self._next_k = 0
        self._ph: dict[tuple, TensorRef] = {}  # (k, weight-only) -> placeholder
        self._ph_k: dict[int, int] = {}  # placeholder node id -> k
        self._scratch_k: dict[int, list] = {}  # scratch node id -> [k of each output] (k of the Tup last)
        self._scratch_wo: dict[int, bool] = {}
        self.origin: dict[tuple, tuple] = {}  # (ctor, child ks, payload) -> (rule, application) that first made it
        self.unions: list[tuple] = []  # ((rule, application), k of the class, the matched e-node computing it)
        self.stats = EGraphStats()
        self._acts: list = []  # egglog actions not sent yet
        self._batches = 0
        self.use_rank = any(rw.ranks for rw in rewrites)
        self.root_ks = self._add_graph(graph)
        self.queries = [_RuleQuery(i, rw, self.ctor) for i, rw in enumerate(rewrites)]
        for q in self.queries:
            self._pending.append(q.decl)
            self._pending.extend(q.rules)
        self._seen: list[set] = [set() for _ in self.queries]
        self._flush()

    # ------------------------------------------------------------------ egglog program
    def _flush(self) -> None:
        """Send the pending declarations (program text, parsed one at a time: each is short) and the pending
        actions (one query-less rule, run once)."""
        if self._pending:
            cmds = [c for text in self._pending for c in self._parse(text)]
            self._pending = []
            self.eg.run_program(*cmds)
        if self._acts:
            B, S = self._b, self._span
            name = f"batch{self._batches}"
            self._batches += 1
            acts, self._acts = self._acts, []
            self.eg.run_program(B.AddRuleset(S, name), B.RuleCommand(B.Rule(S, acts, [], name, name)),
                                B.RunSchedule(B.Run(S, B.RunConfig(name, None))))

    def _parse(self, text: str) -> list:
        """egglog commands of a declaration, parsed once per process (searches of many regions declare the same
        sorts, constructors and rule queries)."""
        cmds = _PARSED.get(text)
        if cmds is None:
            cmds = self.eg.parse_program(text)
            if len(_PARSED) > 20000:
                _PARSED.clear()
            _PARSED[text] = cmds
        return cmds

    def _ref(self, k: int, sort: str = "Ref") -> Any:
        B, S = self._b, self._span
        return B.Call(S, sort, [B.Lit(S, B.Int(k))])

    def _union(self, a: Any, b: Any) -> None:
        self._acts.append(self._b.Union(self._span, a, b))

    def ctor(self, op: str, arity: int, tup: bool) -> Ctor:
        """The constructor for `op` with `arity` children (declared on first use)."""
        tup = tup or op in self.multi_ops
        key = (op, arity, tup)
        c = self.ctors.get(key)
        if c is None:
            c = self.ctors[key] = Ctor(f"O_{op}_{arity}{'_t' if tup and op not in self.multi_ops else ''}", op,
                                       arity, tup)
            out = "Tup" if tup else "T"
            self._pending.append(f"(constructor {c.name} ({'T ' * arity}i64) {out})")
            if arity and op != "opaque":  # weight-only propagates through every operator but opaque ones
                xs = " ".join(f"x{i}" for i in range(arity))
                conds = " ".join(f"(IsW x{i})" for i in range(arity))
                self._pending.append(f"(rule ((= e ({c.name} {xs} a)) {conds}) (({'IsWT' if tup else 'IsW'} e)) "
                                     f":ruleset ana)")
        return c

    def attr_id(self, op: str, attrs: dict, opaque: Any = None) -> int:
        key = (op, ("key", attrs["key"]) if op == "opaque" else tuple(sorted(attrs.items())))
        aid = self._attr_ids.get(key)
        if aid is None:
            aid = self._attr_ids[key] = len(self.attr_table)
            self.attr_table.append((op, dict(attrs), opaque))
        return aid

    def _new_k(self, ty: Any) -> int:
        k = self._next_k
        self._next_k += 1
        self.types[k] = ty
        return k

    def _emit(self, ctor: Ctor, child_ks: list, payload: int, types: tuple, rule: Optional[tuple]) -> list:
        """Queue one e-node (and a `Ref` naming its class) for egglog; returns the ks of its outputs (and of the
        tuple, last, for a multi-output node)."""
        B, S = self._b, self._span
        lit = B.Lit(S, B.Int(payload))
        call = B.Call(S, ctor.name, [self._ref(k) for k in child_ks] + [lit])  # a leaf: just the payload
        if rule is not None:
            self.origin.setdefault((ctor.name, tuple(child_ks), payload), rule)
        if not ctor.tup:
            k = self._new_k(types[0])
            self._union(self._ref(k), call)
            if self.use_rank:
                self._acts.append(B.Set(S, "Rank", [self._ref(k)], B.Lit(S, B.Int(types[0].ndim))))
            return [k]
        kt = self._new_k(tuple(types))
        self._union(self._ref(kt, "TRef"), call)
        ks = []
        for i, ty in enumerate(types):
            k = self._new_k(ty)
            self._union(self._ref(k), B.Call(S, "Get", [self._ref(kt, "TRef"), B.Lit(S, B.Int(i))]))
            if self.use_rank:
                self._acts.append(B.Set(S, "Rank", [self._ref(k)], B.Lit(S, B.Int(ty.ndim))))
            ks.append(k)
        return ks + [kt]

    def _add_graph(self, graph: TensorGraph) -> list:
        """Insert every node of the graph; returns the ks of its outputs."""
        ks: dict[TensorRef, int] = {}
        for node in graph.topo_order():
            if node.op in ("input", "weight"):
                ctor = Ctor("Input" if node.op == "input" else "Weight", node.op, 0, False)
                out = self._emit(ctor, [], node.id, node.types, None)
            else:
                tup = len(node.types) != 1
                ctor = self.ctor(node.op, len(node.inputs), tup)
                aid = self.attr_id(node.op, node.attrs, node if node.op == "opaque" else None)
                out = self._emit(ctor, [ks[r] for r in node.inputs], aid, node.types, None)
            for i in range(len(node.types)):
                ks[(node.id, i)] = out[i]
        return [ks[r] for r in graph.outputs]

    # ------------------------------------------------------------------ placeholders and targets
    def placeholder(self, k: int, wo: bool) -> TensorRef:
        """A stand-in tensor of class k's type in the scratch store (a weight when the class is weight-only)."""
        key = (k, wo)
        ref = self._ph.get(key)
        if ref is None:
            ty = self.types[k]
            ref = (self.scratch.weight(None, ty, key=f"__w{k}") if wo else self.scratch.input(f"__c{k}", ty))
            self._ph[key] = ref
            self._ph_k[ref[0]] = k
            self._scratch_wo[ref[0]] = wo
        return ref

    def _ensure(self, ref: TensorRef, rule: tuple) -> int:
        """The k of a scratch tensor, sending its node (and the nodes below it) to egglog the first time."""
        nid, out = ref
        if nid in self._ph_k:
            return self._ph_k[nid]
        ks = self._scratch_k.get(nid)
        if ks is None:
            node = self.scratch.nodes[nid]
            if node.op == "weight":  # a constant the target made: a weight of the graph's store
                real = self.store.weight(weight_array(node), node.types[0], key=node.attrs["key"])
                ks = self._emit(Ctor("Weight", "weight", 0, False), [], real[0], node.types, rule)
                self._scratch_wo[nid] = True
            else:
                child = [self._ensure(r, rule) for r in node.inputs]
                wo = from_weights(node, lambda i: self._scratch_wo.get(i, False))
                self._scratch_wo[nid] = wo
                ctor = self.ctor(node.op, len(node.inputs), len(node.types) != 1)
                aid = self.attr_id(node.op, node.attrs)
                ks = self._emit(ctor, child, aid, node.types, rule)
            self._scratch_k[nid] = ks
        return ks[out]

    # ------------------------------------------------------------------ saturation
    def snapshot(self) -> Snapshot:
        return Snapshot(self.eg, self.eg.freeze())

    def saturate(self, deadline: Optional[float] = None) -> EGraphStats:
        """Rounds of matching and applying until nothing changes or a limit is reached."""
        cfg, st = self.config, self.stats
        t0 = time.monotonic()
        end = t0 + cfg.time_limit
        if deadline is not None:
            end = min(end, deadline)
        try:
            while True:
                if st.iterations >= cfg.iter_limit:
                    st.stop = StopReason.ITERATION_LIMIT
                    break
                if time.monotonic() > end:
                    st.stop = StopReason.TIME_LIMIT
                    break
                sched = "(run-schedule (saturate (run ana)) (run rw)" + (
                    " (run rwmulti)" if st.iterations < cfg.multi_iters else "") + ")"
                self.eg.run_program(*self._parse(sched))
                snap = self.snapshot()
                changed = self._apply_round(snap, end)
                st.iterations += 1
                st.enodes = self.count_enodes(snap)
                if not changed:
                    st.stop = StopReason.SATURATED
                    break
                self._flush()
                if st.enodes >= cfg.node_limit:
                    st.stop = StopReason.NODE_LIMIT
                    break
        except KeyboardInterrupt:
            st.stop = StopReason.INTERRUPT
            self._pending, self._acts = [], []
            log.warning("e-graph saturation interrupted: extracting from what it holds")
        self._flush()
        self.eg.run_program(*self._parse("(run-schedule (saturate (run ana)))"))
        st.seconds = time.monotonic() - t0
        return st

    def count_enodes(self, snap: Snapshot) -> int:
        return sum(len(f.rows) for name, f in snap.frozen.functions.items()
                   if name not in NOT_ENODES and (name.startswith("O_") or name in LEAF_CTORS or name == "Get"))

    def _apply_round(self, snap: Snapshot, end: float) -> bool:
        """Check and apply every new match of this round; True if anything was sent to egglog."""
        funcs = snap.frozen.functions
        v2i = snap.v2i
        changed = False
        for qi, q in enumerate(self.queries):
            f = funcs.get(q.rel)
            if f is None or not f.rows:
                continue
            seen = self._seen[qi]
            attr_cols = set(q.attr_col.values())
            for row in f.rows:
                vals = row.inputs
                key = tuple(v2i(v) if j in attr_cols else snap.canon[v] for j, v in enumerate(vals))
                if key in seen:
                    continue
                seen.add(key)
                self.stats.matches += 1
                if self._apply_match(q, key, snap):
                    changed = True
                if time.monotonic() > end:
                    return True  # the rest of this round's matches are left: the time is up
        return changed

    def _apply_match(self, q: _RuleQuery, key: tuple, snap: Snapshot) -> bool:
        rw = q.rw
        # each pattern node's e-node: (constructor, child ks, attribute id); they must be distinct nodes
        ids = []
        for i, p in enumerate(rw.nodes):
            child = tuple(key[q.var_col[a[1]]] if a[0] == "var" else key[q.out_col[(a[1], a[2])]] for a in p.args)
            ids.append((q.ctors[i].name, child, key[q.attr_col[i]]))
        if len(set(ids)) != len(ids):
            return False
        if rw.symmetries and any(tuple(ids[s] for s in sig) < tuple(ids) for sig in rw.symmetries):
            return False  # the same match with the pattern's identical branches swapped: applied once, as matched
        for i, p in enumerate(rw.nodes):  # a multi-output node must have exactly the outputs the pattern names
            if q.ctors[i].tup and len(self.types[key[q.tup_col[i]]]) != p.n_outputs:
                return False
        tensors = {v: self.placeholder(key[c], snap.is_wo(key[c])) for v, c in q.var_col.items()}
        outputs = []
        source_enode = {}  # output placeholder -> the matched e-node that computes it
        for i, p in enumerate(rw.nodes):
            n_out = len(self.types[key[q.tup_col[i]]]) if q.ctors[i].tup else 1
            outs = [None] * n_out
            for o in range(n_out):
                col = q.out_col.get((i, o))
                if col is not None:
                    outs[o] = self.placeholder(key[col], snap.is_wo(key[col]))
                    source_enode[outs[o]] = ("Get", (key[q.tup_col[i]],), o) if q.ctors[i].tup else ids[i]
            outputs.append(outs)
        attrs = [self.attr_table[key[q.attr_col[i]]][1] for i in range(len(rw.nodes))]
        mapping = rw.apply(self.scratch, attrs, tensors, outputs)
        if not mapping:
            return False
        did = False
        app = (rw.name, self.stats.matches)
        for old, new in mapping.items():
            k_old = self._ph_k[old[0]]
            k_new = self._ensure(new, app)
            if snap.same(k_old, k_new):
                continue
            self._union(self._ref(k_old), self._ref(k_new))
            self.unions.append((app, k_old, source_enode.get(old)))
            did = True
        if did:
            self.stats.fired[rw.name] += 1
        return did
