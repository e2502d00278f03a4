"""Rule files: parse YAML rule entries into compiled `Rule` objects, with file:line errors.

A rule file is a YAML list of entries::

    - name: fuse_conv_relu
      family: fusion
      source:
        y: conv2d(x, w, activation=none, **c)
        z: relu(y)
      target:
        z: conv2d(x, w, activation=relu, **c)
      outputs: [z]
      where:
        - weight(w)
      verify:
        shapes: {x: [N, C, H, W], w: [O, C, K, K]}

See docs/rules.md for the language.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from ...graph.ops import OPS
from ...graph.types import freeze
from . import expr as E
from .. import op_facets
from .rule import ArgRef, AttrSpec, Constraint, PNode, Rule, RuleError, VerifySpec
from ...safe_read import TEXT_CAP, UnsafeFileError, read_text
from .yaml_lines import LList, LMap, YamlError, load_yaml


ENTRY_KEYS = {"name", "family", "doc", "source", "target", "outputs", "where", "verify", "facts", "expect"}
VERIFY_KEYS = {"shapes", "dims", "attrs", "instances", "axiomatic", "bounded_only", "timeout", "elements"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


# ---------------------------------------------------------------- compilation
def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


class _Ctx:
    def __init__(self, file: Optional[str], name: Optional[str]):
        self.file, self.name = file, name

    def err(self, msg: str, line: Optional[int]) -> RuleError:
        return RuleError(msg, self.file, line, self.name)


def _freeze_const(e: Any) -> tuple[bool, Any]:
    """(True, value) if the expression is a literal (a constant or a list of literals)."""
    if isinstance(e, E.Const):
        return True, e.value
    if isinstance(e, E.ListExpr):
        vals = []
        for i in e.items:
            ok, v = _freeze_const(i)
            if not ok:
                return False, None
            vals.append(v)
        return True, tuple(vals)
    return False, None


class _Side:
    """Compiles one side (source or target) of a rule."""

    def __init__(self, ctx: _Ctx, side: str, src: Optional["_Side"] = None):
        self.ctx, self.side, self.src = ctx, side, src
        self.nodes: list[PNode] = []
        self.names: dict[str, ArgRef] = {}  # tensor names defined on this side
        self.vars: list[str] = []  # input tensor variables (source)
        self.attr_vars: dict[str, tuple] = {} if src is None else src.attr_vars
        self.splats: dict[str, int] = {} if src is None else src.splats
        self.used_as_var: dict[str, int] = {}  # name -> line where first used as an input variable

    def parse(self, text: Any, line: int) -> Any:
        if not isinstance(text, str) or not text.strip():
            raise self.ctx.err(f"expected an expression, got {text!r}", line)
        try:
            return E.parse(text)
        except E.ExprError as err:
            col = f" (column {err.col + 1})" if err.col is not None else ""
            raise self.ctx.err(f"cannot parse {text!r}: {err.msg}{col}", line) from None

    def entry(self, key: Any, value: Any, line: int) -> None:
        names = [n.strip() for n in str(key).split(",")]
        for n in names:
            if n != "_" and not _IDENT.match(n):
                raise self.ctx.err(f"'{n}' is not a valid tensor name", line)
            if n != "_" and n in self.names:
                raise self.ctx.err(f"tensor '{n}' is defined twice in the {self.side}", line)
            if self.side == "source" and n in self.used_as_var:
                raise self.ctx.err(f"'{n}' is used (line {self.used_as_var[n]}) before it is defined; "
                                   "define a tensor before using it", line)
            if n in self.attr_vars or n in self.splats:
                raise self.ctx.err(f"'{n}' is already an attribute variable", line)
        e = self.parse(value, line)
        if isinstance(e, E.Name):
            if self.side == "source":
                raise self.ctx.err(f"a source entry must be an operator application, got '{value}'", line)
            if len(names) != 1:
                raise self.ctx.err("an alias defines exactly one name", line)
            self.names[names[0]] = self.tensor_ref(e.id, line)
            return
        if not isinstance(e, E.Call):
            raise self.ctx.err(f"expected an operator application like 'relu(x)', got '{value}'", line)
        node = self.call(e, line, names)
        for k, n in enumerate(names):
            if n != "_":
                self.names[n] = ArgRef("node", node=node.index, out=k)

    def tensor_ref(self, name: str, line: int) -> ArgRef:
        if name in self.names:
            return self.names[name]
        if name in self.attr_vars or name in self.splats:
            raise self.ctx.err(f"'{name}' is an attribute variable, not a tensor", line)
        if name in E.BARE_CONSTANTS:
            raise self.ctx.err(f"'{name}' is a constant, not a tensor", line)
        if self.side == "source":
            if name not in self.vars:
                self.vars.append(name)
                self.used_as_var.setdefault(name, line)
            return ArgRef("var", name)
        assert self.src is not None
        if name in self.src.names or name in self.src.vars:
            return ArgRef("src", name)
        raise self.ctx.err(f"unknown tensor '{name}' in the target (not defined in the target or the source)", line)

    def arg(self, a: Any, line: int) -> ArgRef:
        if isinstance(a, E.Name):
            return self.tensor_ref(a.id, line)
        if isinstance(a, E.Call):
            node = self.call(a, line, [None])
            return ArgRef("node", node=node.index, out=0)
        raise self.ctx.err(f"a tensor argument must be a name or an operator application, got "
                           f"'{E.to_text(a)}'", line)

    def call(self, c: Any, line: int, names: list) -> PNode:
        if c.func == "const":
            return self.const_node(c, line, names)
        if c.func not in OPS or not op_facets.in_patterns(c.func):
            hint = " (a function of the expression language, not an operator)" if c.func in E.FUNCTIONS else ""
            raise self.ctx.err(f"unknown operator '{c.func}'{hint}", line)
        opdef = OPS[c.func]
        n_out = len(names)
        if n_out != 1 and not op_facets.multi_output(c.func):
            raise self.ctx.err(f"{c.func} has one output, {n_out} names given", line)
        if opdef.inputs is not None and len(c.args) != opdef.inputs:
            raise self.ctx.err(f"{c.func} takes {opdef.inputs} tensor argument(s), got {len(c.args)}", line)
        if opdef.inputs is None and not c.args:
            raise self.ctx.err(f"{c.func} needs at least one tensor argument", line)
        if len(c.splats) > 1:
            raise self.ctx.err("at most one **group per operator", line)
        args = tuple(self.arg(a, line) for a in c.args)
        attrs: dict[str, AttrSpec] = {}
        for k, v in c.kwargs:
            if k not in opdef.attrs:
                raise self.ctx.err(f"{c.func} has no attribute '{k}' (it has: {', '.join(opdef.attrs) or 'none'})",
                                   line)
            attrs[k] = self.attr_spec(v, line, c.func, k)
        splat = c.splats[0] if c.splats else None
        if splat is not None:
            self.check_attr_name(splat, line)
            if self.side == "source":
                self.splats.setdefault(splat, len(self.nodes))
            elif splat not in self.splats:
                raise self.ctx.err(f"attribute group '**{splat}' is not bound in the source", line)
        if splat is None or self.side == "target":
            for k, default in opdef.attrs.items():
                if k not in attrs and default is None and splat is None:
                    raise self.ctx.err(f"{c.func} needs attribute '{k}'", line)
        if self.side == "source" and splat is None:
            for k, default in opdef.attrs.items():
                attrs.setdefault(k, AttrSpec("const", default))
        node = PNode(len(self.nodes), c.func, args, attrs, splat, tuple(None if n == "_" else n for n in names),
                     line)
        self.nodes.append(node)
        return node

    def const_node(self, c: Any, line: int, names: list) -> PNode:
        if self.side == "source":
            raise self.ctx.err("const(...) can only appear in a target", line)
        if len(names) != 1 or not 1 <= len(c.args) <= 2 or c.kwargs or c.splats:
            raise self.ctx.err("const takes a value and optionally a tensor whose dtype it copies: "
                               "const(value[, like])", line)
        self.check_expr(c.args[0], line)
        args = (self.tensor_ref(c.args[1].id, line),) if len(c.args) == 2 and isinstance(c.args[1], E.Name) else ()
        if len(c.args) == 2 and not args:
            raise self.ctx.err("const's second argument must be a tensor name", line)
        node = PNode(len(self.nodes), "const", args, {"value": AttrSpec("expr", c.args[0])}, None,
                     tuple(None if n == "_" else n for n in names), line)
        self.nodes.append(node)
        return node

    def check_attr_name(self, name: str, line: int) -> None:
        if name in self.names or (self.side == "source" and name in self.vars):
            raise self.ctx.err(f"'{name}' is a tensor, not an attribute variable", line)
        if self.src is not None and (name in self.src.names or name in self.src.vars):
            raise self.ctx.err(f"'{name}' is a tensor, not an attribute variable", line)

    def attr_spec(self, v: Any, line: int, op: str, key: str) -> AttrSpec:
        ok, const = _freeze_const(v)
        if ok:
            return AttrSpec("const", const)
        if self.side == "source" and isinstance(v, E.Name) and not self.is_tensor_name(v.id):
            self.check_attr_name(v.id, line)
            if v.id in self.splats:
                raise self.ctx.err(f"'{v.id}' is an attribute group (**{v.id}); use {v.id}.<attribute>", line)
            self.attr_vars.setdefault(v.id, (len(self.nodes), key))
            return AttrSpec("var", v.id)
        self.check_expr(v, line, allow_new=False)
        return AttrSpec("expr", v)

    def is_tensor_name(self, name: str) -> bool:
        return name in self.names or name in self.vars or name in self.used_as_var

    def known_names(self) -> set:
        known = set(self.names) | set(self.attr_vars) | set(self.splats) | set(self.vars)
        if self.src is not None:
            known |= set(self.src.names) | set(self.src.vars)
        return known

    def check_expr(self, e: Any, line: int, allow_new: bool = False) -> None:
        for call in E.calls_in(e):
            if call.func not in E.FUNCTIONS:
                raise self.ctx.err(f"unknown function '{call.func}' in '{E.to_text(e)}' (functions: "
                                   f"{', '.join(sorted(E.FUNCTIONS))})", line)
        unknown = E.names_in(e) - self.known_names()
        if unknown and not allow_new:
            raise self.ctx.err(f"unknown name(s) {', '.join(sorted(unknown))} in '{E.to_text(e)}'", line)


def _require(ctx: _Ctx, entry: LMap, key: str, kind: type, line: int) -> Any:
    if key not in entry:
        raise ctx.err(f"missing '{key}'", line)
    v = entry[key]
    if not isinstance(v, kind):
        raise ctx.err(f"'{key}' must be a {'mapping' if kind is dict else 'list'}", entry.line_of(key))
    return v


def _constraints(ctx: _Ctx, side: _Side, entry: LMap, key: str) -> list:
    if key not in entry:
        return []
    items = entry[key]
    if isinstance(items, str):
        items_l = LList([items])
        items_l.line, items_l.item_lines = entry.line_of(key), [entry.line_of(key)]
        items = items_l
    if not isinstance(items, list):
        raise ctx.err(f"'{key}' must be a list of constraints", entry.line_of(key))
    out = []
    for i, text in enumerate(items):
        line = items.line_of(i) if isinstance(items, LList) else entry.line_of(key)
        if isinstance(text, bool):
            raise ctx.err(f"constraint {i + 1} is a bare boolean; YAML read it as {text!r}", line)
        e = side.parse(str(text), line)
        side.check_expr(e, line)
        out.append(Constraint(e, str(text), line))
    return out


def _verify_shapes(ctx: _Ctx, shapes: Any, inputs: list, line: int) -> list:
    """verify.shapes: one mapping or a list of alternatives, each {input variable: tuple of ints | symbols}."""
    out = []
    for alt in shapes if isinstance(shapes, list) else [shapes]:
        if not isinstance(alt, dict):
            raise ctx.err("verify.shapes must map input names to shapes (or be a list of such mappings)", line)
        one = {}
        for name, shape in alt.items():
            if name not in inputs:
                raise ctx.err(f"verify.shapes names '{name}', which is not an input tensor of the rule "
                              f"(inputs: {', '.join(inputs)})", line)
            if not isinstance(shape, list) or not all(isinstance(d, (int, str)) for d in shape):
                raise ctx.err(f"verify.shapes.{name} must be a list of ints and dimension symbols", line)
            one[name] = tuple(d if isinstance(d, int) else str(d).strip() for d in shape)
        out.append(one)
    return out


def _verify_spec(ctx: _Ctx, entry: LMap, inputs: list) -> VerifySpec:
    """The entry's `verify` settings, checked."""
    spec = VerifySpec()
    if "verify" not in entry:
        return spec
    v = entry["verify"]
    line = entry.line_of("verify")
    if not isinstance(v, dict):
        raise ctx.err("'verify' must be a mapping", line)
    for k in v:
        if k not in VERIFY_KEYS:
            raise ctx.err(f"unknown key '{k}' in verify (known: {', '.join(sorted(VERIFY_KEYS))})",
                          v.line_of(k) if isinstance(v, LMap) else line)
    lof = (lambda k: v.line_of(k)) if isinstance(v, LMap) else (lambda k: line)
    spec.shapes = _verify_shapes(ctx, v.get("shapes", {}) or {}, inputs, lof("shapes"))
    dims = v.get("dims", {}) or {}
    if not isinstance(dims, dict):
        raise ctx.err("verify.dims must map symbols to lists of sizes", lof("dims"))
    for sym, dom in dims.items():
        dom = [dom] if isinstance(dom, int) else dom
        if not isinstance(dom, list) or not dom or not all(isinstance(d, int) and d >= 0 for d in dom):
            raise ctx.err(f"verify.dims.{sym} must be a non-empty list of sizes", lof("dims"))
        spec.dims[str(sym)] = tuple(dom)
    attrs = v.get("attrs", {}) or {}
    if not isinstance(attrs, dict):
        raise ctx.err("verify.attrs must map attribute variables to lists of values", lof("attrs"))
    for k, dom in attrs.items():
        if not isinstance(dom, list) or not dom:
            raise ctx.err(f"verify.attrs.{k} must be a non-empty list of values", lof("attrs"))
        spec.attrs[str(k)] = tuple(freeze(x) for x in dom)
    for key, typ in (("instances", int), ("timeout", (int, float)), ("elements", int)):
        if key in v:
            if not isinstance(v[key], typ) or isinstance(v[key], bool) or v[key] <= 0:
                raise ctx.err(f"verify.{key} must be a positive number", lof(key))
            setattr(spec, key, v[key])
    if "axiomatic" in v:
        if not isinstance(v["axiomatic"], bool):
            raise ctx.err("verify.axiomatic must be true or false", lof("axiomatic"))
        spec.axiomatic = v["axiomatic"]
    if "bounded_only" in v:
        reason = v["bounded_only"]
        if not isinstance(reason, str) or not reason.strip():
            raise ctx.err("verify.bounded_only must state why the rule has no axiomatic proof", lof("bounded_only"))
        spec.bounded_only, spec.axiomatic = reason.strip(), False
    elif not spec.axiomatic:
        raise ctx.err("opting out of the axiomatic proof needs a reason: write verify.bounded_only: <why> "
                      "instead of verify.axiomatic: false", lof("axiomatic"))
    return spec


