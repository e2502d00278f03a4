"""The rule language: expressions, rule compilation, and malformed-rule errors (file, line, rule, what)."""
from __future__ import annotations

import re
import textwrap

import pytest

from taso_tvm.rules import RuleError, parse_rules, read_rule_files
from taso_tvm.rules.language import expr as E
from taso_tvm.rules.ruleset import library_files


# ---------------------------------------------------------------- expressions
class _Env(E.Env):
    def __init__(self, attrs=None, shapes=None, weights=()):
        self.attrs, self.shapes, self.weights = attrs or {}, shapes or {}, set(weights)

    def lookup(self, name):
        if name in self.attrs:
            return self.attrs[name]
        raise E.ExprError(f"unknown {name}")

    def is_tensor(self, name):
        return name in self.shapes

    def tensor_type(self, name):
        from taso_tvm.graph import TensorType
        return TensorType(tuple(self.shapes[name]))

    def is_weight(self, name):
        return name in self.weights

    def splat(self, name):
        return {"groups": 2} if name == "c" else super().splat(name)


@pytest.mark.parametrize("text,value", [
    ("1 + 2 * 3", 7),
    ("-(2 - 5) // 2", 1),
    ("[1, 2] + [3]", (1, 2, 3)),
    ("dim(w, -1) == 4 and ndim(w) == 2", True),
    ("not weight(x) or weight(w)", True),
    ("shape(w) == [3, 4]", True),
    ("numel(w)", 12),
    ("s[1] + 1", 3),
    ("compose([2, 0, 1], [1, 2, 0])", (0, 1, 2)),
    ("range(ndim(w))", (0, 1)),
    ("2 in [1, 2, 3]", True),
    ("3 not in [1, 2]", True),
    ("c.groups % 2 == 0", True),
    ("sum([dim(w, 0), dim(w, 1)])", 7),
    ("'none' == none", True),
    ("1.5e-3 * 2", 3e-3),
])
def test_expressions_evaluate(text, value):
    env = _Env(attrs={"s": (1, 2)}, shapes={"w": (3, 4), "x": (2, 3)}, weights={"w"})
    assert E.evaluate(E.parse(text), env) == value


@pytest.mark.parametrize("text,msg", [
    ("1 +", "unexpected end"),
    ("dim(w, 1", "expected ')'"),
    ("a == b == c", "chained comparisons"),
    ("x $ y", "unexpected character"),
    ("f(a=1, 2)", "positional argument after keyword"),
])
def test_expression_syntax_errors(text, msg):
    with pytest.raises(E.ExprError, match=re.escape(msg)):
        E.parse(text)



def test_expression_never_evals_python():
    # Python syntax that is not in the grammar is rejected, not executed
    for text in ("__import__('os').system('true')", "lambda: 1", "x.__class__"):
        with pytest.raises(E.ExprError):
            E.evaluate(E.parse(text), _Env(shapes={"x": (1,)}))


# ---------------------------------------------------------------- rules
GOOD = textwrap.dedent("""\
    - name: merge_matmuls_sharing_input
      source:
        a: matmul(x, w1)
        b: matmul(x, w2)
      target:
        w: concat(w1, w2, axis=-1)
        y: matmul(x, w)
        a, b: split(y, axis=-1, sizes=[dim(w1, -1), dim(w2, -1)])
      outputs: [a, b]
      where: [weight(w1), weight(w2)]
    """)


def test_compile_design_sketch():
    (r,) = parse_rules(GOOD, "sketch.yaml")
    assert r.name == "merge_matmuls_sharing_input"
    assert r.inputs == ["x", "w1", "w2"]
    assert r.outputs == ["a", "b"]
    assert [n.op for n in r.source] == ["matmul", "matmul"]
    assert [n.op for n in r.target] == ["concat", "matmul", "split"]
    assert r.target[2].names == ("a", "b")
    assert r.line == 1 and r.file == "sketch.yaml"


def test_default_outputs_are_source_sinks_and_nested_calls():
    (r,) = parse_rules(textwrap.dedent("""\
        - name: r
          source:
            z: relu(conv2d(x, w, activation=none, **c))
          target:
            z: conv2d(x, w, activation=relu, **c)
        """))
    assert r.outputs == ["z"]
    assert [n.op for n in r.source] == ["conv2d", "relu"]  # the nested conv2d is an anonymous node
    assert r.source[0].names == (None,)
    assert r.splats == {"c": 0}


