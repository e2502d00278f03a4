"""Tutorial 5: write your own rewrite rule in YAML, verify it, and watch the verifier refute a wrong one.

A rule is data: a source pattern, a target, and the conditions under which they compute the same function. Only
verified rules load: the verifier checks each on every combination of shapes and attribute values it covers
(bounded, with Z3) and, where it can, proves it for all shapes from the operators' axioms.

    python tutorials/05_rules.py
"""
import os
import tempfile

import taso_tvm as taso
from taso_tvm.rules import load_rules
from taso_tvm.rules.language.compile import read_rule_files
from taso_tvm.rules.verify.verdict import verify_rules

RULES = """
# Two matmuls reading the same activation become one matmul against the concatenated weights, then a split.
- name: my_merge_matmuls
  doc: x @ w1 and x @ w2 in one matmul
  source:
    a: matmul(x, w1)
    b: matmul(x, w2)
  target:
    y: matmul(x, concat(w1, w2, axis=-1))
    a, b: split(y, axis=-1, sizes=[dim(w1, -1), dim(w2, -1)])
  where: [weight(w1), weight(w2), ndim(w1) == 2, ndim(w2) == 2, ndim(x) == 2]
  verify: {shapes: {x: [M, K], w1: [K, N1], w2: [K, N2]}}

# Wrong: relu does not distribute over a sum.
- name: my_wrong_relu_of_add
  source:
    y: relu(add(a, b))
  target:
    y: add(relu(a), relu(b))
  verify: {shapes: {a: [N], b: [N]}}
"""

path = os.path.join(tempfile.mkdtemp(), "my_rules.yaml")
with open(path, "w") as f:
    f.write(RULES)

# 1. Verify (the CLI: `taso-tvm rules verify my_rules.yaml`). Results are cached by the rule's hash.
rules = read_rule_files([path])
for rule, result in zip(rules, verify_rules(rules, use_cache=False)):
    print(f"{rule.name}: {result.status} ({result.proof or 'no proof'})")
    for m in result.methods:
        print(f"    {m.method}: {m.status} {m.detail}")
        if m.counterexample:
            print("    counterexample:", m.counterexample)
    assert result.ok == (rule.name == "my_merge_matmuls")

# 2. Only the verified rule loads (the wrong one is left out, with an error in the log).
ruleset = load_rules([path])
print("loaded:", ruleset.names)
assert ruleset.names == ["my_merge_matmuls"]

# 3. Search with it. The cost can be any function of a TensorGraph; here: the number of matmul kernels (the
#    cost models of the project measure or estimate real time; see tutorial 7).
graph = taso.new_graph()
x = graph.new_input(dims=(8, 64))
a = graph.matmul(x, graph.new_weight(dims=(64, 32)))
b = graph.matmul(x, graph.new_weight(dims=(64, 32)))
graph.relu(a)
graph.tanh(b)


def matmul_launches(g) -> float:
    return sum(n.op == "matmul" for n in g.ops()) + 0.01 * g.num_runtime_ops


best = taso.optimize(graph, rules=ruleset, cost=matmul_launches, check=True)
print("operators before:", [n.op for n in graph.to_tensor_graph().ops()])
after = [n.op for n in best.to_tensor_graph().ops()]
print("operators after: ", after)
assert after.count("matmul") == 1

# 4. Or let the generator find rules (TASO's method: enumerate small graphs, fingerprint their outputs, pair the
#    graphs that compute the same function, prune, generalize, and keep what the verifier proves). CLI:
#    `taso-tvm rules generate --max-ops 2 --ops add,mul -o generated.yaml`.
from taso_tvm.rules.generate import generate_rules

generated = generate_rules(2, ops=["add", "mul"], kinds=["mat"], out=os.path.join(tempfile.mkdtemp(), "gen.yaml"))
print(f"generated {len(generated.rules)} verified rules, e.g.:")
print("\n".join(generated.text.splitlines()[:12]))
assert generated.rules  # every rule written is verified; refuted candidates are dropped
