"""`load`: a model for `compile`, from an ONNX file or ModelProto, a Relax IRModule or a TASO graph (tvmc.load)."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..runtime.samples import InputSpec

log = logging.getLogger(__name__)

Shapes = Optional[Mapping[str, Sequence[int]]]


@dataclass
class Model:
    """A model ready to compile: its Relax module, and the ONNX model it came from (None for an IRModule or a
    TASO graph), whose inputs and outputs name the library's.

    `inputs` lists the run-time inputs (name, dims, dtype) in call order; `outputs` the output names."""

    mod: Any
    proto: Any = None
    shapes: Optional[dict] = None
    source: str = "the model"
    inputs: list[InputSpec] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs by name (an ONNX model's integer inputs within the ranges its checks use)."""
        if self.proto is not None:
            from ..runtime.check import random_feeds

            return random_feeds(self.proto, self.shapes, seed=seed)
        from ..runtime.check import random_array

        rng = np.random.default_rng(seed)
        return {s.name: random_array([d if isinstance(d, int) else 1 for d in s.dims], s.dtype, rng)
                for s in self.inputs}


def load(path_or_proto: Any, shapes: Shapes = None) -> Model:
    """A `Model` from an ONNX file (path) or `onnx.ModelProto`, a Relax `tvm.IRModule`, or a TASO graph
    (`taso_tvm.new_graph()`, `taso_tvm.taso`). `shapes` ({input: dims}) binds an ONNX model's symbolic dims.

    >>> model = taso_tvm.load("model.onnx", shapes={"input": [1, 3, 224, 224]})   # doctest: +SKIP
    """
    import onnx
    import tvm

    shapes = {k: list(v) for k, v in shapes.items()} if shapes else None
    if isinstance(path_or_proto, (str, os.PathLike, onnx.ModelProto)):
        return _load_onnx(path_or_proto, shapes)
    if isinstance(path_or_proto, tvm.IRModule):
        return _from_module(path_or_proto, "the module")
    if hasattr(path_or_proto, "to_relax"):  # a TASO graph (taso_tvm.api.Graph, taso_tvm.taso)
        return _from_module(path_or_proto.to_relax(), "the graph")
    raise TypeError(f"load() takes an ONNX file or ModelProto, a tvm.IRModule or a TASO graph, not "
                    f"{type(path_or_proto).__name__}")


def _load_onnx(path_or_proto: Union[str, os.PathLike, Any], shapes: Optional[dict]) -> Model:
    from ..onnx_io import ModelLoadError, read_onnx
    from ..onnx_io.sanity import checker_problem
    from ..onnx_io.weights import inline
    from ..progress import phase
    from ..runtime.samples import onnx_input_specs

    with phase("reading"):
        proto, label = read_onnx(os.fspath(path_or_proto) if isinstance(path_or_proto, os.PathLike)
                                 else path_or_proto)
    with phase("onnx.checker"):
        why = checker_problem(proto)
    if why:
        raise ModelLoadError(f"{label} is not a valid ONNX model (onnx.checker): {why}")
    proto = inline(proto)  # TVM holds the weights as constants anyway
    mod = import_for_tvm(proto, shapes)
    specs = [InputSpec(s.name, tuple(shapes[s.name]) if shapes and s.name in shapes else s.dims, s.dtype)
             for s in onnx_input_specs(proto)]
    return Model(mod, proto, shapes, label, specs, [o.name for o in proto.graph.output])


def _from_module(mod: Any, label: str) -> Model:
    from tvm import relax

    func = mod["main"]
    n = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs else len(func.params)
    specs = []
    for p in list(func.params)[:n]:
        dims = tuple(int(d) if hasattr(d, "value") else str(d) for d in p.ty.shape)
        specs.append(InputSpec(p.name, dims, str(p.ty.dtype)))
    out = func.body.ty
    count = len(out.fields) if isinstance(out, relax.TupleType) else 1
    return Model(mod, None, None, label, specs, [f"output_{i}" for i in range(count)])


def import_for_tvm(proto: Any, shapes: Optional[dict]) -> Any:
    """`load_onnx`; if TVM's frontend refuses the file and its shapes are bound (static, or `shapes`), fold the
    shape arithmetic with onnxsim at those shapes and import that instead."""
    from ..onnx_io import ModelLoadError, load_onnx
    from ..onnx_opt.prepare import fold_at, make_binding, symbolic_dims

    try:
        return load_onnx(proto, shapes=shapes)
    except ModelLoadError as first:
        if symbolic_dims(proto) and not shapes:
            dims = ", ".join(sorted(symbolic_dims(proto)))
            raise ModelLoadError(f"{first} (the model has symbolic dims {dims}: --input-shapes binds them)") from None
        folded, ok = fold_at(proto, make_binding(proto, shapes))
        if not ok:
            raise first from None
        try:
            mod = load_onnx(folded.model)
        except ModelLoadError:
            raise first from None
        log.warning("TVM's frontend needed the shape arithmetic folded at %s (onnxsim) to import this model",
                    folded.binding.label())
        return mod
