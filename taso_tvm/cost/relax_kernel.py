"""A kernel signature as a tiny Relax module: its external inputs become parameters of `main`, its operators are
emitted with the registry's `lower`, and the tensors it writes are returned."""
from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from .kernel import KernelSig, rebuild


def kernel_module(sig: KernelSig) -> tvm.IRModule:
    """IRModule with one Relax function `main(p0, p1, ...)` computing the kernel."""
    if any(op == "opaque" for op in sig.ops):
        raise ValueError("opaque nodes cannot be rebuilt from a signature")
    store, ins, nodes = rebuild(sig)
    params = [relax.Var(f"p{i}", relax.TensorType(list(s), d)) for i, (s, d, _) in enumerate(sig.inputs)]
    env: dict[tuple, Any] = {ref: p for ref, p in zip(ins, params)}
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for node in nodes:
                args = [env[r] for r in node.inputs]
                in_types = [store.type(r) for r in node.inputs]
                out = node.opdef.lower(bb, args, node.attrs, in_types)
                vals = list(out) if isinstance(out, (list, tuple)) else [out]
                for ref, v in zip(node.outputs, vals):
                    env[ref] = v if isinstance(v, relax.Var) else bb.emit(v)
            outs = [bb.emit_output(env[nodes[i].outputs[j]]) for i, j in sig.outputs]
        bb.emit_func_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
    return bb.get()
