"""Pinned search results: the searched graph and its analytic cost for three zoo models, with a frozen copy of
the rule library (`tests/data/frozen_rules/`). A refactor must leave them unchanged.

`python tests/search_pins.py` rewrites `tests/data/search_pins.json` (do that only when a change of results is
intended, and say why in the commit)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
PIN_FILE = DATA / "search_pins.json"
MODELS = {"seed_example": {}, "squeezenet": {}, "nasrnn": {}, "resnet50": {}}


def graph_text(graph) -> list[str]:
    """The graph as lines `id = op[attrs](inputs)` in topological order, ids renumbered from 0."""
    ids: dict[int, int] = {}
    lines = []
    for node in graph.topo_order():
        ids[node.id] = len(ids)
        attrs = {k: v for k, v in sorted(node.attrs.items()) if k != "key"}
        if node.op == "weight":
            attrs = {"shape": list(node.types[0].shape)}
        args = ",".join(f"{ids[i]}:{j}" for i, j in node.inputs)
        lines.append(f"{ids[node.id]} = {node.op}{attrs}({args})")
    lines.append("outputs " + ",".join(f"{ids[i]}:{j}" for i, j in graph.outputs))
    return lines


def search_results() -> dict:
    from taso_tvm import load_onnx, zoo
    from taso_tvm.cost import CostModel, load_cost_config
    from taso_tvm.relay_pass.lift import lift_function
    from taso_tvm.rules import load_rules
    from taso_tvm.search import SearchConfig, optimize_graph

    rules = load_rules(sorted(DATA.joinpath("frozen_rules").glob("*.yaml")))
    cost = CostModel(load_cost_config(backend="analytic", cache=""))
    out = {}
    for name, kwargs in MODELS.items():
        graph = lift_function(load_onnx(zoo.get_model(name, **kwargs))["main"])[0].graph
        best, stats = optimize_graph(graph, rules, cost, SearchConfig(budget=8))
        out[name] = {"cost_before": round(stats.cost_before, 9), "cost_after": round(stats.cost_after, 9),
                     "rules_applied": dict(sorted(stats.rules_applied.items())), "graph": graph_text(best)}
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent.parent))
    PIN_FILE.write_text(json.dumps(search_results(), indent=1) + "\n")
    print(f"wrote {PIN_FILE}")
