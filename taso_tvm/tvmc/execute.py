"""`run`: a compiled package (or a library file) on inputs by name; outputs by name and, with `repeat`, its
latency (tvmc.run / TVMCResult)."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

import numpy as np

from ..runtime.library import Signature
from .package import Package

log = logging.getLogger(__name__)

Inputs = Union[None, str, "os.PathLike[str]", Mapping[str, np.ndarray]]


@dataclass
class Timing:
    """Latency of `repeat` single runs in seconds."""

    median: float
    mean: float
    std: float
    repeat: int


@dataclass
class Result:
    """`outputs`: {output name: array} in the model's order; `timing`: with `repeat` > 0; `threads`: the TVM
    runtime threads on CPU (None on a GPU)."""

    outputs: dict = field(default_factory=dict)
    timing: Optional[Timing] = None
    threads: Optional[int] = None

    def get_output(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def save(self, path: "str | os.PathLike[str]") -> str:
        """Write the outputs to an .npz by name (atomically); returns the path (".npz" added if missing)."""
        from ..fileio import atomic_write

        path = os.fspath(path)
        path = path if path.endswith(".npz") else path + ".npz"
        atomic_write(path, lambda f: np.savez(f, **self.outputs))
        return path


def run(package_or_path: Union[Package, str, "os.PathLike[str]"], inputs: Inputs = None, device: Any = None,
        repeat: int = 0, threads: Optional[int] = None) -> Result:
    """Run a `Package` (or a library file `Package.export` wrote, checked against its signature before loading)
    on `inputs`: {name: array}, an .npz path (arrays named like the inputs), or None for random ones at the
    example shapes. Inputs are matched by name (names, dtypes and shapes checked). `device`: "cpu" (default),
    "cuda" or a tvm Device; `repeat` > 0 also times that many single runs; `threads`: TVM runtime threads on CPU
    (default: the physical cores, where nothing started the runtime yet).

    >>> result = taso_tvm.run("model.so", {"input": x}, repeat=10)     # doctest: +SKIP
    >>> result.outputs["output"].shape, result.timing.median            # doctest: +SKIP
    """
    from ..runtime.samples import match_sample, read_sample

    sample = None
    label = "inputs"
    if isinstance(inputs, (str, os.PathLike)):
        label = f"inputs '{os.fspath(inputs)}'"
        sample = read_sample(os.fspath(inputs))  # before loading any code
    elif inputs is not None:
        sample = {k: np.asarray(v) for k, v in inputs.items()}
    dev = _device(device)
    used = None
    if int(dev.dlpack_device_type()) == 1:  # kDLCPU
        from ..schedule.threads import request_threads, set_num_threads

        used = set_num_threads(request_threads(threads))
    package = package_or_path if isinstance(package_or_path, Package) else Package.load(package_or_path)
    sig = package.signature
    feeds = list(match_sample(sample, sig.inputs, label).values()) if sample is not None else signature_feeds(sig)
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(package.executable, dev)
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(v), dev) for v in feeds]
    outs = flatten(vm["main"](*tensors))
    names = package.output_names
    if len(names) != len(outs):
        names = [f"arr_{i}" for i in range(len(outs))]
    result = Result(dict(zip(names, outs)), None, used)
    if repeat > 0:
        res = vm.time_evaluator("main", dev, number=1, repeat=int(repeat))(*tensors)
        result.timing = Timing(float(res.median), float(res.mean), float(res.std), int(repeat))
    return result


def _device(device: Any) -> Any:
    import tvm

    if device is None or device == "cpu":
        return tvm.cpu()
    if device == "cuda":
        return tvm.cuda()
    if isinstance(device, str):
        from .target import TargetError

        raise TargetError(f"unknown device '{device}': use cpu or cuda")
    return device


def flatten(out: Any) -> list:
    """A VM result (a tensor or nested tuples of them) as a flat list of NumPy arrays."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    res: list = []
    for o in out:
        res.extend(flatten(o))
    return res


def vm_outputs(ex: Any, feeds: Mapping[str, np.ndarray], device: Any = None) -> list:
    """The outputs of a built module on `feeds` (in input order), as NumPy arrays."""
    import tvm
    from tvm import relax

    dev = device or tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    return flatten(vm["main"](*[tvm.runtime.tensor(v, dev) for v in feeds.values()]))


def signature_feeds(sig: Signature, seed: int = 0) -> list:
    """Random inputs for a library from its signature: floats standard normal, integers in the range the
    compile checks used, at the example shapes."""
    from ..runtime.check import random_array

    rng = np.random.default_rng(seed)
    example = sig.extra.get("example_shapes") if isinstance(sig.extra.get("example_shapes"), dict) else {}
    high = sig.extra.get("integer_high") if isinstance(sig.extra.get("integer_high"), dict) else {}
    out = []
    for spec in sig.inputs:
        shape = example.get(spec.name) or [d if isinstance(d, int) else 1 for d in spec.dims]
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer) and isinstance(high.get(spec.name), int):
            out.append(rng.integers(0, max(1, high[spec.name]), shape).astype(dtype))
        else:
            out.append(random_array(shape, dtype, rng))
    return out
