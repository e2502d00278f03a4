"""Build the real-model set: ONNX files made by other people's exporters, with a manifest.

Run it in a virtual environment that has torch, torchvision, transformers, onnx, onnxscript and onnxruntime
(not the project's own venv; see README.md beside this file):

    python benchmarks/real_models/make_real_models.py                 # full set into ~/.cache/taso_tvm/real_models
    python benchmarks/real_models/make_real_models.py --small --out tests/data/real_models   # the committed copies

Every model is built from a library architecture and a config with seeded random weights; nothing is loaded from a
model hub. The only downloaded files are ONNX files that pip packages ship (silero-vad, rapidocr-onnxruntime), taken
from the wheel with `pip download` and zipfile, at the versions pinned below.

Each model is checked before it is listed: onnx.checker (full_check) and an ONNX Runtime run at both test values of
every symbolic dim, compared against the PyTorch module where there is one.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

DEFAULT_OUT = Path.home() / ".cache" / "taso_tvm" / "real_models"
SEED = 0
MANIFEST = "manifest.json"

# ONNX files shipped inside pip packages (full set only). Bump the versions here and nowhere else.
SILERO_VAD = ("silero-vad", "6.2.3")
RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4")

ONNX_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
               onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BOOL: "bool"}


@dataclasses.dataclass
class Input:
    """How to feed one graph input: its symbolic axes (name per axis) and the values it may hold."""

    name: str
    dims: dict[int, str] = dataclasses.field(default_factory=dict)  # axis -> symbolic dim name
    range: tuple[float, float] | None = None  # [low, high) for random values
    values: list[Any] | None = None  # the only values it may hold (e.g. a sample rate)
    pattern: str | None = None  # "padding_mask": each row is ones then zeros, at least one 1


@dataclasses.dataclass
class Spec:
    """One model of the set: how to make it and what it covers."""

    name: str
    kinds: list[str]
    inputs: list[Input]
    dims: dict[str, list[int]]  # symbolic dim -> [representative value, second test value]
    make: Callable[[bool, Path], dict]  # (small, path) -> source/exporter info; writes path
    small: bool = True  # part of the small (committed) set
    full: bool = True  # part of the full (cache) set
    handwritten: str | None = None  # why a hand-written module, when it is one
    full_dims: dict[str, list[int]] | None = None  # test values for the full-size model, when they differ
    reference: Callable[[], Any] | None = None  # set by make: the torch module to compare against
    notes: str = ""


# ---------------------------------------------------------------------------------------------------------------
# export helpers


def _torch():
    try:
        import torch
    except ImportError:
        sys.exit("make_real_models.py needs torch, torchvision and transformers: run it in the export venv "
                 "(see benchmarks/real_models/README.md)")
    return torch


def _seed() -> None:
    torch = _torch()
    torch.manual_seed(SEED)
    np.random.seed(SEED)


def _export(module, args: tuple, path: Path, inputs: list[Input], outputs: list[str], dynamo: bool,
            output_axes: dict[str, dict[int, str]] | None = None, dim_min: dict[str, int] | None = None,
            dim_max: dict[str, int] | None = None, opset: int | None = None) -> dict:
    """Export `module` with the torch dynamo exporter or the legacy TorchScript one, symbolic dims named."""
    torch = _torch()
    module.eval()
    names = [i.name for i in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            made: dict[str, Any] = {}

            def dim(n: str):
                if n not in made:
                    made[n] = torch.export.Dim(n, min=(dim_min or {}).get(n, 1), max=(dim_max or {}).get(n, 4096))
                return made[n]

            shapes = {i.name: {ax: dim(d) for ax, d in i.dims.items()} or None for i in inputs}
            # dynamic_shapes is keyed by the forward() parameter names, which the specs use as input names
            prog = torch.onnx.export(module, args, None, dynamo=True, input_names=names, output_names=outputs,
                                     dynamic_shapes=shapes, opset_version=opset)
            prog.save(str(path), external_data=False)
            _drop_stack_traces(path)
            exporter = {"name": "torch.onnx.export (dynamo=True)", "torch": torch.__version__,
                        "postprocess": f"dropped node metadata {STACK_TRACE_KEY!r} (absolute paths of this machine)"}
            import onnxscript
            exporter["onnxscript"] = onnxscript.__version__
        else:
            axes = {i.name: dict(i.dims) for i in inputs if i.dims}
            axes.update(output_axes or {})
            torch.onnx.export(module, args, str(path), dynamo=False, input_names=names, output_names=outputs,
                              dynamic_axes=axes, opset_version=opset or 17)
            exporter = {"name": "torch.onnx.export (dynamo=False, TorchScript)", "torch": torch.__version__}
    return exporter


STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"


def _drop_stack_traces(path: Path) -> None:
    """The dynamo exporter records each node's Python stack trace, with this machine's paths in it; everything
    else it writes stays (names, scopes, class hierarchy), so the files are reproducible byte for byte."""
    model = onnx.load(str(path))

    def strip(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            keep = [p for p in node.metadata_props if p.key != STACK_TRACE_KEY]
            del node.metadata_props[:]
            node.metadata_props.extend(keep)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    strip(attr.g)
                for g in attr.graphs:
                    strip(g)

    strip(model.graph)
    onnx.save(model, str(path))


def _pkg_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


def _count(module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


# ---------------------------------------------------------------------------------------------------------------
# (a) CNN classifiers


def make_mobilenet_v3(small: bool, path: Path, spec: Spec) -> dict:
    import torchvision
    _seed()
    torch = _torch()
    if small:
        cfg = {"arch": "mobilenet_v3_small", "width_mult": 0.25, "num_classes": 10}
        m = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25, num_classes=10)
    else:
        cfg = {"arch": "mobilenet_v3_large", "width_mult": 1.0, "num_classes": 1000}
        m = torchvision.models.mobilenet_v3_large(weights=None)
    hw = 64 if small else 224
    spec.reference = m
    exporter = _export(m, (torch.randn(2, 3, hw, hw),), path, spec.inputs, ["logits"], dynamo=True)
    return {"source": {"package": "torchvision", "version": _pkg_version("torchvision"), "config": cfg,
                       "parameters": _count(m)}, "exporter": exporter}


def make_resnet(small: bool, path: Path, spec: Spec) -> dict:
    """resnet50 (full set only: torchvision's ResNet has no width knob, and 64..2048 channels are megabytes)."""
    import torchvision
    _seed()
    torch = _torch()
    cfg = {"arch": "resnet50", "num_classes": 1000}
    m = torchvision.models.resnet50(weights=None)
    spec.reference = m
    exporter = _export(m, (torch.randn(2, 3, 224, 224),), path, spec.inputs, ["logits"], dynamo=False,
                       output_axes={"logits": {0: "batch"}})
    return {"source": {"package": "torchvision", "version": _pkg_version("torchvision"), "config": cfg,
                       "parameters": _count(m)}, "exporter": exporter}


def make_shufflenet(small: bool, path: Path, spec: Spec) -> dict:
    import torchvision
    from torchvision.models.shufflenetv2 import ShuffleNetV2
    _seed()
    torch = _torch()
    if small:
        cfg = {"arch": "ShuffleNetV2", "stages_repeats": [2, 2, 2], "stages_out_channels": [8, 16, 32, 64, 128],
               "num_classes": 10}
        m = ShuffleNetV2(cfg["stages_repeats"], cfg["stages_out_channels"], num_classes=10)
    else:
        cfg = {"arch": "shufflenet_v2_x1_0", "num_classes": 1000}
        m = torchvision.models.shufflenet_v2_x1_0(weights=None)
    hw = 64 if small else 224
    spec.reference = m
    exporter = _export(m, (torch.randn(2, 3, hw, hw),), path, spec.inputs, ["logits"], dynamo=False,
                       output_axes={"logits": {0: "batch"}})
    return {"source": {"package": "torchvision", "version": _pkg_version("torchvision"), "config": cfg,
                       "parameters": _count(m)}, "exporter": exporter}


# ---------------------------------------------------------------------------------------------------------------
# (b) transformer encoders


def _bert_config(small: bool):
    import transformers
    if small:
        cfg = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   max_position_embeddings=128)
    else:  # BERT-base
        cfg = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=512)
    return transformers.BertConfig(**cfg), cfg