def compile_rule(entry: Any, file: Optional[str] = None, line: int = 0) -> Rule:
    """Compile one YAML rule entry (a mapping). Raises RuleError."""
    if not isinstance(entry, dict):
        raise RuleError("a rule entry must be a mapping", file, line)
    entry = _with_lines(entry, line)
    line = entry.line or line
    name = entry.get("name")
    ctx = _Ctx(file, str(name) if name is not None else None)
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ctx.err("every rule needs a 'name' (an identifier)", entry.line_of("name"))
    for k in entry:
        if k not in ENTRY_KEYS:
            raise ctx.err(f"unknown key '{k}' (known: {', '.join(sorted(ENTRY_KEYS))})", entry.line_of(k))
    src = _source_side(ctx, entry, line)
    where = _constraints(ctx, src, entry, "where")
    facts = _constraints(ctx, src, entry, "facts")
    outputs = _outputs(ctx, entry, src)
    tgt = _Side(ctx, "target", src)
    tgt_outputs = _target_side(ctx, entry, tgt, outputs, line) if "target" in entry or "facts" not in entry else {}
    verify = _verify_spec(ctx, entry, src.vars)
    expect = entry.get("expect")
    if expect is not None and expect not in ("verified", "refuted", "unproven"):
        raise ctx.err("'expect' must be verified, refuted or unproven", entry.line_of("expect"))
    return Rule(name=name, file=file, line=line, family=str(entry.get("family", "misc")),
                doc=str(entry.get("doc", "")), source=src.nodes, target=tgt.nodes, inputs=list(src.vars),
                attr_vars=dict(src.attr_vars), splats=dict(src.splats), src_names=dict(src.names), outputs=outputs,
                tgt_outputs=tgt_outputs, where=where, facts=facts, verify=verify, canonical=_canonical(entry),
                expect=expect)


