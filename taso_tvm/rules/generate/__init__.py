"""The rule generator: discover graph substitutions by enumeration, as TASO does, and keep the verified ones.

>>> from taso_tvm.rules.generate import generate_rules
>>> result = generate_rules(2, out="generated.yaml")   # every rule in the file is verified
"""
from .driver import GenerateResult, Settings, generate_rules, generatable_ops, make_settings

__all__ = ["GenerateResult", "Settings", "generate_rules", "generatable_ops", "make_settings"]
