"""A kernel signature as a tiny Relax module: its external inputs become parameters of `main`, its operators are
emitted with the registry's `lower`, and the tensors it writes are returned."""
from __future__ import annotations

import re
from typing import Any, Optional

import tvm
from tvm import relax

from .kernel import KernelSig, rebuild

NODE_NAME = re.compile(r"n(\d+)_\d+(?:_\d+)?")  # (the exporter may add a suffix to keep names unique)


def kernel_module(sig: KernelSig, names: bool = False) -> tvm.IRModule:
    """IRModule with one Relax function `main(p0, p1, ...)` computing the kernel. `names`: each node's outputs
    emitted here are named `n<node index>_<output>` (`node_of_name` reads them back)."""
    if any(op == "opaque" for op in sig.ops):
        raise ValueError("opaque nodes cannot be rebuilt from a signature")
    store, ins, nodes = rebuild(sig)
    params = [relax.Var(f"p{i}", relax.TensorType(list(s), d)) for i, (s, d, _) in enumerate(sig.inputs)]
    env: dict[tuple, Any] = {ref: p for ref, p in zip(ins, params)}
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for idx, node in enumerate(nodes):
                args = [env[r] for r in node.inputs]
                in_types = [store.type(r) for r in node.inputs]
                out = node.opdef.lower(bb, args, node.attrs, in_types)
                vals = list(out) if isinstance(out, (list, tuple)) else [out]
                for j, (ref, v) in enumerate(zip(node.outputs, vals)):
                    if isinstance(v, relax.Var):
                        env[ref] = v
                    else:
                        env[ref] = bb.emit(v, name_hint=f"n{idx}_{j}") if names else bb.emit(v)
            outs = [bb.emit_output(env[nodes[i].outputs[j]]) for i, j in sig.outputs]
        bb.emit_func_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
    return bb.get()


def node_of_name(name: str) -> Optional[int]:
    """The signature node index a `kernel_module(..., names=True)` tensor name belongs to, or None."""
    m = NODE_NAME.fullmatch(name)
    return int(m.group(1)) if m else None
