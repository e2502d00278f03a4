"""The TASO-compatible Python face: `import taso_tvm as taso; g = taso.new_graph(); ...`.

Method names and keywords follow TASO's Python API (python/taso/_cython/core.pyx), so TASO's own examples run.
A builder graph is a TensorGraph under construction; `graph.to_relax()` gives a Relax IRModule.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np

from .runtime.check import DEFAULT_ATOL, DEFAULT_RTOL
from .graph import NodeStore, TensorGraph, TensorRef, TensorType

_ACTS = {"NONE": "none", "RELU": "relu", "SIGMOID": "sigmoid", "TANH": "tanh"}


def _act(activation: str) -> str:
    key = str(activation).upper()
    if key not in _ACTS:
        raise ValueError(f"unknown activation '{activation}': use one of {', '.join(_ACTS)}")
    return _ACTS[key]


def _padding(padding: Union[str, Sequence[int]]) -> Union[str, tuple]:
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"unknown padding '{padding}': use SAME or VALID")
        return padding.upper()
    return tuple(padding)


class Tensor:
    """A tensor of a builder graph (TASO's PyTensor)."""

    __slots__ = ("graph", "ref")

    def __init__(self, graph: "Graph", ref: TensorRef):
        self.graph, self.ref = graph, ref

    @property
    def type(self) -> TensorType:
        return self.graph.store.type(self.ref)

    @property
    def nDim(self) -> int:  # noqa: N802  (TASO's name)
        return self.type.ndim

    @property
    def shape(self) -> tuple:
        return self.type.shape

    def dim(self, idx: int) -> int:
        return self.type.shape[idx]

    def __repr__(self) -> str:
        return f"Tensor({self.type})"


class Graph:
    """A graph built operator by operator, TASO style. Outputs default to the tensors nobody consumes."""

    def __init__(self, seed: int = 0):
        self.store = NodeStore()
        self._rng = np.random.default_rng(seed)
        self._created: list[TensorRef] = []
        self._outputs: Optional[list[TensorRef]] = None
        self._num_inputs = 0

    # ------------------------------------------------------------- helpers
    def _t(self, x: Tensor) -> TensorRef:
        if not isinstance(x, Tensor) or x.graph is not self:
            raise TypeError(f"expected a Tensor of this graph, got {type(x).__name__}")
        return x.ref

    def _op(self, op: str, inputs: Sequence[Tensor], **attrs: Any) -> list[Tensor]:
        outs = self.store.add(op, [self._t(x) for x in inputs], **attrs)
        self._created.extend(outs)
        return [Tensor(self, r) for r in outs]

    def _one(self, op: str, inputs: Sequence[Tensor], **attrs: Any) -> Tensor:
        return self._op(op, inputs, **attrs)[0]

    # ------------------------------------------------------------- sources
    def new_input(self, *, dims: Sequence[int], name: Optional[str] = None, dtype: str = "float32") -> Tensor:
        name = name or f"input{self._num_inputs}"
        self._num_inputs += 1
        return Tensor(self, self.store.input(name, TensorType(tuple(int(d) for d in dims), dtype)))

    def new_weight(self, *, dims: Sequence[int], data: Optional[Any] = None) -> Tensor:
        dims = tuple(int(d) for d in dims)
        if data is None:
            arr = self._rng.random(dims, dtype=np.float32)
        else:
            arr = np.asarray(data, dtype=np.float32)
            if arr.size != int(np.prod(dims)):
                raise ValueError(f"new_weight: data has {arr.size} elements, dims {dims} need {int(np.prod(dims))}")
            arr = arr.reshape(dims)
        return Tensor(self, self.store.weight(arr))

    # ------------------------------------------------------------- operators (TASO names and keywords)
    def conv2d(self, *, input: Tensor, weight: Tensor, strides: Sequence[int] = (1, 1),
               padding: Union[str, Sequence[int]] = "SAME", activation: str = "NONE", groups: Optional[int] = None
               ) -> Tensor:
        cin, wcin = input.dim(1), weight.dim(1)
        g = groups if groups is not None else (cin // wcin if wcin and cin % wcin == 0 else 1)
        return self._one("conv2d", [input, weight], strides=tuple(strides), padding=_padding(padding), groups=g,
                         activation=_act(activation))

    def matmul(self, input: Tensor, weight: Tensor, activation: str = "NONE") -> Tensor:
        return self._one("matmul", [input, weight], activation=_act(activation))

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        return self._one("add", [x, y])

    def sub(self, *, x: Tensor, y: Tensor) -> Tensor:
        return self._one("sub", [x, y])

    def mul(self, x: Tensor, y: Tensor) -> Tensor:
        return self._one("mul", [x, y])

    def div(self, *, x: Tensor, y: Tensor) -> Tensor:
        return self._one("div", [x, y])

    def relu(self, input: Tensor, inplace: bool = False) -> Tensor:
        return self._one("relu", [input])

    def sigmoid(self, input: Tensor, inplace: bool = False) -> Tensor:
        return self._one("sigmoid", [input])

    def tanh(self, input: Tensor, inplace: bool = False) -> Tensor:
        return self._one("tanh", [input])

    def exp(self, *, input: Tensor) -> Tensor:
        return self._one("exp", [input])

    def sqrt(self, *, input: Tensor) -> Tensor:
        return self._one("sqrt", [input])

    def gelu(self, input: Tensor) -> Tensor:
        return self._one("gelu", [input])

    def concat(self, axis: int, inputs: Sequence[Tensor]) -> Tensor:
        return self._one("concat", list(inputs), axis=int(axis))

    def split(self, input: Tensor, axis: int, sizes: Union[int, Sequence[int]]) -> list[Tensor]:
        return self._op("split", [input], axis=int(axis), sizes=sizes if isinstance(sizes, int) else tuple(sizes))

    def transpose(self, input: Tensor, perm: Sequence[int], shuffle: bool = False) -> Tensor:
        return self._one("transpose", [input], perm=tuple(perm))

    def reshape(self, input: Tensor, shape: Sequence[int]) -> Tensor:
        return self._one("reshape", [input], shape=tuple(shape))

    def maxpool2d(self, input: Tensor, kernels: Sequence[int], strides: Sequence[int],
                  padding: Union[str, Sequence[int]] = "SAME", activation: str = "NONE") -> Tensor:
        out = self._one("maxpool2d", [input], kernel=tuple(kernels), strides=tuple(strides), padding=_padding(padding))
        return self._activate(out, activation)

    def avgpool2d(self, *, input: Tensor, kernels: Sequence[int], strides: Sequence[int],
                  padding: Union[str, Sequence[int]] = "SAME", activation: str = "NONE") -> Tensor:
        out = self._one("avgpool2d", [input], kernel=tuple(kernels), strides=tuple(strides), padding=_padding(padding),
                        count_include_pad=False)
        return self._activate(out, activation)

    def batchnorm(self, input: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor,
                  epsilon: float = -1) -> Tensor:
        eps = 1e-5 if epsilon is None or epsilon < 0 else float(epsilon)
        return self._one("batchnorm", [input, scale, bias, mean, var], axis=1, epsilon=eps)

    def softmax(self, input: Tensor, axis: int = -1) -> Tensor:
        return self._one("softmax", [input], axis=int(axis))

    def layernorm(self, input: Tensor, scale: Tensor, bias: Tensor, axes: Sequence[int] = (-1,),
                  epsilon: float = 1e-5) -> Tensor:
        return self._one("layernorm", [input, scale, bias], axes=tuple(axes), epsilon=float(epsilon))

    def reduce_mean(self, *, input: Tensor, axes: Sequence[int], keepdims: bool = True) -> Tensor:
        return self._one("mean", [input], axes=tuple(axes), keepdims=bool(keepdims))

    def dropout(self, input: Tensor, rate: float = 0) -> Tensor:
        return input  # inference: identity, as in TASO

    identity = dropout

    def _activate(self, t: Tensor, activation: str) -> Tensor:
        act = _act(activation)
        return t if act == "none" else self._one(act, [t])

    # ------------------------------------------------------------- results
    def mark_output(self, *tensors: Tensor) -> None:
        """Declare the graph's outputs explicitly (default: every tensor no operator consumes)."""
        self._outputs = (self._outputs or []) + [self._t(t) for t in tensors]

    def outputs(self) -> list[TensorRef]:
        if self._outputs is not None:
            return list(self._outputs)
        used = {ref for r in self._created for ref in self.store.nodes[r[0]].inputs}
        seen, outs = set(), []
        for r in self._created:
            if r not in used and r not in seen:
                seen.add(r)
                outs.append(r)
        if not outs:
            raise ValueError("the graph has no operators, so no outputs")
        return outs

    def to_tensor_graph(self) -> TensorGraph:
        return TensorGraph(self.store, self.outputs())

    def to_relax(self, name: str = "main") -> Any:
        """The graph as a Relax IRModule with one function `name` taking the inputs in creation order."""
        return graph_module(self.to_tensor_graph(), name)

    def evaluate(self, feeds: dict) -> list[np.ndarray]:
        """Run the graph with the registry's NumPy semantics."""
        return self.to_tensor_graph().evaluate(feeds)


def graph_module(graph: TensorGraph, name: str = "main", opaque_vars: Optional[dict] = None) -> Any:
    """A TensorGraph as a Relax IRModule: one function whose parameters are the inputs in creation order.
    `opaque_vars`: the Relax vars each opaque node's expression reads, by node key and input position."""
    import tvm

    from .relay_pass.lower import lower_to_function

    order = [n.attrs["name"] for n in sorted(graph.inputs(), key=lambda n: n.id)]
    func = lower_to_function(graph, name, params=order, opaque_vars=opaque_vars).with_attr("global_symbol", name)
    return tvm.IRModule({name: func})


def new_graph(seed: int = 0) -> Graph:
    """A new, empty builder graph (TASO's `taso.new_graph()`)."""
    return Graph(seed)


def _graph_from(graph: TensorGraph, like: Graph) -> Graph:
    out = Graph()
    out.store = graph.store
    out._outputs = list(graph.outputs)
    out._num_inputs = like._num_inputs
    return out


def optimize(obj: Any, rules: Any = None, cost: Any = None, alpha: Optional[float] = None,
             budget: Optional[int] = None, time_limit: Optional[float] = None, target: Any = None,
             region_size: Optional[int] = None, config: Optional[str] = None, check: bool = False,
             check_rtol: float = DEFAULT_RTOL, check_atol: float = DEFAULT_ATOL, time_check: bool = True,
             time_cap: float = 20.0, shapes: Optional[dict] = None) -> Any:
    """Optimize an IRModule, an ONNX model (ModelProto) or a builder graph; returns the same kind.

    rules: RuleSet / rule file(s) / None (the shipped, verified library). cost: a cost model, a backend name
    ("auto", "analytic", "tvm", "ort"), a config file, or None (the configured default for `target`).
    check: compare the result with the original on random inputs (`taso_tvm.runtime.check` rules: an IRModule or graph
    built for llvm, an ONNX model in ONNX Runtime) and raise `taso_tvm.runtime.check.CheckFailed` when they differ.
    An ONNX model goes through the ONNX path (`taso_tvm.onnx_opt`): every rewritten region is checked anyway (one
    that differs is dropped, or raises with `check`), symbolic dims stay symbolic (`shapes` sets the shapes costed
    at), and unless `time_check` is off the result is returned only if ONNX Runtime runs it faster than the
    original (timed for `time_cap` seconds, or on to 30 rounds and at most three times that where runs are slow);
    else the original model comes back.
    """
    import onnx
    import tvm

    from .runtime.check import check_relax, check_tolerances
    from .relay_pass.taso_pass import TasoOptimize

    if check:
        check_tolerances(check_rtol, check_atol)
    settings = dict(rules=rules, cost=cost, alpha=alpha, budget=budget, time_limit=time_limit,
                    region_size=region_size, target=target, config=config)
    if isinstance(obj, tvm.IRModule):
        return TasoOptimize(**settings, check=check, check_rtol=check_rtol, check_atol=check_atol)(obj)
    if isinstance(obj, onnx.ModelProto):
        from .onnx_opt import optimize_onnx

        out, _ = optimize_onnx(obj, settings, shapes=shapes, check=True, strict=check, time_check=time_check,
                               time_cap=time_cap, rtol=check_rtol, atol=check_atol)
        return out
    if isinstance(obj, Graph):
        best, _ = search_graph(obj, rules=rules, cost=cost, alpha=alpha, budget=budget, time_limit=time_limit,
                               target=target, region_size=region_size, config=config)
        if check:
            check_relax(obj.to_relax(), graph_module(best), check_rtol, check_atol)
        return _graph_from(best, obj)
    raise TypeError(f"optimize() takes a tvm.IRModule, an onnx.ModelProto or a taso_tvm graph, not "
                    f"{type(obj).__name__}")


def search_graph(graph: Graph, rules: Any = None, cost: Any = None, alpha: Optional[float] = None,
                 budget: Optional[int] = None, time_limit: Optional[float] = None, target: Any = None,
                 region_size: Optional[int] = None, config: Optional[str] = None) -> tuple[TensorGraph, Any]:
    """The search on a builder graph with resolved settings: (best TensorGraph, the search's statistics)."""
    import tvm

    from .relay_pass import Settings
    from .search import optimize_graph

    s = Settings.resolve(config, overrides=dict(rules=rules, cost=cost, alpha=alpha, budget=budget,
                                                time_limit=time_limit, region_size=region_size))
    tgt = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    model, owned = s.resolve_cost(tgt)
    try:
        return optimize_graph(graph.to_tensor_graph(), s.resolve_rules(), model, s.search_config())
    finally:
        if owned:
            model.close()


def export_onnx(obj: Any, opset: Optional[int] = None, like: Any = None) -> Any:
    """An ONNX ModelProto for an IRModule, a TensorGraph or a builder graph.

    `like`: the ONNX model this one was imported from, whose input and output names are kept.
    """
    import tvm

    from .onnx_io.export import export_relax

    if isinstance(obj, Graph):
        mod = obj.to_relax()
    elif isinstance(obj, TensorGraph):
        mod = graph_module(obj)
    elif isinstance(obj, tvm.IRModule):
        mod = obj
    else:
        raise TypeError(f"export_onnx() takes a tvm.IRModule or a taso_tvm graph, not {type(obj).__name__}")
    names: dict = {}
    if like is not None:
        inits = {i.name for i in like.graph.initializer}
        names["input_names"] = [i.name for i in like.graph.input if i.name not in inits]
        names["output_names"] = [o.name for o in like.graph.output]
    return export_relax(mod, opset=opset, **names)
