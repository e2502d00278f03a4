"""TASO's graph object: the builder graph plus TASO's measuring methods and the operators TASO has that the
registry does not model.

Those operators (comparisons, casts, reductions, slicing, ...) are built as Relax calls and kept as opaque nodes:
the search rewrites around them and never through them, exactly as it treats Relax calls it cannot lift. Their
output types come from Relax's own type inference. `prelu` and `leakyrelu` are written with registry operators
(relu(x) - slope * relu(-x)), so the search sees through them.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..api import Graph, Tensor, graph_module
from ..errors import TasoError
from ..graph import TensorGraph

log = logging.getLogger(__name__)

# TASO's data type names -> TVM dtypes
DATATYPES = {"FLOAT": "float32", "DOUBLE": "float64", "FLOAT16": "float16", "INT8": "int8", "UINT8": "uint8",
             "INT32": "int32", "INT64": "int64", "BOOL": "bool"}


class TasoApiError(TasoError, ValueError):
    """A TASO API call that cannot be honoured (an unknown data type, several axes where TASO allows one)."""


class TasoGraph(Graph):
    """A graph as TASO's `PyGraph`: built operator by operator, costed, timed, optimized, exported."""

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.opaque_vars: dict[str, dict[int, Any]] = {}  # opaque node key -> {input position: Relax var}
        self._cost_model: Any = None

    # ------------------------------------------------------------------ Relax-built operators
    def _relax(self, name: str, inputs: Sequence[Tensor], make: Callable[..., Any]) -> Tensor:
        """An opaque node computing `make(*vars)` (a Relax call) on the inputs."""
        from tvm import relax

        from ..graph.ops.relax_util import tensor_type

        refs = [self._t(x) for x in inputs]
        params = [relax.Var(f"{name}_in{i}", relax.TensorType(list(x.shape), x.type.dtype))
                  for i, x in enumerate(inputs)]
        try:
            expr = relax.BlockBuilder().normalize(make(*params))
        except Exception as e:  # TVM's type inference rejects the arguments: one line naming the operator
            raise TasoApiError(f"{name}: {str(e).strip().splitlines()[-1]}") from None
        ty = tensor_type(expr.ty)
        if ty is None:
            raise TasoApiError(f"{name}: Relax gives a {expr.ty}, not a tensor")
        key = self.store.fresh_key("opaque")
        node = self.store.opaque(expr, refs, [ty], key)
        self.opaque_vars[key] = dict(enumerate(params))
        self._created.extend(node.outputs)
        return Tensor(self, node.outputs[0])

    def cast(self, *, input: Tensor, datatype: str) -> Tensor:
        from tvm import relax

        if datatype not in DATATYPES:
            raise TasoApiError(f"cast: unknown data type {datatype!r}: use one of {', '.join(DATATYPES)}")
        return self._relax("cast", [input], lambda x: relax.op.astype(x, DATATYPES[datatype]))

    def ceil(self, *, input: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("ceil", [input], relax.op.ceil)

    def round(self, input: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("round", [input], relax.op.round)

    def log(self, *, input: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("log", [input], relax.op.log)

    def logical_not(self, *, input: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("logical_not", [input], relax.op.logical_not)

    def equal(self, *, x: Tensor, y: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("equal", [x, y], relax.op.equal)

    def greater(self, *, x: Tensor, y: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("greater", [x, y], relax.op.greater)

    def less(self, *, x: Tensor, y: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("less", [x, y], relax.op.less)

    def max(self, x: Tensor, y: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("max", [x, y], relax.op.maximum)

    def min(self, x: Tensor, y: Tensor) -> Tensor:
        from tvm import relax

        return self._relax("min", [x, y], relax.op.minimum)

    def _reduce(self, name: str, fn: str, input: Tensor, axes: Sequence[int], keepdims: bool) -> Tensor:
        from tvm import relax

        op = getattr(relax.op, fn)
        return self._relax(name, [input], lambda x: op(x, axis=[int(a) for a in axes], keepdims=bool(keepdims)))

    def reduce_max(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._reduce("reduce_max", "max", input, axes, keepdims)

    def reduce_min(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._reduce("reduce_min", "min", input, axes, keepdims)

    def reduce_prod(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._reduce("reduce_prod", "prod", input, axes, keepdims)

    def reduce_sum(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._reduce("reduce_sum", "sum", input, axes, keepdims)

    def _arg(self, name: str, fn: str, input: Tensor, axes: Sequence[int], keepdims: bool) -> Tensor:
        from tvm import relax

        if len(axes) != 1:
            raise TasoApiError(f"{name}: one axis, got {tuple(axes)} (ONNX ArgMax/ArgMin reduce one axis)")
        op = getattr(relax.op, fn)
        return self._relax(name, [input], lambda x: op(x, axis=int(axes[0]), keepdims=bool(keepdims)))

    def reduce_argmax(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._arg("reduce_argmax", "argmax", input, axes, keepdims)

    def reduce_argmin(self, *, input: Tensor, axes: tuple, keepdims: bool = True) -> Tensor:
        return self._arg("reduce_argmin", "argmin", input, axes, keepdims)

    def slice(self, input: Tensor, start: Sequence[int], end: Sequence[int], axes: Optional[Sequence[int]] = None,
              steps: Optional[Sequence[int]] = None) -> Tensor:
        from tvm import relax

        axes = list(axes) if axes else list(range(len(start)))
        steps = list(steps) if steps else [1] * len(start)
        return self._relax("slice", [input], lambda x: relax.op.strided_slice(
            x, axes=[int(a) for a in axes], begin=[int(s) for s in start], end=[int(e) for e in end],
            strides=[int(s) for s in steps]))

    def squeeze(self, *, input: Tensor, axes: tuple) -> Tensor:
        from tvm import relax

        return self._relax("squeeze", [input], lambda x: relax.op.squeeze(x, axis=[int(a) for a in axes]))

    def unsqueeze(self, input: Tensor, axes: tuple) -> Tensor:
        from tvm import relax

        return self._relax("unsqueeze", [input], lambda x: relax.op.expand_dims(x, axis=[int(a) for a in axes]))

    # ------------------------------------------------------------------ shapes are constants in a static graph
    def shape(self, input: Tensor) -> Tensor:
        """The input's shape as an int64 tensor (a constant: builder graphs have static shapes)."""
        return Tensor(self, self.store.weight(np.asarray(input.shape, dtype=np.int64)))

    def size(self, *, input: Tensor) -> Tensor:
        """The input's element count as an int64 scalar (a constant)."""
        return Tensor(self, self.store.weight(np.asarray(int(np.prod(input.shape)), dtype=np.int64)))

    # ------------------------------------------------------------------ written with registry operators
    def prelu(self, *, x: Tensor, slope: Tensor) -> Tensor:
        """max(x, 0) + slope * min(x, 0), as relu(x) - slope * relu(-x)."""
        neg = self._one("relu", [self._one("neg", [x])])
        return self._one("sub", [self._one("relu", [x]), self._one("mul", [slope, neg])])

    def leakyrelu(self, input: Tensor, alpha: float, inplace: bool = False) -> Tensor:
        slope = Tensor(self, self.store.weight(np.asarray(alpha, dtype=input.type.dtype)))
        return self.prelu(x=input, slope=slope)

    # ------------------------------------------------------------------ TASO's measurements
    def _cost(self) -> Any:
        if self._cost_model is None:  # the cost model `optimize` uses: $TASO_TVM_CONFIG, else the defaults
            from ..relay_pass import Settings

            self._cost_model, _ = Settings.resolve().resolve_cost()
        return self._cost_model

    def cost(self) -> float:
        """The cost model's estimate of the graph's run time in milliseconds (TASO's `graph.cost()`), with the
        configured cost model (`$TASO_TVM_CONFIG`, else the defaults)."""
        return float(self._cost().graph_cost(self.to_tensor_graph()))

    def print_measurements(self) -> None:
        """Print each distinct kernel of the graph with its count and cost (TASO prints its measurements)."""
        rows = self._cost().report([self.to_tensor_graph()])
        width = max([len(r.sig.label()) for r in rows] + [6])
        print(f"{'kernel':<{width}}  {'count':>5}  {'ms each':>10}  {'ms total':>10}")
        for r in rows:
            print(f"{r.sig.label():<{width}}  {r.count:>5}  {r.cost_ms:>10.4f}  {r.total_ms:>10.4f}")

    def run_time(self, threads: int = 2) -> float:
        """Measured run time in milliseconds of the whole graph built with TVM for the CPU (TASO's
        `graph.run_time()`): the median of single runs, with the CPU schedule pipeline when it is installed."""
        import tvm
        from tvm import relax

        from ..runtime.check import relax_inputs
        from ..runtime.timing import measure, vm_runner

        mod = self.to_relax()
        pipeline = "taso-schedule" if "taso-schedule" in relax.pipeline.PIPELINE_MAP else "default"
        from ..schedule import with_host_cpu

        target = tvm.target.Target(with_host_cpu({"kind": "llvm", "num-cores": threads}))  # this CPU, not SSE2
        ex = tvm.compile(mod, target, relax_pipeline=pipeline)
        args = relax_inputs(mod["main"])
        return measure(vm_runner(ex, args), time_cap=5.0, max_rounds=50).median * 1e3

    # ------------------------------------------------------------------ conversions
    def to_relax(self, name: str = "main") -> Any:
        return graph_module(self.to_tensor_graph(), name, opaque_vars=self.opaque_vars)

    def evaluate(self, feeds: dict) -> list[np.ndarray]:
        """Run the graph: with NumPy when every operator is in the registry, else built with TVM for llvm."""
        graph = self.to_tensor_graph()
        if not any(n.op == "opaque" for n in graph.topo_order()):
            return graph.evaluate(feeds)
        import tvm

        from ..runtime.check import run_relax

        mod = self.to_relax()
        ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
        args = [feeds[str(p.name)] for p in mod["main"].params]
        return list(run_relax(ex, args).values())

    @classmethod
    def wrap(cls, graph: TensorGraph, opaque_vars: dict, num_inputs: int) -> "TasoGraph":
        """A TasoGraph over an existing TensorGraph (an optimized or imported one)."""
        out = cls()
        out.store = graph.store
        out._outputs = list(graph.outputs)
        out._num_inputs = num_inputs
        out.opaque_vars = dict(opaque_vars)
        return out
