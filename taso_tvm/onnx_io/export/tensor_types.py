"""Types and values for the Relax -> ONNX exporter: the dtype tables (Relax, ONNX, NumPy), queries on Relax types
(static or symbolic dims, rank, dtype, TIR scalars) and tensors to and from ``TensorProto``."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
from onnx import TensorProto, numpy_helper

import tvm
from tvm import relax


# --------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------
RELAX_TO_ONNX: Dict[str, int] = {
    "float32": TensorProto.FLOAT,
    "uint8": TensorProto.UINT8,
    "int8": TensorProto.INT8,
    "uint16": TensorProto.UINT16,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
    "float16": TensorProto.FLOAT16,
    "float64": TensorProto.DOUBLE,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "bfloat16": TensorProto.BFLOAT16,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
    "uint4": TensorProto.UINT4,
    "int4": TensorProto.INT4,
    "float4_e2m1fn": TensorProto.FLOAT4E2M1,
}
for _tvm_name, _onnx_name in (("float8_e8m0fnu", "FLOAT8E8M0"), ("uint2", "UINT2"), ("int2", "INT2"),
                              ("float6_e2m3fn", "FLOAT6E2M3"), ("float6_e3m2fn", "FLOAT6E3M2")):
    if _onnx_name in TensorProto.DataType.keys():
        RELAX_TO_ONNX[_tvm_name] = TensorProto.DataType.Value(_onnx_name)
ONNX_TO_RELAX = {v: k for k, v in RELAX_TO_ONNX.items()}
ONNX_TO_NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.UINT8: np.uint8,
    TensorProto.INT8: np.int8,
    TensorProto.UINT16: np.uint16,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.BOOL: np.bool_,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
}
FLOAT_TYPES = {
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.BFLOAT16,
}
INT_TYPES = {
    TensorProto.UINT8,
    TensorProto.INT8,
    TensorProto.UINT16,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT32,
    TensorProto.UINT64,
}
SIGNED_TO_UNSIGNED = {
    TensorProto.INT8: TensorProto.UINT8,
    TensorProto.INT16: TensorProto.UINT16,
    TensorProto.INT32: TensorProto.UINT32,
    TensorProto.INT64: TensorProto.UINT64,
}

# "tensor(float)" <-> TensorProto.FLOAT, as written in ONNX schemas.
ELEM_TO_TYPESTR = {v: f"tensor({k.lower()})" for k, v in TensorProto.DataType.items()}
TYPESTR_TO_ELEM = {v: k for k, v in ELEM_TO_TYPESTR.items()}


def onnx_dtype(dtype) -> int:
    """Relax dtype (str / DataType) -> ONNX element type."""
    s = str(dtype)
    if s not in RELAX_TO_ONNX:
        raise ValueError(f"element type '{s or 'unknown'}' has no ONNX equivalent")
    return RELAX_TO_ONNX[s]


# --------------------------------------------------------------------------------------
# small Relax helpers
# --------------------------------------------------------------------------------------
def is_prim(e) -> bool:
    return tvm.ir.is_prim_expr(e)


def is_tir_var(e) -> bool:
    return tvm.ir.is_prim_var(e)


def _relax_tensor_type(expr_or_ty: Any) -> Optional[relax.TensorType]:
    """The Relax TensorType of an expression or type, or None (not the graph's TensorType: see
    graph.ops.relax_util.tensor_type)."""
    ty = getattr(expr_or_ty, "ty", expr_or_ty)
    return ty if isinstance(ty, relax.TensorType) else None


def type_dims(ty) -> Optional[list]:
    """Dims of a TensorType as a list of int / PrimExpr, or None when the rank is unknown
    or the shape is not a ShapeExpr."""
    ty = _relax_tensor_type(ty)
    if ty is None:
        return None
    shape = ty.shape
    if isinstance(shape, relax.ShapeExpr):
        return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape.values]
    return None


def static_dims(ty) -> Optional[List[int]]:
    """Dims as python ints, or None if any dim is symbolic / unknown."""
    dims = type_dims(ty)
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return dims


def rank_of(expr_or_ty) -> int:
    ty = _relax_tensor_type(expr_or_ty)
    if ty is None:
        return -1
    return int(ty.ndim)


def dtype_of(expr_or_ty) -> str:
    ty = _relax_tensor_type(expr_or_ty)
    return str(ty.dtype) if ty is not None else ""


def prim_dtype(e) -> str:
    """dtype string of a tir PrimExpr."""
    dt = getattr(e, "dtype", None)
    if dt is None:
        dt = getattr(e, "ty", None)
    return str(dt)


def prim_to_py(v):
    """IntImm / FloatImm / String / Array -> python value (recursively)."""
    if v is None:
        return None
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tvm.tirx.IntImm):
        if prim_dtype(v) == "bool":
            return bool(v.value)
        return int(v.value)
    if isinstance(v, tvm.tirx.FloatImm):
        return float(v.value)
    if isinstance(v, tvm.ir.StringImm):
        return str(v.value)
    if hasattr(v, "__len__") and not isinstance(v, (str, bytes)) and not is_prim(v):
        return [prim_to_py(x) for x in v]
    s = str(v)
    return s


def tensor_to_numpy(t) -> np.ndarray:
    """tvm.runtime.Tensor -> numpy without a copy where DLPack allows it."""
    try:
        a = np.from_dlpack(t)
        if str(a.dtype) == str(t.dtype):
            return a
    except Exception:  # exotic dtypes (bfloat16, float8, ...) are not DLPack-exportable to numpy
        pass
    return t.numpy()


def fill_tensor_proto(t: TensorProto, name: str, arr: np.ndarray, elem: int) -> None:
    """Write ``arr`` into ``t`` (in place: large weights are copied only once)."""
    t.name = name
    t.data_type = elem
    a = np.asarray(arr)
    t.dims.extend(a.shape)
    if elem in ONNX_TO_NP:
        a = a.astype(ONNX_TO_NP[elem], copy=False)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        if elem == TensorProto.BOOL:
            a = a.astype(np.uint8)
        t.raw_data = np.ascontiguousarray(a).tobytes() if a.ndim else a.tobytes()
        return
    t.CopyFrom(make_tensor_proto(a, elem))
    t.name = name


def make_tensor_proto(arr: np.ndarray, elem: int) -> TensorProto:
    """numpy array -> TensorProto of element type ``elem`` (bfloat16 / float8 via raw bits)."""
    if elem in ONNX_TO_NP:
        a = np.asarray(arr).astype(ONNX_TO_NP[elem], copy=False)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        return numpy_helper.from_array(a)
    if elem == TensorProto.BFLOAT16:
        a = np.asarray(arr)
        if a.dtype.itemsize == 2 and a.dtype.kind != "f":
            bits = a.view(np.uint16)
        elif str(a.dtype) == "bfloat16":
            bits = a.view(np.uint16)
        else:
            f = a.astype(np.float32)
            u = f.view(np.uint32)
            # round-to-nearest-even
            bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        t = TensorProto()
        t.data_type = TensorProto.BFLOAT16
        t.dims.extend(a.shape)
        t.raw_data = np.asarray(bits).copy(order="C").tobytes()
        return t
    # other exotic types: raw bytes of the same width
    a = np.asarray(arr).copy(order="C")
    t = TensorProto()
    t.data_type = elem
    t.dims.extend(a.shape)
    t.raw_data = a.tobytes()
    return t