def make_bert(small: bool, path: Path, spec: Spec) -> dict:
    import transformers
    _seed()
    torch = _torch()
    config, cfg = _bert_config(small)
    m = transformers.BertModel(config)
    spec.reference = lambda input_ids, attention_mask: m(input_ids=input_ids, attention_mask=attention_mask)
    spec.inputs[0].range = (0, cfg["vocab_size"])
    ids = torch.randint(0, cfg["vocab_size"], (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    exporter = _export(m, (ids, mask), path, spec.inputs, ["last_hidden_state", "pooler_output"], dynamo=True,
                       dim_min={"sequence": 2}, dim_max={"sequence": cfg["max_position_embeddings"]})
    return {"source": {"package": "transformers", "version": _pkg_version("transformers"),
                       "config": {"arch": "BertModel", **cfg}, "parameters": _count(m)}, "exporter": exporter}


def make_sentence_encoder(small: bool, path: Path, spec: Spec) -> dict:
    """A sentence-transformers-style encoder: BERT, mean pooling over the mask, L2 normalisation."""
    import transformers
    _seed()
    torch = _torch()
    if small:
        cfg = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                   max_position_embeddings=128)
    else:  # all-MiniLM-L6-v2's shape
        cfg = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536, max_position_embeddings=512)

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = transformers.BertModel(transformers.BertConfig(**cfg), add_pooling_layer=False)

        def forward(self, input_ids, attention_mask):
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            w = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    m = SentenceEncoder()
    spec.reference = m
    spec.inputs[0].range = (0, cfg["vocab_size"])
    ids = torch.randint(0, cfg["vocab_size"], (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    exporter = _export(m, (ids, mask), path, spec.inputs, ["sentence_embedding"], dynamo=False,
                       output_axes={"sentence_embedding": {0: "batch"}})
    return {"source": {"package": "transformers", "version": _pkg_version("transformers"),
                       "config": {"arch": "BertModel + mean pooling + L2 normalize", **cfg},
                       "parameters": _count(m)}, "exporter": exporter}


# ---------------------------------------------------------------------------------------------------------------
# (c) detectors


def _mobilenet_fpn(width_mult: float, out_channels: int, extra):
    import torchvision
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    feats = torchvision.models.mobilenet_v3_small(weights=None, width_mult=width_mult).features
    # strides 8, 16, 32 of mobilenet_v3_small's feature blocks
    layers = {"3": "0", "8": "1", "11": "2"}
    channels = [feats[int(k)].out_channels for k in layers]
    return BackboneWithFPN(feats, layers, channels, out_channels, extra_blocks=extra), channels


def make_fpn_detector(small: bool, path: Path, spec: Spec) -> dict:
    """torchvision's FPN (upsampling to the size of the next level: Shape -> ... -> Resize) with a YOLO-style
    dense head: one 1x1 conv per level, predictions flattened and concatenated over all levels."""
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool
    _seed()
    torch = _torch()
    nc = 3 if small else 80
    if small:
        backbone, channels = _mobilenet_fpn(0.25, 16, LastLevelMaxPool())
        cfg = {"backbone": "mobilenet_v3_small(width_mult=0.25).features", "fpn_in": channels, "fpn_out": 16}
    else:
        backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=5)
        cfg = {"backbone": "resnet_fpn_backbone('resnet50')", "fpn_out": 256}
    cfg["num_classes"] = nc

    class DenseDetector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = backbone
            self.head = torch.nn.Conv2d(backbone.out_channels, 4 + 1 + nc, 1)

        def forward(self, images):
            preds = [self.head(f).flatten(2).transpose(1, 2) for f in self.backbone(images).values()]
            return torch.cat(preds, 1)

    m = DenseDetector()
    spec.reference = m
    hw = (64, 96) if small else (320, 416)
    exporter = _export(m, (torch.randn(2, 3, *hw),), path, spec.inputs, ["predictions"], dynamo=True,
                       dim_min={"height": 32, "width": 32})
    return {"source": {"package": "torchvision", "version": _pkg_version("torchvision"),
                       "config": {"arch": "BackboneWithFPN + dense 1x1 head", **cfg}, "parameters": _count(m)},
            "exporter": exporter}


def make_fcos(small: bool, path: Path, spec: Spec) -> dict:
    """torchvision's FCOS end to end: image normalisation and resizing, FPN, head, box decoding, NMS."""
    import torchvision
    from torchvision.models.detection import FCOS
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7
    _seed()
    torch = _torch()
    if small:
        backbone, channels = _mobilenet_fpn(0.25, 32, LastLevelP6P7(32, 32))  # the head's GroupNorm needs 32
        kw = dict(num_classes=3, min_size=160, max_size=256, score_thresh=0.0, topk_candidates=50,
                  detections_per_img=20)
        m = FCOS(backbone, **kw)
        cfg = {"arch": "FCOS", "backbone": "mobilenet_v3_small(width_mult=0.25).features + FPN(32)", **kw}
    else:
        kw = dict(score_thresh=0.0)
        m = torchvision.models.detection.fcos_resnet50_fpn(weights=None, weights_backbone=None, **kw)
        cfg = {"arch": "fcos_resnet50_fpn", **kw}

    class Wrapper(torch.nn.Module):  # FCOS takes a list of images and returns a list of dicts
        def __init__(self) -> None:
            super().__init__()
            self.model = m

        def forward(self, image):
            out = self.model([image])[0]
            return out["boxes"], out["scores"], out["labels"]

    w = Wrapper()
    spec.reference = w
    hw = (160, 224) if small else (480, 640)
    exporter = _export(w, (torch.rand(3, *hw),), path, spec.inputs, ["boxes", "scores", "labels"], dynamo=False,
                       output_axes={"boxes": {0: "detections"}, "scores": {0: "detections"},
                                    "labels": {0: "detections"}})
    return {"source": {"package": "torchvision", "version": _pkg_version("torchvision"), "config": cfg,
                       "parameters": _count(m)}, "exporter": exporter}


# ---------------------------------------------------------------------------------------------------------------
# (d) recurrent, (e) If, (f) Pad: no library architecture we can build without weights uses these, so these are
# small hand-written torch modules around torch's own nn.LSTM / nn.GRU / torch.cond / nn.ReflectionPad2d.


def make_rnn_tagger(small: bool, path: Path, spec: Spec, cell: str = "LSTM", dynamo: bool = False) -> dict:
    _seed()
    torch = _torch()
    vocab, emb, hidden, tags = (64, 16, 24, 5) if small else (10000, 128, 256, 20)

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, emb)
            self.rnn = getattr(torch.nn, cell)(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
            self.proj = torch.nn.Linear(2 * hidden, tags)

        def forward(self, tokens):
            h, _ = self.rnn(self.embed(tokens))
            return self.proj(h)

    m = Tagger()
    spec.reference = m
    spec.inputs[0].range = (0, vocab)
    exporter = _export(m, (torch.randint(0, vocab, (2, 12)),), path, spec.inputs, ["tag_logits"], dynamo=dynamo,
                       output_axes={"tag_logits": {0: "batch", 1: "sequence"}}, dim_min={"sequence": 2})
    cfg = {"arch": f"Embedding + 2-layer bidirectional nn.{cell} + Linear", "vocab": vocab, "embed": emb,
           "hidden": hidden, "tags": tags}
    return {"source": {"package": "torch", "version": torch.__version__, "config": cfg, "parameters": _count(m)},
            "exporter": exporter}


def make_gated(small: bool, path: Path, spec: Spec) -> dict:
    """A data-dependent branch (torch.cond -> ONNX If): a block that takes a cheap path when the input's mean
    activation is small, a deeper one otherwise, as early-exit / adaptive-computation models do."""
    _seed()
    torch = _torch()
    width = 16 if small else 512

    class Gated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(width, width)
            self.cheap = torch.nn.Linear(width, width)
            self.deep = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                            torch.nn.Linear(2 * width, width))
            self.out = torch.nn.Linear(width, 4)

        def forward(self, features):
            h = torch.relu(self.inp(features))
            h = torch.cond(h.mean() > 0.25, lambda t: self.deep(t) + t, lambda t: torch.tanh(self.cheap(t)), (h,))
            return self.out(h)

    m = Gated()
    spec.reference = m
    exporter = _export(m, (torch.randn(2, width),), path, spec.inputs, ["scores"], dynamo=True)
    return {"source": {"package": "torch", "version": torch.__version__,
                       "config": {"arch": "Linear + torch.cond(deep MLP | tanh Linear) + Linear", "width": width},
                       "parameters": _count(m)}, "exporter": exporter}


