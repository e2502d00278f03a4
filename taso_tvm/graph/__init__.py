"""Operator registry and TensorGraph: the search's small pure-Python graph."""
from .ops import OPS, OpDef, get_op, register
from .tensor_graph import CycleError, Node, NodeStore, TensorGraph, TensorRef, fold_weights, weight_array
from .types import GraphError, TensorType

__all__ = ["OPS", "OpDef", "get_op", "register", "CycleError", "Node", "NodeStore", "TensorGraph", "TensorRef",
           "weight_array", "fold_weights", "GraphError", "TensorType"]