def _with_lines(entry: dict, line: int) -> LMap:
    """The entry as an LMap (an entry built in Python gets `line` for all its keys)."""
    if isinstance(entry, LMap):
        return entry
    m = LMap(entry)
    m.line, m.key_lines = line, {}
    return m


def _canonical(entry: LMap) -> str:
    """The rule's content, what it says and not what it is called: verdicts and samples depend on this only."""
    canon = {k: _plain(entry[k]) for k in sorted(entry) if k not in ("name", "doc", "family", "expect")}
    return json.dumps(canon, sort_keys=True, default=repr)


def _source_side(ctx: _Ctx, entry: LMap, line: int) -> _Side:
    src_map = _require(ctx, entry, "source", dict, line)
    if not src_map:
        raise ctx.err("the source pattern is empty", entry.line_of("source"))
    src = _Side(ctx, "source")
    for k, v in src_map.items():
        src.entry(k, v, src_map.line_of(k) if isinstance(src_map, LMap) else line)
    return src


def _outputs(ctx: _Ctx, entry: LMap, src: _Side) -> list:
    """The source tensors the rule replaces: `outputs`, else every named source tensor nothing in the source reads."""
    if "outputs" in entry:
        outs = entry["outputs"]
        if isinstance(outs, str):
            outs = [o.strip() for o in outs.split(",")]
        if not isinstance(outs, list) or not outs:
            raise ctx.err("'outputs' must be a non-empty list of source tensor names", entry.line_of("outputs"))
        outputs = [str(o) for o in outs]
    else:
        consumed = {(a.node, a.out) for n in src.nodes for a in n.args if a.kind == "node"}
        outputs = []
        for n in src.nodes:
            for k, nm in enumerate(n.names):
                if (n.index, k) not in consumed:
                    if nm is None:
                        raise ctx.err("a source output is anonymous; name it or list 'outputs'", n.line)
                    outputs.append(nm)
    for o in outputs:
        if o not in src.names:
            raise ctx.err(f"output '{o}' is not a tensor defined in the source", entry.line_of("outputs"))
    if len(set(outputs)) != len(outputs):
        raise ctx.err("'outputs' lists a tensor twice", entry.line_of("outputs"))
    return outputs