def test_canonical_hash_ignores_doc_but_not_semantics():
    (a,) = parse_rules(GOOD)
    (b,) = parse_rules(GOOD.replace("- name: merge_matmuls_sharing_input",
                                    "- name: merge_matmuls_sharing_input\n  doc: hello"))
    (c,) = parse_rules(GOOD.replace("axis=-1)\n    y", "axis=1)\n    y"))
    assert a.digest == b.digest
    assert a.digest != c.digest


MALFORMED = [
    # (yaml body of one rule after its name line, expected line, message fragment)
    ("  source:\n    y: relu(x\n  target:\n    y: x\n", 3, "cannot parse 'relu(x'"),
    ("  source:\n    y: frobnicate(x)\n  target:\n    y: x\n", 3, "unknown operator 'frobnicate'"),
    ("  source:\n    y: conv2d(x, w, stride=2)\n  target:\n    y: x\n", 3, "conv2d has no attribute 'stride'"),
    ("  source:\n    y: relu(x, w)\n  target:\n    y: x\n", 3, "relu takes 1 tensor argument(s), got 2"),
    ("  source:\n    y: relu(x)\n  target:\n    z: relu(x)\n", 4, "output 'y' is not defined in the target"),
    ("  source:\n    y: relu(x)\n  target:\n    y: relu(q)\n", 5, "unknown tensor 'q' in the target"),
    ("  source:\n    y: relu(x)\n  target:\n    y: x\n  where:\n    - dim(x, 0) > 1\n    - bogus(x)\n", 8,
     "unknown function 'bogus'"),
    ("  source:\n    y: relu(x)\n  target:\n    y: x\n  where:\n    - ndim(zz) == 2\n", 7, "unknown name(s) zz"),
    ("  source:\n    y: relu(x)\n  target:\n    y: x\n  frobs: 1\n", 6, "unknown key 'frobs'"),
    ("  source:\n    y: relu(x)\n    y: relu(x)\n  target:\n    y: x\n", 4, "duplicate key 'y'"),
    ("  source:\n    a, b: relu(x)\n  target:\n    a: x\n    b: x\n", 3, "relu has one output, 2 names given"),
    ("  source:\n    y: relu(x)\n  target:\n    y: x\n  verify:\n    shapes: {q: [1]}\n", 7,
     "verify.shapes names 'q', which is not an input tensor"),
    ("  source:\n    y: concat(a, b)\n  target:\n    y: a\n", 3, "concat needs attribute 'axis'"),
    ("  source:\n    y: add(x, z)\n    z: relu(x)\n  target:\n    y: x\n", 4, "'z' is used (line 3) before"),
    ("  target:\n    y: x\n", 1, "missing 'source'"),
]


@pytest.mark.parametrize("body,line,msg", MALFORMED)
def test_malformed_rule_errors_name_file_line_and_rule(body, line, msg):
    text = "- name: broken_rule\n" + body
    with pytest.raises(RuleError) as info:
        parse_rules(text, "rules/bad.yaml")
    err = info.value
    assert err.file == "rules/bad.yaml"
    assert err.line == line, str(err)
    assert msg in str(err)
    if "duplicate key" not in msg:  # a YAML-level error comes before the rule is known
        assert err.rule == "broken_rule"
        assert str(err).startswith(f"rules/bad.yaml:{line}: rule 'broken_rule': ")


def test_flow_list_with_commas_reports_the_line():
    text = GOOD.replace("where: [weight(w1), weight(w2)]", "where: [dim(w1, 0) == dim(w2, 0)]")
    with pytest.raises(RuleError, match=r"x.yaml:10: rule 'merge_matmuls_sharing_input': cannot parse 'dim\(w1'"):
        parse_rules(text, "x.yaml")


def test_yaml_syntax_error_has_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("- name: a\n  source:\n    y: relu(x)\n   target: [\n")
    with pytest.raises(RuleError) as info:
        read_rule_files([p])
    assert info.value.file == str(p) and info.value.line in (4, 5)
    assert "invalid YAML" in str(info.value)


def test_duplicate_rule_names_across_files(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleError, match="duplicate rule name"):
        read_rule_files([tmp_path])


def test_shipped_library_parses():
    rules = read_rule_files(library_files())
    assert len(rules) >= 40
    assert len({r.name for r in rules}) == len(rules)
    for r in rules:
        assert r.verify.shapes, f"{r.name} has no verify.shapes"