def make_pad_generator(small: bool, path: Path, spec: Spec) -> dict:
    """A CycleGAN-style ResNet generator: ReflectionPad2d around 7x7 and residual 3x3 convs, InstanceNorm,
    ReplicationPad2d before the output conv."""
    _seed()
    torch = _torch()
    nn = torch.nn
    ngf, blocks = (8, 2) if small else (64, 9)

    class ResBlock(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c), nn.ReLU(True),
                                      nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c))

        def forward(self, x):
            return x + self.body(x)

    layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(True),
              nn.Conv2d(ngf, 2 * ngf, 3, stride=2, padding=1), nn.InstanceNorm2d(2 * ngf), nn.ReLU(True)]
    layers += [ResBlock(2 * ngf) for _ in range(blocks)]
    layers += [nn.ConvTranspose2d(2 * ngf, ngf, 3, stride=2, padding=1, output_padding=1), nn.InstanceNorm2d(ngf),
               nn.ReLU(True), nn.ReplicationPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh()]
    m = nn.Sequential(*layers)
    spec.reference = m
    hw = 32 if small else 256
    exporter = _export(m, (torch.randn(2, 3, hw, hw),), path, spec.inputs, ["image_out"], dynamo=False,
                       output_axes={"image_out": {0: "batch", 2: "height", 3: "width"}})
    return {"source": {"package": "torch", "version": torch.__version__,
                       "config": {"arch": "CycleGAN-style ResNet generator", "ngf": ngf, "res_blocks": blocks},
                       "parameters": _count(m)}, "exporter": exporter}


