"""Imports every converter module so that ``registry.CONVERTERS`` is complete.

The table maps Relax operator names to converter functions
``convert(ctx, call, attrs, args) -> ONNX value``; see the ``converters_*`` modules:

* ``converters_elementwise`` - unary / binary / comparison / logical / bitwise / casts / activations
* ``converters_nn``          - convolutions, matmul / gemm, pooling, padding
* ``converters_norm_attention`` - normalizations, softmax, attention, LRN
* ``converters_shape``       - reshape / transpose / concat / split / slicing / gather / scatter / creation
* ``converters_reduction``   - reductions, arg-reductions, cumsum, sort / topk, unique
* ``converters_misc``        - quantization, image and vision operators
* ``converters_tir``         - ``call_tir`` of the PrimFuncs the ONNX frontend emits
"""
from . import (  # noqa: F401
    converters_elementwise,
    converters_misc,
    converters_nn,
    converters_norm_attention,
    converters_reduction,
    converters_shape,
    converters_tir,
)
