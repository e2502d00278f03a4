"""The cost model: partition a TensorGraph into the kernels TVM's FuseOps would make, measure each distinct kernel
on the target (TVM or ONNX Runtime) or estimate it (roofline), cache every measurement, and sum.

>>> from taso_tvm.cost import CostModel, load_cost_config
>>> with CostModel(load_cost_config("configs/cpu.yaml")) as cm:
...     ms = cm.graph_cost(graph)
"""
from . import op_facets  # noqa: F401  (declares and registers the cost facets)
from .backends import Backend, Measurement, RpcError, make_backend
from .cache import CostCache
from .config import CostConfig, CostConfigError, load_cost_config, parse_target
from .fusion import Partitioner
from .kernel import Kernel, KernelSig
from .model import CostModel, KernelReport

__all__ = ["CostModel", "KernelReport", "CostConfig", "CostConfigError", "load_cost_config", "parse_target",
           "CostCache", "Partitioner", "Kernel", "KernelSig", "Backend", "Measurement", "RpcError", "make_backend"]