# ---------------------------------------------------------------------------------------------------------------
# ONNX files shipped in pip packages (full set only)


def _wheel_member(pkg: tuple[str, str], member: str, path: Path, tmp: Path) -> None:
    name, version = pkg
    wheels = list(tmp.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{name}=={version}",
                        "-d", str(tmp)], check=True)
        wheels = list(tmp.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        path.write_bytes(z.read(member))


def _shipped(pkg: tuple[str, str], member: str, licence: str, exporter: dict):
    def make(small: bool, path: Path, spec: Spec) -> dict:
        _wheel_member(pkg, member, path, Path(os.environ["_REAL_MODELS_TMP"]))
        return {"source": {"package": pkg[0], "version": pkg[1], "file": member, "licence": licence},
                "exporter": exporter}
    return make


def _onnx_producer(path: Path) -> dict:
    m = onnx.load(str(path), load_external_data=False)
    return {"name": m.producer_name or "unknown", "version": m.producer_version or ""}


# ---------------------------------------------------------------------------------------------------------------
# the set


def specs() -> list[Spec]:
    b, s, h, w = "batch", "sequence", "height", "width"
    image = [Input("x", {0: b})]
    ids = lambda: [Input("input_ids", {0: b, 1: s}), Input("attention_mask", {0: b, 1: s}, range=(0, 2),  # noqa
                                                            pattern="padding_mask")]
    out = [
        Spec("mobilenet_v3", ["cnn", "classifier", "dynamic_batch"], image, {b: [1, 3]}, make_mobilenet_v3),
        Spec("resnet", ["cnn", "classifier", "residual", "dynamic_batch"], [Input("x", {0: b})], {b: [1, 3]},
             make_resnet, small=False),
        Spec("shufflenet_v2", ["cnn", "classifier", "channel_shuffle", "dynamic_batch"], [Input("x", {0: b})],
             {b: [1, 3]}, make_shufflenet),
        Spec("bert", ["transformer", "encoder", "dynamic_batch", "dynamic_sequence"], ids(), {b: [1, 3], s: [16, 7]},
             make_bert),
        Spec("sentence_encoder", ["transformer", "encoder", "dynamic_batch", "dynamic_sequence"], ids(),
             {b: [1, 3], s: [16, 7]}, make_sentence_encoder),
        Spec("fpn_detector", ["cnn", "detector", "resize_shape_chain", "dynamic_batch", "dynamic_spatial"],
             [Input("images", {0: b, 2: h, 3: w})], {b: [1, 2], h: [64, 96], w: [96, 64]}, make_fpn_detector,
             full_dims={b: [1, 2], h: [320, 256], w: [320, 416]},
             notes="dense head hand-written (one 1x1 conv per FPN level); backbone and FPN are torchvision's"),
        Spec("fcos", ["cnn", "detector", "resize_shape_chain", "nms", "topk", "if", "dynamic_spatial"],
             [Input("image", {1: h, 2: w}, range=(0.0, 1.0))], {h: [160, 200], w: [224, 160]}, make_fcos,
             full_dims={h: [480, 600], w: [640, 480]}),
        Spec("lstm_tagger", ["lstm", "embedding", "dynamic_batch", "dynamic_sequence"],
             [Input("tokens", {0: b, 1: s})], {b: [1, 3], s: [16, 5]}, make_rnn_tagger,
             handwritten="Embedding + nn.LSTM + Linear: no weight-free library architecture uses LSTM"),
        Spec("gru_tagger", ["gru", "embedding", "dynamic_batch", "dynamic_sequence"],
             [Input("tokens", {0: b, 1: s})], {b: [1, 3], s: [16, 5]},
             lambda small, path, spec: make_rnn_tagger(small, path, spec, cell="GRU", dynamo=True),
             handwritten="Embedding + nn.GRU + Linear: no weight-free library architecture uses GRU"),
        Spec("gated_mlp", ["if", "dynamic_batch"], [Input("features", {0: b})], {b: [1, 3]}, make_gated,
             handwritten="torch.cond around two MLP branches: library models do not branch on data"),
        Spec("pad_generator", ["cnn", "pad_reflect", "pad_edge", "dynamic_batch", "dynamic_spatial"],
             [Input("x", {0: b, 2: h, 3: w})], {b: [1, 2], h: [32, 40], w: [32, 24]}, make_pad_generator,
             full_dims={b: [1, 2], h: [256, 200], w: [256, 160]},
             handwritten="CycleGAN-style generator (the architecture lives in a repository, not a pip package)"),
    ]
    exporter_vad = {"name": "as shipped (see producer)"}
    out += [
        Spec("silero_vad", ["lstm", "if", "audio", "dynamic_batch"],
             [Input("input", {0: b, 1: "samples"}, range=(-1.0, 1.0)), Input("state", {1: b}),
              Input("sr", values=[16000])], {b: [1, 2], "samples": [512, 576]},
             _shipped(SILERO_VAD, "silero_vad/data/silero_vad.onnx", "MIT", exporter_vad), small=False,
             notes="input dims are unnamed in the file; 16 kHz chunks of 512 samples (576 with the 64-sample context)"),
        Spec("silero_vad_op15", ["lstm", "if", "audio", "dynamic_batch"],
             [Input("input", {0: b, 1: "samples"}, range=(-1.0, 1.0)), Input("state", {1: b}),
              Input("sr", values=[16000])], {b: [1, 2], "samples": [512, 576]},
             _shipped(SILERO_VAD, "silero_vad/data/silero_vad_16k_op15.onnx", "MIT", exporter_vad), small=False,
             notes="torch-exported variant with named dims (batch, sequence); 16 kHz only"),
        Spec("ppocr_det", ["cnn", "detector", "dynamic_batch", "dynamic_spatial"],
             [Input("x", {0: b, 2: h, 3: w}, range=(-1.0, 1.0))], {b: [1, 2], h: [320, 256], w: [320, 480]},
             _shipped(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "Apache-2.0",
                      {"name": "paddle2onnx"}), small=False, notes="height and width multiples of 32"),
        Spec("ppocr_rec", ["cnn", "transformer", "dynamic_batch", "dynamic_spatial"],
             [Input("x", {0: b, 2: h, 3: w}, range=(-1.0, 1.0))], {b: [1, 2], h: [48, 32], w: [320, 160]},
             _shipped(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "Apache-2.0",
                      {"name": "paddle2onnx"}), small=False, notes="height is '?' in the file; the model is trained at 48"),
        Spec("ppocr_cls", ["cnn", "classifier", "dynamic_batch", "dynamic_spatial"],
             [Input("x", {0: b, 2: h, 3: w}, range=(-1.0, 1.0))], {b: [1, 6], h: [48, 48], w: [192, 100]},
             _shipped(RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "Apache-2.0",
                      {"name": "paddle2onnx"}), small=False,
             notes="batch is -1 and height and width both '?' in the file; trained at 48x192"),
    ]
    return out


# ---------------------------------------------------------------------------------------------------------------
# manifest and checks


def _dim_repr(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if d.HasField("dim_value") and d.dim_value > 0:
        return int(d.dim_value)
    if d.HasField("dim_param"):
        return d.dim_param
    return None


def describe_inputs(model: onnx.ModelProto, spec: Spec) -> list[dict]:
    weights = {t.name for t in model.graph.initializer}
    by_name = {i.name: i for i in spec.inputs}
    res = []
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        file_shape = [_dim_repr(d) for d in tt.shape.dim]
        ispec = by_name.get(vi.name, Input(vi.name))
        shape = [ispec.dims.get(ax, d) for ax, d in enumerate(file_shape)]
        for ax, d in enumerate(shape):
            if not isinstance(d, int) and d not in spec.dims:
                raise ValueError(f"{spec.name}: input {vi.name} axis {ax} is symbolic ({d!r}) but has no test dim")
        entry: dict[str, Any] = {"name": vi.name, "dtype": ONNX_DTYPES[tt.elem_type], "shape": shape,
                                 "file_shape": file_shape}
        if ispec.range is not None:
            entry["range"] = list(ispec.range)
        if ispec.values is not None:
            entry["values"] = ispec.values
        if ispec.pattern is not None:
            entry["pattern"] = ispec.pattern
        res.append(entry)
    return res


def make_feeds(entry: dict, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a manifest entry (the tests' helper does the same; kept here so this script stands alone)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in entry["inputs"]:
        shape = [d if isinstance(d, int) else dims[d] for d in inp["shape"]]
        dtype = np.dtype(inp["dtype"])
        if "values" in inp:
            a = np.asarray(rng.choice(np.array(inp["values"], dtype=dtype), size=shape), dtype=dtype)
        elif inp.get("pattern") == "padding_mask":
            lengths = rng.integers(1, shape[-1] + 1, size=shape[:-1])
            lengths.reshape(-1)[0] = shape[-1]
            a = (np.arange(shape[-1]) < lengths[..., None]).astype(dtype)
        elif dtype.kind in "iu":
            lo, hi = inp.get("range", (0, 2))
            a = rng.integers(int(lo), int(hi), size=shape).astype(dtype)
        else:
            lo, hi = inp.get("range", (None, None))
            a = (rng.uniform(lo, hi, size=shape) if lo is not None else rng.standard_normal(shape)).astype(dtype)
        feeds[inp["name"]] = a
    return feeds


def dim_sets(entry: dict) -> list[dict[str, int]]:
    names = list(entry["dims"])
    return [{n: entry["dims"][n][k] for n in names} for k in range(2)]


def check(path: Path, entry: dict, spec: Spec) -> None:
    import onnxruntime as ort
    onnx.checker.check_model(str(path), full_check=True)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for k, dims in enumerate(dim_sets(entry)):
        feeds = make_feeds(entry, dims, seed=k)
        got = sess.run(None, feeds)
        for g in got:
            if g.dtype.kind == "f" and not np.isfinite(g).all():
                raise AssertionError(f"{spec.name}: non-finite output at {dims}")
        if spec.reference is not None:
            torch = _torch()
            with torch.no_grad():
                ref = spec.reference(*[torch.from_numpy(feeds[i["name"]]) for i in entry["inputs"]])
            if isinstance(ref, dict) or hasattr(ref, "to_tuple"):
                ref = ref.to_tuple() if hasattr(ref, "to_tuple") else tuple(ref.values())
            ref = ref if isinstance(ref, (tuple, list)) else (ref,)
            for g, r in zip(got, ref):
                r = r.numpy()
                if g.shape != r.shape:
                    raise AssertionError(f"{spec.name}: output shape {g.shape} != torch {r.shape} at {dims}")
                if g.dtype.kind == "f":
                    np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(r).max())))


def build(spec: Spec, small: bool, out: Path) -> dict:
    if not small and spec.full_dims:
        spec.dims = spec.full_dims
    path = out / f"{spec.name}.onnx"
    tmp_path = out / f".{spec.name}.onnx.tmp"
    spec.reference = None
    try:
        return _build(spec, small, path, tmp_path)
    finally:
        tmp_path.unlink(missing_ok=True)


def _build(spec: Spec, small: bool, path: Path, tmp_path: Path) -> dict:
    info = spec.make(small, tmp_path, spec)
    model = onnx.load(str(tmp_path))
    if info["exporter"].get("name", "").startswith("as shipped"):
        info["exporter"] = {"name": "as shipped", "producer": _onnx_producer(tmp_path)}
    elif "producer" not in info["exporter"]:
        info["exporter"]["producer"] = _onnx_producer(tmp_path)
    entry = {
        "name": spec.name,
        "file": path.name,
        "set": "small" if small else "full",
        **info,
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "ir_version": model.ir_version,
        "inputs": describe_inputs(model, spec),
        "outputs": [o.name for o in model.graph.output],
        "dims": spec.dims,
        "kinds": spec.kinds,
    }
    if spec.handwritten:
        entry["handwritten"] = spec.handwritten
    if spec.notes:
        entry["notes"] = spec.notes
    check(tmp_path, entry, spec)
    data = tmp_path.read_bytes()
    entry["bytes"] = len(data)
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    os.replace(tmp_path, path)
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--small", action="store_true", help="the small set (narrow, shallow; committed under tests/)")
    p.add_argument("--only", nargs="*", help="build only these models (others keep their manifest entries)")
    p.add_argument("--list", action="store_true", help="list the models of the chosen set and exit")
    args = p.parse_args(argv)

    chosen = [s for s in specs() if (s.small if args.small else s.full)]
    if args.list:
        for s in chosen:
            print(f"{s.name:20s} {', '.join(s.kinds)}")
        return 0
    if args.only:
        unknown = set(args.only) - {s.name for s in chosen}
        if unknown:
            p.error(f"unknown model(s) for this set: {', '.join(sorted(unknown))}")
        chosen = [s for s in chosen if s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() and args.only else {"models": []}
    entries = {e["name"]: e for e in manifest["models"]}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["_REAL_MODELS_TMP"] = tmp
        for spec in chosen:
            print(f"{spec.name} ...", flush=True)
            try:
                entries[spec.name] = build(spec, args.small, args.out)
            except Exception as e:  # report every model, then fail
                failed.append(spec.name)
                print(f"{spec.name}: FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            e = entries[spec.name]
            print(f"{spec.name}: {e['bytes'] / 1e6:.2f} MB, opset {e['opset']}, {e['exporter']['name']}")
    order = [s.name for s in specs()]
    models = sorted(entries.values(), key=lambda e: order.index(e["name"]) if e["name"] in order else len(order))
    manifest_path.write_text(json.dumps({"version": 1, "seed": SEED, "models": models}, indent=1) + "\n")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
