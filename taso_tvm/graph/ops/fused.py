"""The runtime's fused operators, each defined by its decomposition into primitive operators (`decompose.py`).

| operator | decomposition | ONNX Runtime (com.microsoft) | standard ONNX |
|---|---|---|---|
| `mha(q, k, v, scale, mask[, fill])` | heads split, softmax(q kᵀ · scale + mask) v, heads merged | MultiHeadAttention | |
| `attention(x, w, b, scale, mask[, fill])` | `mha` of the three projections x w + b | Attention | |
| `skip_layernorm(x, skip, gamma, beta, bias)` | layer norm of x + bias + skip (last axis) | SkipLayerNormalization | |
| `bias_gelu(x, b)` | gelu(x + b) (erf form) | BiasGelu | |
| `fast_gelu(x, b)` | gelu_tanh(x + b) | FastGelu | |
| `quick_gelu(x)` | x · sigmoid(alpha · x) | QuickGelu | |
| `erf_gelu(x[, b], r, o, h)` | (x + b) (erf((x + b) r) + o) h: GELU's erf form with its constants | Gelu / BiasGelu | Gelu (20) |
| `tanh_gelu(x[, b], k, c, o, h)` | v (tanh((v + c v³) k) + o) h, v = x + b: GELU's tanh form with its constants | FastGelu | |
| `fused_matmul(a, b)` | alpha · op(a) @ op(b), op a transpose of the last two axes or none | FusedMatMul | |

`scale` is a scalar tensor (a weight when exported: the runtimes take it as an attribute); `mask` is an additive
mask that broadcasts to [batch, heads, query, key] (a scalar zero when there is none); `fill`, when given, is the
NaN guard torch's exports put after the softmax (`where(isnan(p), fill, p)`: a row whose every key is masked with
-inf gives 0 instead of NaN). ONNX Runtime's attention has no such guard: the exporter writes it on the output
(IsNaN + Where after the fused node), which gives the same result except where the value input itself holds a NaN
(the guard then also zeroes that output, where the decomposition propagates it). ONNX Runtime's kernels
re-associate floating-point sums (fused bias adds, one-pass moments, blocked softmax): their outputs match the
decomposition within the tolerances of `taso_tvm.runtime.check`, not bit for bit.
"""
from __future__ import annotations

from typing import Any, Sequence

from tvm import relax

from .decompose import Evaluator, register_decomposed
from ..types import GraphError, TensorType

R = relax.op