def _target_side(ctx: _Ctx, entry: LMap, tgt: _Side, outputs: list, line: int) -> dict:
    """Compile the target into `tgt`; returns {output name: its ArgRef in the target}."""
    src = tgt.src
    assert src is not None
    tgt_map = _require(ctx, entry, "target", dict, line)
    line_of = (lambda k: tgt_map.line_of(k)) if isinstance(tgt_map, LMap) else (lambda k: line)
    for k in tgt_map:
        for n in str(k).split(","):
            n = n.strip()
            if n in src.names and n not in outputs:
                raise ctx.err(f"target name '{n}' is an interior source tensor; pick another name or list it "
                              "in 'outputs'", line_of(k))
            if n in src.vars:
                raise ctx.err(f"target name '{n}' is an input variable of the rule", line_of(k))
    for k, v in tgt_map.items():
        tgt.entry(k, v, line_of(k))
    for n in tgt.nodes:
        for spec in n.attrs.values():
            if spec.kind == "expr":
                tgt.check_expr(spec.value, n.line)
    tgt_outputs = {}
    for o in outputs:
        if o not in tgt.names:
            raise ctx.err(f"output '{o}' is not defined in the target", entry.line_of("target"))
        tgt_outputs[o] = tgt.names[o]
    return tgt_outputs


