"""The operator registry: importing this package registers every operator."""
from .base import OPS, RELAX_TO_OP, OpDef, get_op, register  # noqa: F401
from .facets import FacetMissing, declare_facet, facet, register_facet  # noqa: F401
from . import source, elementwise, nn, tensor, linalg, weight_helpers, select, slice, gather, fused, fused_norm, rms_norm, rotary, grouped_attention  # noqa: F401  (registration side effects)

__all__ = ["OPS", "RELAX_TO_OP", "OpDef", "get_op", "register", "FacetMissing", "declare_facet", "facet", "register_facet"]
