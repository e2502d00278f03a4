"""Write a candidate as a rule entry of the YAML rule language (source, target, outputs, where, verify, doc)."""
from __future__ import annotations

import hashlib
from typing import Any, Optional

from .graphs import DimSum
from .heads import HeadText, split_domain, strip_heads

SYMBOLS = "ABCDEFGHJKLMNOPQRTUVWXYZ"
# sizes the bounded proof tries for a symbol, by the pool class it came from (the axiomatic proof is general); an
# embedding is a multiple of the head counts heads.HEAD_COUNTS, and differs from the enumeration's sizes
VERIFY_DIMS = {"N": [1, 2], "B": [1, 2], "K": [1, 3], "I": [1, 3], "H": [3, 4], "C": [1, 2, 3],
               "L": [2, 3], "G": [2, 3], "D": [2, 3], "E": [4, 6]}


def _value(v: Any) -> str:
    if isinstance(v, tuple) and v and all(isinstance(x, DimSum) for x in v):
        return "[" + ", ".join(x.text() for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    return repr(v)


def _call(node, names: dict, attrs: Optional[str] = None) -> str:
    args = [names[a] for a in node.args]
    attrs = [attrs] if attrs is not None else [f"{k}={_value(v)}" for k, v in node.attrs]
    return f"{node.op}({', '.join(args + attrs)})"


def _side(nodes: tuple, prefix: str, fixed: dict, attr_text=None) -> tuple[list, dict]:
    """Lines `name: op(...)` of one side; `fixed` names some node outputs (the source's outputs, in a target);
    `attr_text(j, node, first argument's name)` may give a node's attributes as text (a reshape's shape)."""
    names: dict = {}
    lines = []
    for j, n in enumerate(nodes):
        outs = []
        for o in range(n.n_outputs):
            ref = ("n", j, o)
            names[ref] = fixed.get(ref, f"{prefix}{j}" if n.n_outputs == 1 else f"{prefix}{j}_{o}")
            outs.append(names[ref])
        for a in n.args:
            if a[0] == "i":
                names[a] = a[1]
        text = attr_text(j, n, names[n.args[0]]) if attr_text is not None and n.args else None
        lines.append(f"{', '.join(outs)}: {_call(n, names, text)}")
    return lines, names


def _first_use(c) -> dict:
    """Input names renamed in order of first use in the source (a, b, c, ...): equal rules read equal."""
    order: list = []
    for n in c.src:
        for a in n.args:
            if a[0] == "i" and a[1] not in order:
                order.append(a[1])
    order += [v for v in c.inputs if v not in order]
    return {v: "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else f"v{i}" for i, v in enumerate(order)}


def _renamed(c, ren: dict):
    from .graphs import GNode
    from .pairs import Candidate

    def node(n):
        attrs = tuple((k, tuple(DimSum((ren[v], ax) for v, ax in x) for x in val)
                       if isinstance(val, tuple) and val and all(isinstance(x, DimSum) for x in val) else val)
                      for k, val in n.attrs)
        return GNode(n.op, attrs, tuple(("i", ren[a[1]]) if a[0] == "i" else a for a in n.args))

    def ref(r):
        return ("i", ren[r[1]]) if r[0] == "i" else r

    return Candidate(tuple(node(n) for n in c.src), c.src_outputs, tuple(node(n) for n in c.dst),
                     tuple(ref(r) for r in c.dst_outputs), tuple(ren[v] for v in c.inputs), c.fingerprint)


def _constraints(groups: list, implied: list, ndims: dict) -> list:
    """`where` lines: each input's rank; `shape(y) == shape(x)` for inputs whose shapes are equal (the axiomatic
    proof uses it; it does not derive it from the source's typing); then the equalities of `groups` that neither
    those nor the source's own typing (`implied`) give."""
    group_of = {p: i for i, g in enumerate(groups) for p in g}
    block = {p: i for i, g in enumerate(implied) for p in g}
    lines = [f"ndim({v}) == {n}" for v, n in sorted(ndims.items())]
    same: dict = {}  # symbolic shape -> first input with it
    rep: dict = {}  # input -> the input whose shape it equals
    for v in sorted(ndims):
        sig = tuple(group_of[(v, i)] for i in range(ndims[v]))
        if sig and sig in same:
            rep[v] = same[sig]
            lines.append(f"shape({v}) == shape({same[sig]})")
        else:
            same.setdefault(sig, v)
    for g in groups:
        reps: dict = {}
        for (v, i) in g:
            if v in rep:  # covered by its shape equality
                continue
            reps.setdefault(block.get((v, i), (v, i)), (v, i))
        first, *others = list(reps.values()) or [None]
        lines += [f"dim({v}, {i}) == dim({first[0]}, {first[1]})" for v, i in others]
    return lines


def rule_entry(c, groups: list, pool: dict, classes: dict, implied: Optional[list] = None) -> dict:
    """The rule as plain data: name, text lines for each key, the symbols, and a content digest.

    `groups` lists groups of (var, axis) that share a symbol, `implied` those the source's typing ties anyway;
    `classes` maps (var, axis) to its pool class. Inputs are renamed a, b, c, ... in order of first use."""
    ren = _first_use(c)
    c = _renamed(c, ren)
    pool = {ren[v]: pool[v] for v in ren}
    groups = sorted(sorted((ren.get(v, v), a) for v, a in g) for g in groups)
    implied = sorted(sorted((ren.get(v, v), a) for v, a in g) for g in (implied or []))
    classes = {(ren[v], a): k for (v, a), k in classes.items() if v in ren}
    heads = HeadText.of(groups, classes)  # the head count's position leaves the groups: it is no input dimension
    groups, implied = strip_heads(groups), strip_heads(implied)
    src_lines, src_names = _side(c.src, "t", {}, heads.source_attr)
    out_names = [src_names[r] for r in c.src_outputs]
    fixed = {}
    aliases = []
    for r, name in zip(c.dst_outputs, out_names):
        if r[0] == "i" or r in fixed:
            aliases.append((name, r))
        else:
            fixed[r] = name
    dst_lines, dst_names = _side(c.dst, "u", fixed, heads.target_attr)
    for name, r in aliases:
        dst_lines.append(f"{name}: {r[1] if r[0] == 'i' else dst_names[r]}")
    sym = {}
    dims: dict = {}
    for i, g in enumerate(groups):
        s = SYMBOLS[i] if i < len(SYMBOLS) else f"D{i}"
        for p in g:
            sym[p] = s
        k = classes[g[0]]
        if k in VERIFY_DIMS:
            dims[s] = VERIFY_DIMS[k]
    for n in c.src:  # a grouped convolution builds only where its output channels are a multiple of its groups:
        # the other sizes would leave pairs of the bounded proof's choices that no instance covers
        g = dict(n.attrs).get("groups", 1)
        if n.op == "conv2d" and isinstance(g, int) and g > 1 and n.args[1][0] == "i":
            dims[sym[(n.args[1][1], 0)]] = [g, 2 * g]
    where = _constraints(groups, implied, {v: len(pool[v].shape) for v in c.inputs}) + heads.where
    shapes = {v: [sym[(v, a)] for a in range(len(pool[v].shape))] for v in sorted(c.inputs)}
    attrs = {var: split_domain(c.src, j, shapes, dims) for var, j in sorted(heads.free.items())}
    body = "\n".join(src_lines + ["->"] + dst_lines + where + [repr(shapes), repr(attrs)])
    digest = hashlib.sha256(body.encode()).hexdigest()[:10]
    ops = "_".join(sorted({n.op for n in c.src}))
    return {"name": f"gen_{ops}_{digest}", "source": src_lines, "target": dst_lines, "outputs": out_names,
            "where": where, "shapes": shapes, "dims": dims, "attrs": attrs, "digest": digest}


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def entry_yaml(e: dict, doc: str) -> str:
    """One YAML list item for the entry."""
    out = [f"- name: {e['name']}", "  family: generated", f"  doc: {_q(doc)}", "  source:"]
    out += [f"    {ln.split(': ', 1)[0]}: {_q(ln.split(': ', 1)[1])}" for ln in e["source"]]
    out.append("  target:")
    out += [f"    {ln.split(': ', 1)[0]}: {_q(ln.split(': ', 1)[1])}" for ln in e["target"]]
    out.append(f"  outputs: [{', '.join(e['outputs'])}]")
    if e["where"]:
        out.append("  where:")
        out += [f"    - {_q(w)}" for w in e["where"]]
    out.append("  verify:")
    shp = ", ".join(f"{v}: [{', '.join(s)}]" for v, s in e["shapes"].items())
    out.append(f"    shapes: {{{shp}}}")
    if e["dims"]:
        out.append("    dims: {" + ", ".join(f"{k}: {v}" for k, v in sorted(e["dims"].items())) + "}")
    if e.get("attrs"):
        out.append("    attrs: {" + ", ".join(f"{k}: {v}" for k, v in sorted(e["attrs"].items())) + "}")
    return "\n".join(out) + "\n"
