"""The Relax side: lift dataflow blocks into TensorGraphs, lower them back, and the TasoOptimize pass.

Everything here works on Relax IR (Relay is gone from TVM); the package keeps the name `relay_pass` that users
import.

Importing this package registers the `"taso"` Relax pipeline: `tvm.compile(mod, target, relax_pipeline="taso")`.
"""
from .lift import LiftedBlock, lift_block, lift_function
from .lower import lower_graph, lower_to_function
from .rewrite import rewrite_module
from .settings import Settings, resolve_cost, resolve_rules
from .taso_pass import PassReport, TasoOptimize, taso_pipeline

__all__ = ["LiftedBlock", "lift_block", "lift_function", "lower_graph", "lower_to_function", "rewrite_module",
           "PassReport", "TasoOptimize", "taso_pipeline", "Settings", "resolve_cost", "resolve_rules"]
