"""Test configuration: TVM uses both cores; heavy models are marked slow (run them with `pytest -m slow`)."""
import os
import sys

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, os.path.dirname(__file__))
