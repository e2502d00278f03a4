"""What the Relax-level layout rewrites before scheduling (`conv_layout`, `pad_width`) share."""
from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

CONV2D = "relax.nn.conv2d"


def static_shape(expr: relax.Expr) -> list:
    """The expression's shape as ints, or [] when it is not static."""
    try:
        return [int(d) for d in expr.ty.shape]
    except (AttributeError, TypeError, ValueError):
        return []


def out_dtype(attrs: Any) -> Any:
    """A conv's `out_dtype` attribute as the op constructors take it (None: the input's)."""
    text = str(attrs.out_dtype) if attrs.out_dtype is not None else ""
    return None if text in ("", "void", "None") else text


def rewrite_functions(mod: tvm.IRModule, mutator: Any) -> tuple:
    """(module, mutator.changed) after `mutator` (a PyExprMutator over `mod`) visits every Relax function."""
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get(), mutator.changed
