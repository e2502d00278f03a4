"""TASO's Python namespace on taso-tvm: `import taso_tvm.taso as taso`, and TASO's scripts run unchanged.

Every name behaves as TASO's: `new_graph()`, `load_onnx(file)` (a graph with `cost()`, `run_time()`, ...),
`optimize(graph, alpha=1.0, budget=1000, print_subst=False)`, `export_onnx(graph)`. Costs come from the configured
cost model (`$TASO_TVM_CONFIG`, else the defaults); the rules are the shipped, verified library. `taso_tvm`'s own
`load_onnx` stays TVM-native (it returns a Relax IRModule).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

from ..errors import TasoError
from .graph import DATATYPES, TasoApiError, TasoGraph

log = logging.getLogger(__name__)

__version__ = "0.1.0"  # the TASO API version this namespace follows


def new_graph(print_measurements: bool = False) -> TasoGraph:
    """An empty graph (TASO's `new_graph`)."""
    return TasoGraph()


def load_onnx(filename: str, shapes: Optional[dict] = None) -> TasoGraph:
    """An ONNX file as a TASO graph: imported into Relax and lifted (what the registry does not model stays as
    opaque nodes the search works around). `shapes` binds symbolic input dims (TASO needs static shapes)."""
    from ..onnx_io import load_onnx as load_relax
    from ..relay_pass.lift import lift_function

    mod = load_relax(os.fspath(filename), shapes=shapes)
    blocks = lift_function(mod["main"])
    if len(blocks) != 1:
        raise TasoApiError(f"{filename}: the imported model has {len(blocks)} dataflow blocks; a TASO graph is one "
                           f"(control flow cannot be represented)")
    lifted = blocks[0]
    params = [str(p.name) for p in mod["main"].params]
    inputs = {n.attrs["name"] for n in lifted.graph.inputs()}
    if set(params) != inputs or lifted.graph.outputs is None:
        raise TasoApiError(f"{filename}: the model's body is not a single dataflow block over its inputs")
    return TasoGraph.wrap(lifted.graph, lifted.opaque_vars, len(params))


def optimize(graph: TasoGraph, alpha: float = 1.0, budget: int = 1000, print_subst: bool = False) -> TasoGraph:
    """The cheapest equivalent graph the search finds (TASO's `optimize`); `print_subst` prints the rules
    applied."""
    from ..api import search_graph

    best, stats = search_graph(graph, alpha=alpha, budget=budget)
    if print_subst:
        for name, count in sorted(stats.rules_applied.items()):
            print(f"substitution {name}: applied {count} time(s)")
        print(f"cost {stats.cost_before:.4f} -> {stats.cost_after:.4f} ms, {stats.expanded} graphs explored")
    return TasoGraph.wrap(best, graph.opaque_vars, graph._num_inputs)


def export_onnx(graph: TasoGraph, opset: Optional[int] = None) -> Any:
    """The graph as an ONNX ModelProto (TASO's `export_onnx`)."""
    from ..api import export_onnx as export

    return export(graph, opset=opset)


__all__ = ["new_graph", "load_onnx", "optimize", "export_onnx", "TasoGraph", "TasoApiError", "DATATYPES",
           "TasoError"]