def parse_rules(text: str, file: Optional[str] = None) -> list:
    """Compile every rule of a YAML document. Raises RuleError naming the file, line and rule."""
    try:
        data = load_yaml(text)
    except YamlError as err:
        raise RuleError(err.msg, file, err.line) from None
    if data is None:
        return []
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    if not isinstance(data, list):
        raise RuleError("a rule file is a YAML list of rules", file, getattr(data, "line", 1))
    rules, seen = [], {}
    for i, entry in enumerate(data):
        line = data.line_of(i) if isinstance(data, LList) else 0
        rule = compile_rule(entry, file, line)
        if rule.name in seen:
            raise RuleError(f"duplicate rule name (first defined at line {seen[rule.name]})", file, rule.line,
                            rule.name)
        seen[rule.name] = rule.line
        rules.append(rule)
    return rules


def read_rule_files(paths: Iterable) -> list:
    """Compile every rule of the given files (a directory means its *.yaml files)."""
    rules, names = [], {}
    for p in expand_paths(paths):
        try:
            text = read_text(p, "rule file", TEXT_CAP)
        except UnsafeFileError as err:
            raise RuleError(f"cannot read the rule file: {err.detail}", str(p), None) from None
        for r in parse_rules(text, str(p)):
            if r.name in names:
                raise RuleError(f"duplicate rule name (also in {names[r.name]})", str(p), r.line, r.name)
            names[r.name] = f"{r.file}:{r.line}"
            rules.append(r)
    return rules


def expand_paths(paths: Iterable) -> list:
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")))
        elif p.exists():
            out.append(p)
        else:
            raise RuleError(f"no such rule file: {p}", str(p), None)
    return out
