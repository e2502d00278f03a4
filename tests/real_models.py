"""The real-model set for tests: ONNX files from other people's exporters, listed in a manifest.

Two folders hold it, both made by benchmarks/real_models/make_real_models.py:
- tests/data/real_models/: small copies, committed (`committed_models()`);
- the cache (TASO_TVM_REAL_MODELS, default ~/.cache/taso_tvm/real_models/): full-size models and ONNX files
  shipped in pip packages, built on demand (`cache_models()` skips the calling test when it is absent).

Each manifest entry names the model's inputs with their symbolic dims, two test values per dim (the first a
representative one) and the values an input may hold; `feeds(entry, dims)` makes valid random inputs from it.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
import pytest

COMMITTED_DIR = Path(__file__).parent / "data" / "real_models"
CACHE_ENV = "TASO_TVM_REAL_MODELS"
MANIFEST = "manifest.json"
REGENERATE = "python benchmarks/real_models/make_real_models.py  (in a venv with torch; see its README.md)"


@dataclasses.dataclass(frozen=True)
class RealModel:
    """One model of the set: its file and its manifest entry."""

    path: Path
    entry: dict[str, Any]

    @property
    def name(self) -> str:
        return self.entry["name"]

    @property
    def dims(self) -> dict[str, list[int]]:
        return self.entry["dims"]

    def dim_values(self) -> list[dict[str, int]]:
        """The two test points: every symbolic dim at its first value, then every one at its second."""
        return dim_values(self.entry)

    def load(self) -> onnx.ModelProto:
        return onnx.load(str(self.path))


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "taso_tvm" / "real_models"))


def read_manifest(folder: Path) -> list[RealModel]:
    """The models a folder's manifest lists, in manifest order; [] when the folder has no manifest."""
    path = folder / MANIFEST
    if not path.exists():
        return []
    return [RealModel(folder / e["file"], e) for e in json.loads(path.read_text())["models"]]


def committed_models() -> list[RealModel]:
    """The small committed copies (always present in a checkout)."""
    return read_manifest(COMMITTED_DIR)


def cache_models(names: list[str] | None = None) -> list[RealModel]:
    """The full-size models of the cache, or skip the calling test with the reason and the command that builds
    them. `names` picks some (all must be there)."""
    folder = cache_dir()
    models = [m for m in read_manifest(folder) if m.path.exists()]
    if not models:
        pytest.skip(f"real-model cache {folder} is absent: build it with {REGENERATE}")
    if names is not None:
        have = {m.name: m for m in models}
        missing = [n for n in names if n not in have]
        if missing:
            pytest.skip(f"real model(s) {', '.join(missing)} not in the cache {folder}: build them with {REGENERATE}")
        models = [have[n] for n in names]
    return models


def cache_manifest_models() -> list[RealModel]:
    """The cache's models for parametrizing at collection time (no skip; [] when absent)."""
    return [m for m in read_manifest(cache_dir()) if m.path.exists()]


def dim_values(entry: dict[str, Any]) -> list[dict[str, int]]:
    return [{name: values[k] for name, values in entry["dims"].items()} for k in range(2)]


def input_shape(inp: dict[str, Any], dims: dict[str, int]) -> list[int]:
    return [d if isinstance(d, int) else int(dims[d]) for d in inp["shape"]]


def feeds(entry: dict[str, Any], dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Valid random inputs for a manifest entry with its symbolic dims at `dims` (default: the first values).

    Inputs with `values` take one of them; `pattern: padding_mask` gives each row ones then zeros (at least one 1,
    the first row full); integer inputs draw from `range` [low, high); float inputs draw uniformly from `range`
    when given, from a standard normal otherwise.
    """
    dims = dim_values(entry)[0] if dims is None else dims
    missing = {d for inp in entry["inputs"] for d in inp["shape"] if isinstance(d, str)} - set(dims)
    if missing:
        raise KeyError(f"{entry['name']}: no value for symbolic dim(s) {', '.join(sorted(missing))}")
    rng = np.random.default_rng(seed)
    out = {}
    for inp in entry["inputs"]:
        shape = input_shape(inp, dims)
        dtype = np.dtype(inp["dtype"])
        if "values" in inp:
            a = np.asarray(rng.choice(np.array(inp["values"], dtype=dtype), size=shape), dtype=dtype)
        elif inp.get("pattern") == "padding_mask":
            lengths = rng.integers(1, shape[-1] + 1, size=shape[:-1])
            lengths.reshape(-1)[:1] = shape[-1]
            a = (np.arange(shape[-1]) < lengths[..., None]).astype(dtype)
        elif dtype.kind in "iu":
            lo, hi = inp.get("range", (0, 2))
            a = rng.integers(int(lo), int(hi), size=shape).astype(dtype)
        elif "range" in inp:
            lo, hi = inp["range"]
            a = rng.uniform(lo, hi, size=shape).astype(dtype)
        else:
            a = rng.standard_normal(shape).astype(dtype)
        out[inp["name"]] = a
    return out


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of a graph, subgraphs (If branches, Loop/Scan bodies) included."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_nodes(g)