# ---------------------------------------------------------------- attention
def split_heads(e: Evaluator, x: Any, heads: int, perm: tuple = (0, 2, 1, 3)) -> Any:
    """[B, S, heads * D] -> its heads, [B, S, heads, D] transposed by `perm` ([B, heads, S, D] by default)."""
    b, s, d = e.shape(x)
    return e.op("transpose", e.op("reshape", x, shape=(b, s, heads, d // heads)), perm=perm)


def merge_heads(e: Evaluator, o: Any) -> Any:
    """[B, heads, S, D] -> [B, S, heads * D]."""
    b, h, s, d = e.shape(o)
    return e.op("reshape", e.op("transpose", o, perm=(0, 2, 1, 3)), shape=(b, s, h * d))


def _mha(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    q, k, v, scale, mask = x[:5]
    n = a["num_heads"]
    qh = split_heads(e, q, n)
    kt = split_heads(e, k, n, (0, 2, 3, 1))
    vh = split_heads(e, v, n)
    s = e.op("add", e.op("mul", e.op("matmul", qh, kt), scale), mask)
    p = e.op("softmax", s, axis=-1)
    if len(x) > 5:  # the NaN guard: a row whose every key is masked with -inf gives `fill` (0) instead of NaN
        p = e.op("where", e.op("isnan", p), x[5], p)
    return [merge_heads(e, e.op("matmul", p, vh))]


def _check_heads(name: str, n: Any, *widths: Any) -> None:
    if not isinstance(n, int) or n < 1:
        raise GraphError(f"{name}: num_heads must be a positive integer, got {n!r}")
    for w in widths:
        if not isinstance(w, int) or w % n:
            raise GraphError(f"{name}: width {w} is not divisible by {n} heads")


def check_scalar(name: str, t: TensorType) -> None:
    if t.size != 1 or t.ndim > 1:
        raise GraphError(f"{name}: scale must be a scalar, got shape {t.shape}")


def check_mask(name: str, m: TensorType, want: tuple) -> None:
    if m.ndim > 4 or any(d not in (1, w) for d, w in zip(m.shape[::-1], want[::-1])):
        raise GraphError(f"{name}: mask shape {m.shape} does not broadcast to {want}")


def check_arity(name: str, t: Sequence[TensorType]) -> None:
    if len(t) not in (5, 6):
        raise GraphError(f"{name}: takes 5 inputs (6 with the NaN guard's fill value), got {len(t)}")
    if len(t) == 6 and t[5].size != 1:
        raise GraphError(f"{name}: the NaN guard's fill value must be a scalar, got shape {t[5].shape}")


def _mha_check(t: Sequence[TensorType], a: dict) -> None:
    check_arity("mha", t)
    q, k, v, scale, mask = t[:5]
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise GraphError("mha: query, key and value must be [batch, sequence, hidden]")
    if k.shape[:2] != v.shape[:2] or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise GraphError(f"mha: shapes {q.shape}, {k.shape}, {v.shape} do not fit")
    _check_heads("mha", a["num_heads"], q.shape[2], v.shape[2])
    check_scalar("mha", scale)
    check_mask("mha", mask, (q.shape[0], a["num_heads"], q.shape[1], k.shape[1]))


def _heads_layout(bb: relax.BlockBuilder, x: relax.Expr, t: TensorType, n: int) -> relax.Expr:
    b, s, d = t.shape
    return bb.emit(R.reshape(x, [b, s, n, d // n]))


def _mha_relax(bb: relax.BlockBuilder, args: Sequence[Any], a: dict, t: Sequence[TensorType]) -> Any:
    """Relax's own attention (layout [batch, sequence, heads, head size]) with the scale folded in when constant."""
    q, k, v, scale, mask = args[:5]
    n = a["num_heads"]
    if len(args) > 5:  # Relax's attention has no NaN guard: the decomposition
        from .decompose import RelaxEvaluator
        return [e for e, _ in _mha(RelaxEvaluator(bb), list(zip(args, t)), a)][0]
    qh, kh, vh = (_heads_layout(bb, x, ty, n) for x, ty in zip(args[:3], t[:3]))
    b, sq, _ = t[0].shape
    mshape = (b, n, sq, t[1].shape[1])
    bias = bb.emit(R.broadcast_to(mask, list(mshape))) if t[4].shape != mshape else mask
    qh = bb.emit(R.multiply(qh, R.reshape(scale, [])))
    o = bb.emit(R.nn.attention(qh, kh, vh, bias, scale=1.0))
    return R.reshape(o, [b, sq, n * (t[2].shape[2] // n)])


MHA = register_decomposed(
    "mha", None, _mha, attrs={"num_heads": None}, check=_mha_check, relax_lower=_mha_relax,
    doc="multi-head attention on projected query/key/value [B, S, heads*D]: softmax(q kᵀ · scale + mask) v")


def _attention(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    inp, w, bias = x[:3]
    y = e.op("add", e.op("matmul", inp, w), bias)
    width = e.shape(w)[-1] // 3
    q, k, v = e.op("split", y, axis=-1, sizes=(width, width, width))
    return _mha(e, [q, k, v] + list(x[3:]), a)


def _attention_check(t: Sequence[TensorType], a: dict) -> None:
    check_arity("attention", t)
    x, w, b, scale, mask = t[:5]
    if x.ndim != 3 or w.ndim != 2 or b.ndim != 1 or w.shape[1] % 3 or b.shape[0] != w.shape[1]:
        raise GraphError(f"attention: input {x.shape}, weights {w.shape}, bias {b.shape} do not fit")
    _check_heads("attention", a["num_heads"], w.shape[1] // 3)
    check_scalar("attention", scale)
    check_mask("attention", mask, (x.shape[0], a["num_heads"], x.shape[1], x.shape[1]))


ATTENTION = register_decomposed(
    "attention", None, _attention, attrs={"num_heads": None}, check=_attention_check,
    doc="self-attention with packed projections: mha of the three thirds of x w + b")


# ---------------------------------------------------------------- normalization
def _skip_ln(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    inp, skip, gamma, beta, bias = x[:5]
    s = e.op("add", e.op("add", inp, bias), skip)
    return [e.op("layernorm", s, gamma, beta, *x[5:], axes=(-1,), epsilon=a["epsilon"])]


def _skip_ln_check(t: Sequence[TensorType], a: dict) -> None:
    if len(t) not in (5, 6) or (len(t) == 6 and t[5].size != 1):
        raise GraphError("skip_layernorm: takes x, skip, gamma, beta, bias and, optionally, a one-element epsilon")
    x, skip, gamma, beta, bias = t[:5]
    h = x.shape[-1] if x.ndim else None
    if x.ndim < 2 or skip.shape != x.shape or any(p.shape != (h,) for p in (gamma, beta)) or \
            bias.shape not in ((h,), (), (1,)):
        raise GraphError(f"skip_layernorm: shapes {[ty.shape for ty in t]} do not fit")


SKIP_LAYERNORM = register_decomposed(
    "skip_layernorm", None, _skip_ln, attrs={"epsilon": 1e-5}, check=_skip_ln_check,
    doc="layer normalisation (last axis) of input + bias + skip; epsilon from a one-element sixth input when given")


# ---------------------------------------------------------------- GELU forms
def _bias_act(act: str) -> Any:
    def program(e: Evaluator, x: Sequence[Any], a: dict) -> list:
        return [e.op(act, e.op("add", x[0], x[1]))]

    return program


def _bias_check(name: str) -> Any:
    def check(t: Sequence[TensorType], a: dict) -> None:
        x, b = t
        if x.ndim < 1 or b.shape != (x.shape[-1],):
            raise GraphError(f"{name}: bias {b.shape} is not a vector of the last axis of {x.shape}")

    return check


BIAS_GELU = register_decomposed("bias_gelu", 2, _bias_act("gelu"), attrs={}, check=_bias_check("bias_gelu"),
                                doc="gelu (erf form) of x + bias")
FAST_GELU = register_decomposed("fast_gelu", 2, _bias_act("gelu_tanh"), attrs={}, check=_bias_check("fast_gelu"),
                                doc="gelu (tanh approximation) of x + bias")


def _erf_gelu(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    """x (erf(x r) + o) h, the erf GELU as exporters write it (r = 1/sqrt 2, o = 1, h = 1/2 make it GELU); with a
    bias input first, of x + b."""
    v = x[0] if len(x) == 4 else e.op("add", x[0], x[1])
    r, o, h = x[-3:]
    return [e.op("mul", e.op("mul", v, e.op("add", e.op("erf", e.op("mul", v, r)), o)), h)]


def _gelu_form_check(name: str, constants: str) -> Any:
    """The check of a GELU form taking x[, bias] and then one-element constants (their names, space-separated)."""
    n = len(constants.split())

    def check(t: Sequence[TensorType], a: dict) -> None:
        if len(t) not in (n + 1, n + 2) or any(c.size != 1 for c in t[-n:]):
            raise GraphError(f"{name}: takes x[, bias], and {n} one-element constants {constants}")
        if len(t) == n + 2 and t[1].shape != (t[0].shape[-1],):
            raise GraphError(f"{name}: bias {t[1].shape} is not a vector of the last axis of {t[0].shape}")

    return check


ERF_GELU = register_decomposed(
    "erf_gelu", None, _erf_gelu, attrs={}, check=_gelu_form_check("erf_gelu", "r o h"),
    doc="x (erf(x r) + o) h (of x + bias with five inputs): GELU when r = 1/sqrt 2, o = 1, h = 1/2")


def _tanh_gelu(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    """v (tanh((v + v v v c) k) + o) h, the tanh GELU as exporters write it (k = sqrt(2/pi), c = 0.044715, o = 1,
    h = 1/2 make it GELU's tanh approximation); v is x, or x + b with a bias input first."""
    v = x[0] if len(x) == 5 else e.op("add", x[0], x[1])
    k, c, o, h = x[-4:]
    cube = e.op("mul", e.op("mul", v, e.op("mul", v, v)), c)
    t = e.op("tanh", e.op("mul", e.op("add", v, cube), k))
    return [e.op("mul", e.op("mul", v, e.op("add", t, o)), h)]


TANH_GELU = register_decomposed(
    "tanh_gelu", None, _tanh_gelu, attrs={}, check=_gelu_form_check("tanh_gelu", "k c o h"),
    doc="x (tanh((x + c x³) k) + o) h (of x + bias with six inputs): GELU's tanh form when k = sqrt(2/pi), "
        "c = 0.044715, o = 1, h = 1/2")


def _quick_gelu(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    """x sigmoid(alpha x); with a second input, alpha is that one-element tensor (the attribute is then unused)."""
    v = x[0]
    alpha = x[1] if len(x) == 2 else e.const(a["alpha"], v)
    return [e.op("mul", v, e.op("sigmoid", e.op("mul", v, alpha)))]


def _quick_gelu_check(t: Sequence[TensorType], a: dict) -> None:
    if len(t) not in (1, 2) or (len(t) == 2 and t[1].size != 1):
        raise GraphError("quick_gelu: takes x and, optionally, a one-element alpha")


QUICK_GELU = register_decomposed("quick_gelu", None, _quick_gelu, attrs={"alpha": 1.702}, check=_quick_gelu_check,
                                 doc="x * sigmoid(alpha * x); alpha from a one-element second input when given")


# ---------------------------------------------------------------- matrix products
def _swap_last(e: Evaluator, x: Any) -> Any:
    nd = len(e.shape(x))
    return e.op("transpose", x, perm=tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _fused_matmul(e: Evaluator, x: Sequence[Any], a: dict) -> list:
    p, q = x
    if a["trans_a"]:
        p = _swap_last(e, p)
    if a["trans_b"]:
        q = _swap_last(e, q)
    y = e.op("matmul", p, q)
    return [y if float(a["alpha"]) == 1.0 else e.op("mul", y, e.const(a["alpha"], y))]


def _fused_matmul_check(t: Sequence[TensorType], a: dict) -> None:
    for flag, ty in (("trans_a", t[0]), ("trans_b", t[1])):
        if a[flag] not in (0, 1, True, False):
            raise GraphError(f"fused_matmul: {flag} must be 0 or 1")
        if a[flag] and ty.ndim < 2:
            raise GraphError(f"fused_matmul: {flag} on a rank-{ty.ndim} operand")


FUSED_MATMUL = register_decomposed(
    "fused_matmul", 2, _fused_matmul, attrs={"trans_a": 0, "trans_b": 0, "alpha": 1.0}, check=_fused_matmul_check,
    doc="alpha * op(a) @ op(b), op transposing the last two axes when trans_a / trans_b is set")

FUSED_OPS = ("mha", "attention", "skip_layernorm", "bias_gelu", "fast_gelu", "quick_gelu", "fused_matmul", "erf_gelu",
             "tanh_gelu")

__all__ = ["FUSED_OPS", "ERF_GELU", "TANH_GELU", "MHA", "ATTENTION", "SKIP_LAYERNORM", "BIAS_GELU", "FAST_GELU",
           "QUICK_GELU", "FUSED_MATMUL"]
