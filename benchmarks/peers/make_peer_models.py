"""Export the transformer models of the peers' benchmark (`benchmarks/bench_peers.py`) into a cache folder.

Every model is built from a transformers *config* with random weights from a fixed seed (no hub download; biases and
norms spread as in a trained model, not the initializer's zeros and ones), exported
by torch (the TorchScript exporter, `dynamo=False`, and where noted the dynamo exporter) with a symbolic batch and
sequence (images: batch), checked (onnx.checker, then ONNX Runtime at two values of each symbolic dim against the
torch module), and listed in `manifest.json` in the format of `tests/data/real_models/manifest.json` (read by
`tests/real_models.py`), with the keys the benchmark needs besides: `model_type`, `num_heads`, `hidden_size`
(the ORT transformer optimizer's arguments) and `seq` (the sequence lengths to benchmark).

It needs torch and transformers, which the project does not depend on (and onnxscript for the dynamo exporter):

    python3 -m venv /tmp/venv-export
    /tmp/venv-export/bin/pip install torch==2.13.0 transformers onnx onnxscript onnxruntime
    /tmp/venv-export/bin/python benchmarks/peers/make_peer_models.py [--only NAME ...]
        [--set all|eager|classifiers|matrix|matrix-tiny] [--skip-existing] [--out DIR]

`--set matrix`: issue 33's export matrix, every family in every form at MiniLM-L6's shape (hidden 384, 12 heads,
intermediate 1536, 6 layers; ViT-S: 6 heads, image 224, patch 16), named `{family}_{form}` and listed with `family`
and `form` keys. Families: bert (token_type_ids), roberta, xlmr, distilbert (`distilbert_mini_*`: distilbert_eager_op17
and distilbert_cls_eager_op17 are the base-size exports), electra (token_type_ids, embedding_size = hidden),
deberta_v2 (deberta-v3-small's relative attention: 256 log buckets, p2c and c2p, shared keys, no token types), vit.
Forms: eager_op17, sdpa_op17 (transformers' default attention; none for DeBERTa-v2, which has only eager), eager_op14
(bert, roberta, vit), dynamo (its default opset, 20 with torch 2.13; default attention), cls_eager_op17 and
cls_dynamo (the sequence or image classification head's logits, ViT's 10 labels). Sequence 128 (ViT 197); vocabulary
cut to 8192 for RoBERTa, XLM-R and DeBERTa. 37 models, 2.6 GB, 2 minutes on 2 cores; all export and agree with ONNX
Runtime. XLM-R is RoBERTa's graph and ELECTRA (embedding_size = hidden) BERT's: same seed, same files byte for byte.
`--set matrix-tiny --out tests/data/matrix`: the same names with `_tiny`, committed for the tests: hidden 32, 2
layers, 4 heads, intermediate 64, vocab 128, 64 positions, DeBERTa 16 buckets (ViT: image 32, patch 8, 17 tokens);
sequences 16 and 32; 37 files of 120 to 260 KB, 50 s. optimum's exporter does not install beside transformers 5:
optimum-onnx 0.1.0 (the newest) pins transformers<4.58 and optimum~=2.1, and optimum 2.3 has no ONNX exporter.

`--set classifiers`: issue 34's sequence classifiers (BERT at MiniLM-L2, -L6 and BERT-base shapes, eager and sdpa
attention, both exporters; RoBERTa and DistilBERT): the logits, read from the [CLS] row through the pooler.

`--set eager`: issue 28's eager-attention exports only (`EAGER`: MiniLM-L3/L6, BERT-base, DistilBERT, RoBERTa,
GPT-2 small, ViT-base; legacy exporter at opsets 14 and 17, the BERT family with and without token_type_ids, the
dynamo exporter at opset 17 for MiniLM-L6 and BERT-base; about 5.3 GB, 10 minutes on 2 cores). The dynamo exporter
writes opset 18 and converts down to 17 (onnx's converter). GPT-2 is exported with its attention mask, as optimum
does (without it, transformers 5 looks for packed sequences with torch.diff, which the legacy exporter lacks).

Default folder: `$TASO_TVM_PEER_MODELS`, else `~/.cache/taso_tvm/peer_models/`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import numpy as np

SEED = 0
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
MINILM_L6 = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
MINILM_L3 = dict(hidden_size=384, num_hidden_layers=3, num_attention_heads=12, intermediate_size=1536)
DISTILBERT = dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072)
VIT_BASE = dict(image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072)
SMALL_VOCAB = 8192  # RoBERTa's and GPT-2's token tables cut to keep the files small (a Gather's cost is not its size)
ROBERTA_BASE = dict(BERT_BASE, vocab_size=SMALL_VOCAB)
GPT2_SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, use_cache=False)
GPT2_SMALL_VOCAB = dict(GPT2_SMALL, vocab_size=SMALL_VOCAB, bos_token_id=SMALL_VOCAB - 1, eos_token_id=SMALL_VOCAB - 1)


class Spec(NamedTuple):
    """One model to export."""

    family: str  # bert | roberta | xlmr | distilbert | electra | deberta_v2 | vit | gpt2 | gpt2_blocks
    exporter: str  # legacy (TorchScript, dynamo=False) | dynamo
    cfg: dict  # the transformers config's arguments
    model_type: str  # ORT's transformer optimizer's model_type
    seqs: list  # the sequence lengths to benchmark (ViT: its token count)
    opset: Optional[int] = None  # None: 17 for the legacy exporter, the dynamo exporter's own default
    token_types: bool = False  # (BERT family) token_type_ids as a third input
    eager: bool = False  # attn_implementation="eager" (the form optimum's exports and most hub files have)
    classifier: bool = False  # ...ForSequenceClassification: the logits (read from the [CLS] row), not the hidden state
    form: Optional[str] = None  # the export matrix's form (issue 33): eager_op17 | sdpa_op17 | dynamo | ...


MODELS = {
    "bert_base_legacy": Spec("bert", "legacy", BERT_BASE, "bert", [128, 512]),
    "bert_base_dynamo": Spec("bert", "dynamo", BERT_BASE, "bert", [128, 512]),
    "minilm_l6_legacy": Spec("bert", "legacy", MINILM_L6, "bert", [128, 512]),
    "minilm_l6_dynamo": Spec("bert", "dynamo", MINILM_L6, "bert", [128, 512]),
    "minilm_l3_legacy": Spec("bert", "legacy", MINILM_L3, "bert", [128, 512]),
    "distilbert_legacy": Spec("distilbert", "legacy", DISTILBERT, "bert", [128]),
    "vit_base_legacy": Spec("vit", "legacy", VIT_BASE, "vit", [197]),
    # GPT-2 small's architecture written out in torch (gpt2_blocks.py): transformers' GPT-2 (sdpa) does not export
    "gpt2_small_blocks": Spec("gpt2_blocks", "legacy", dict(hidden=768, layers=12, heads=12), "gpt2", [128]),
    "gpt2_small_dynamo": Spec("gpt2", "dynamo", GPT2_SMALL, "gpt2", [128]),
}


def _eager_set() -> dict:
    """The eager-attention exports (issue 28): the form optimum's exports and most hub files have, where ORT's
    transformer optimizer was built to fire. Legacy exporter at opset 14 (layer norm and GELU in pieces) and 17;
    the BERT family with token_type_ids (`NAME`) and without (`NAME_nott`); the dynamo exporter at opset 17 for
    MiniLM-L6 and BERT-base."""
    out = {}
    for op in (14, 17):
        for name, cfg in (("minilm_l3", MINILM_L3), ("minilm_l6", MINILM_L6), ("bert_base", BERT_BASE)):
            out[f"{name}_eager_op{op}"] = Spec("bert", "legacy", cfg, "bert", [128, 512], op, True, True)
            out[f"{name}_eager_op{op}_nott"] = Spec("bert", "legacy", cfg, "bert", [128, 512], op, False, True)
        out[f"distilbert_eager_op{op}"] = Spec("distilbert", "legacy", DISTILBERT, "bert", [128, 512], op, eager=True)
        out[f"roberta_base_eager_op{op}"] = Spec("roberta", "legacy", ROBERTA_BASE, "bert", [128, 512], op,
                                                 eager=True)
        out[f"gpt2_small_eager_op{op}"] = Spec("gpt2", "legacy", GPT2_SMALL_VOCAB, "gpt2", [128, 512], op, eager=True)
        out[f"vit_base_eager_op{op}"] = Spec("vit", "legacy", VIT_BASE, "vit", [197], op, eager=True)
    for name, cfg in (("minilm_l6", MINILM_L6), ("bert_base", BERT_BASE)):
        out[f"{name}_eager_dynamo_op17"] = Spec("bert", "dynamo", cfg, "bert", [128, 512], 17, True, True)
    return out


EAGER = _eager_set()
MODELS.update(EAGER)

MINILM_L2 = dict(hidden_size=384, num_hidden_layers=2, num_attention_heads=12, intermediate_size=1536)
BERT_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=128,
                 max_position_embeddings=64)  # the tests' copies (tests/data/classifiers, a few hundred KB)


def _classifier_set() -> dict:
    """Sequence classifiers (issue 34: cross-encoders, rerankers, NLI): the logits read from the [CLS] row of the
    last hidden state through the pooler. BERT at MiniLM-L2, -L6 and BERT-base shapes, RoBERTa and DistilBERT at
    base shape; eager attention (the cross-encoders on hubs) and transformers' default sdpa; the TorchScript exporter
    at opset 17 and the dynamo exporter."""
    out = {}
    for name, cfg in (("minilm_l2", MINILM_L2), ("minilm_l6", MINILM_L6), ("bert_base", BERT_BASE)):
        out[f"{name}_cls_eager_op17"] = Spec("bert", "legacy", cfg, "bert", [128, 256, 512], 17, True, True, True)
        out[f"{name}_cls_sdpa_op17"] = Spec("bert", "legacy", cfg, "bert", [128, 256, 512], 17, True, False, True)
        out[f"{name}_cls_eager_dynamo"] = Spec("bert", "dynamo", cfg, "bert", [128, 256, 512], 17, True, True, True)
    for exporter, suffix in (("legacy", "op17"), ("dynamo", "dynamo")):
        out[f"bert_tiny_cls_eager_{suffix}"] = Spec("bert", exporter, BERT_TINY, "bert", [16, 32], 17, True, True, True)
    out["roberta_base_cls_eager_op17"] = Spec("roberta", "legacy", ROBERTA_BASE, "bert", [128, 512], 17, False, True,
                                              True)
    out["distilbert_cls_eager_op17"] = Spec("distilbert", "legacy", DISTILBERT, "bert", [128, 512], 17, False, True,
                                            True)
    return out


CLASSIFIERS = _classifier_set()
MODELS.update(CLASSIFIERS)

VIT_S = dict(image_size=224, patch_size=16, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
             intermediate_size=1536)
VIT_TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64)
# deberta-v3-small's relative attention (log buckets, both disentangled terms, shared keys, no absolute positions)
DEBERTA_V3 = dict(relative_attention=True, position_buckets=256, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                  norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False, type_vocab_size=0)
# the export matrix's forms: (exporter, opset, eager attention, classifier); None: the dynamo exporter's default opset
FORMS = {"eager_op17": ("legacy", 17, True, False), "sdpa_op17": ("legacy", 17, False, False),
         "eager_op14": ("legacy", 14, True, False), "dynamo": ("dynamo", None, False, False),
         "cls_eager_op17": ("legacy", 17, True, True), "cls_dynamo": ("dynamo", None, False, True)}
NO_SDPA = {"deberta_v2"}  # transformers has no sdpa attention for it (its default is eager)
OP14 = {"bert", "roberta", "vit"}  # eager_op14 (layer norm in pieces) for these only
# DistilBERT's matrix stem: distilbert_eager_op17 and distilbert_cls_eager_op17 are already the base-size exports
STEMS = {"distilbert": "distilbert_mini"}


def _matrix_set(tiny: bool) -> dict:
    """The export matrix (issue 33): every family in every form at one size, `{stem}_{form}` (`_tiny` suffixed at
    the tests' size). MiniLM-L6's shape (hidden 384, 12 heads, intermediate 1536, 6 layers; ViT-S: 6 heads, image
    224, patch 16), else the tiny one (hidden 32, 2 layers, 4 heads, intermediate 64, vocab 128, 64 positions; ViT:
    image 32, patch 8). BERT and ELECTRA take token_type_ids; RoBERTa, XLM-R, DistilBERT and DeBERTa-v2 do not."""
    base = dict(BERT_TINY) if tiny else dict(MINILM_L6)
    vocab = {} if tiny else {"vocab_size": SMALL_VOCAB}  # RoBERTa's, XLM-R's and DeBERTa's tables cut
    h, n, i, layers = (base[k] for k in ("hidden_size", "num_attention_heads", "intermediate_size",
                                         "num_hidden_layers"))
    distil = dict(dim=h, n_heads=n, hidden_dim=i, n_layers=layers)
    if tiny:
        distil.update(vocab_size=base["vocab_size"], max_position_embeddings=base["max_position_embeddings"])
    cfgs = {"bert": base, "roberta": dict(base, **vocab), "xlmr": dict(base, **vocab), "distilbert": distil,
            "electra": dict(base, embedding_size=h),
            "deberta_v2": dict(base, **vocab, **dict(DEBERTA_V3, **({"position_buckets": 16} if tiny else {}))),
            "vit": VIT_TINY if tiny else VIT_S}
    seqs, vit_seqs = ([16, 32], [17]) if tiny else ([128], [197])
    out = {}
    for family, cfg in cfgs.items():
        for form, (exporter, opset, eager, classifier) in FORMS.items():
            if (form == "sdpa_op17" and family in NO_SDPA) or (form == "eager_op14" and family not in OP14):
                continue
            vit = family == "vit"
            c = dict(cfg, num_labels=10) if vit and classifier else cfg
            name = f"{STEMS.get(family, family)}_{form}" + ("_tiny" if tiny else "")
            out[name] = Spec(family, exporter, c, "vit" if vit else "bert", vit_seqs if vit else seqs, opset,
                             family in ("bert", "electra"), eager, classifier, form)
    return out


MATRIX = _matrix_set(tiny=False)
MATRIX_TINY = _matrix_set(tiny=True)
MODELS.update(MATRIX)
MODELS.update(MATRIX_TINY)


def default_out() -> Path:
    return Path(os.environ.get("TASO_TVM_PEER_MODELS", Path.home() / ".cache" / "taso_tvm" / "peer_models"))


def _like_trained(module) -> None:
    """Give the parameters transformers initializes to constants (biases 0, layer norms' scale 1 and shift 0) the
    spread a trained checkpoint has: a zero bias is an Add a tool may drop, which no real model offers it."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1 and name.endswith("bias"):
                p.normal_(0.0, 0.02)
            elif p.dim() == 1 and name.endswith("weight"):  # a norm's scale
                p.normal_(1.0, 0.02)


def _module(spec: Spec):
    """(torch module returning the last hidden state, example inputs, input specs, heads, hidden); weights from
    the config's initializer, biases and norms spread as in a trained model (`_like_trained`)."""
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    family, cfg = spec.family, spec.cfg
    attn = {"attn_implementation": "eager"} if spec.eager else {}

    class Wrap(torch.nn.Module):  # the last hidden state; explicit arguments (torch.export matches them by name)
        def __init__(self, m):
            super().__init__()
            self.m = m

    class Pixels(Wrap):
        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    class Ids(Wrap):
        def forward(self, input_ids):
            return self.m(input_ids=input_ids).last_hidden_state

    class IdsMask(Wrap):
        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class IdsMaskTypes(Wrap):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    class Logits(Wrap):  # a sequence classifier: its logits
        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).logits

    class LogitsTypes(Wrap):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    class PixelLogits(Wrap):  # an image classifier: its logits
        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).logits

    if spec.classifier:
        IdsMask, IdsMaskTypes, Pixels = Logits, LogitsTypes, PixelLogits  # noqa: N806 (the same inputs, logits out)

    if family == "vit":
        conf = tf.ViTConfig(**cfg, **attn)
        m = tf.ViTForImageClassification(conf) if spec.classifier else tf.ViTModel(conf, add_pooling_layer=False)
        size = cfg["image_size"]
        ex = (torch.randn(1, 3, size, size),)
        specs = [{"name": "pixel_values", "dtype": "float32", "shape": ["batch", 3, size, size]}]
        return Pixels(m).eval(), ex, specs, cfg["num_attention_heads"], cfg["hidden_size"]
    if family == "gpt2_blocks":
        sys.path.insert(0, str(Path(__file__).parent))
        from gpt2_blocks import GPT2, VOCAB

        ex = (torch.randint(0, VOCAB, (1, 16)),)
        specs = [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"], "range": [0, VOCAB]}]
        return GPT2(**cfg).eval(), ex, specs, cfg["heads"], cfg["hidden"]
    if family == "gpt2":
        m = tf.GPT2Model(tf.GPT2Config(**cfg, **attn))
        vocab = m.config.vocab_size
        ex = (torch.randint(0, vocab, (1, 16)),)
        specs = [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"], "range": [0, vocab]}]
        if not spec.eager:
            return Ids(m).eval(), ex, specs, cfg["n_head"], cfg["n_embd"]
        # with the attention mask, as optimum exports it (and without it transformers 5 looks for packed sequences
        # with torch.diff, which the legacy exporter does not have)
        ex += (torch.ones(1, 16, dtype=torch.long),)
        specs.append({"name": "attention_mask", "dtype": "int64", "shape": ["batch", "sequence"], "range": [0, 2],
                      "pattern": "padding_mask"})
        return IdsMask(m).eval(), ex, specs, cfg["n_head"], cfg["n_embd"]
    if family == "distilbert":
        conf = tf.DistilBertConfig(**cfg, **attn)
        m = tf.DistilBertForSequenceClassification(conf) if spec.classifier else tf.DistilBertModel(conf)
        heads, hidden = cfg["n_heads"], cfg["dim"]
    elif family in ("roberta", "xlmr"):
        conf_cls, bare, head = (tf.RobertaConfig, tf.RobertaModel, tf.RobertaForSequenceClassification) \
            if family == "roberta" else \
            (tf.XLMRobertaConfig, tf.XLMRobertaModel, tf.XLMRobertaForSequenceClassification)
        conf = conf_cls(**cfg, **attn)
        m = head(conf) if spec.classifier else bare(conf, add_pooling_layer=False)
        heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    elif family in ("electra", "deberta_v2"):  # no pooler of their own; the classifiers read [CLS] through a head
        conf_cls, bare, head = (tf.ElectraConfig, tf.ElectraModel, tf.ElectraForSequenceClassification) \
            if family == "electra" else \
            (tf.DebertaV2Config, tf.DebertaV2Model, tf.DebertaV2ForSequenceClassification)
        conf = conf_cls(**cfg, **attn)
        m = head(conf) if spec.classifier else bare(conf)
        heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    else:
        conf = tf.BertConfig(**cfg, **attn)
        m = tf.BertForSequenceClassification(conf) if spec.classifier else tf.BertModel(conf, add_pooling_layer=False)
        heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    vocab = m.config.vocab_size
    ex = (torch.randint(0, vocab, (1, 16)), torch.ones(1, 16, dtype=torch.long))
    specs = [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"], "range": [0, vocab]},
             {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "sequence"], "range": [0, 2],
              "pattern": "padding_mask"}]
    if spec.token_types:
        types = m.config.type_vocab_size
        ex += (torch.randint(0, types, (1, 16)),)
        specs.append({"name": "token_type_ids", "dtype": "int64", "shape": ["batch", "sequence"],
                      "range": [0, types]})
        return IdsMaskTypes(m).eval(), ex, specs, heads, hidden
    return IdsMask(m).eval(), ex, specs, heads, hidden


def export(name: str, out: Path) -> dict:
    import onnx
    import torch
    import transformers

    spec = MODELS[name]
    family, exporter, cfg = spec.family, spec.exporter, spec.cfg
    module, example, specs, heads, hidden = _module(spec)
    _like_trained(module)
    path = out / f"{name}.onnx"
    names = [s["name"] for s in specs]
    output = "logits" if spec.classifier else "last_hidden_state"
    if exporter == "dynamo":
        dims = {"batch": torch.export.Dim.DYNAMIC, "sequence": torch.export.Dim.DYNAMIC}
        dyn = tuple({i: dims[d] for i, d in enumerate(s["shape"]) if isinstance(d, str)} for s in specs)
        extra = {"opset_version": spec.opset} if spec.opset else {}
        torch.onnx.export(module, example, str(path), input_names=names, output_names=[output],
                          dynamic_shapes=dyn, dynamo=True, external_data=False, **extra)
    else:
        axes = {s["name"]: {i: d for i, d in enumerate(s["shape"]) if isinstance(d, str)} for s in specs}
        torch.onnx.export(module, example, str(path), input_names=names, output_names=[output],
                          dynamic_axes=axes, opset_version=spec.opset or 17, dynamo=False)
    model = onnx.load(str(path))
    if exporter == "dynamo":  # the stack traces name the exporting machine's paths; the scopes, classes and fx
        # nodes (kept at the exporter's own opset, dropped by the opset converter) are half a tiny model's file
        for n in model.graph.node:
            keep = [p for p in n.metadata_props if not (p.key.startswith("pkg.torch.onnx.") or p.key == "namespace")]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
        onnx.save(model, str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if spec.opset and opset != spec.opset:
        raise RuntimeError(f"asked for opset {spec.opset}, the exporter wrote {opset}")
    onnx.checker.check_model(str(path), full_check=True)
    dims = {"batch": [1, 2]} if family == "vit" else {"batch": [1, 2], "sequence": [16, 9]}
    _check(path, module, specs, dims)
    data = path.read_bytes()
    if family == "gpt2_blocks":  # no transformers class: the architecture is written out in gpt2_blocks.py
        source_package = "benchmarks/peers/gpt2_blocks.py"
    else:
        source_package = "transformers"
    kinds = ["transformer", family] + (["eager"] if spec.eager else []) + (["token_types"] if spec.token_types
                                                                           else []) + \
        (["classifier"] if spec.classifier else [])
    entry = {"name": name, "file": path.name, "set": "peers",
             "source": {"package": source_package, "version": transformers.__version__,
                        "config": dict(cfg, arch=type(getattr(module, "m", module)).__name__,
                                       **({"attn_implementation": "eager"} if spec.eager else {})),
                        "parameters": int(sum(p.numel() for p in module.parameters()))},
             "exporter": {"name": f"torch.onnx.export (dynamo={exporter == 'dynamo'})", "torch": torch.__version__},
             "opset": opset, "ir_version": model.ir_version, "inputs": [dict(s, file_shape=s["shape"]) for s in specs],
             "outputs": [output], "dims": dims, "kinds": kinds,
             "family": family, **({"form": spec.form} if spec.form else {}),
             "model_type": spec.model_type, "num_heads": heads, "hidden_size": hidden, "seq": spec.seqs,
             "encoder": family not in ("gpt2", "gpt2_blocks"),
             "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if family == "vit":
        entry["image_size"] = cfg["image_size"]
    return entry


def spec_feeds(specs: list, at: dict, rng, mask: Callable) -> dict:
    """Inputs for the input specs at the symbolic dims' values `at`: floats standard normal, a padding mask made by
    `mask(shape, rng)`, other integers within their range."""
    feeds = {}
    for s in specs:
        shape = [at[d] if isinstance(d, str) else d for d in s["shape"]]
        if s["dtype"] == "float32":
            feeds[s["name"]] = rng.standard_normal(shape).astype(np.float32)
        elif s.get("pattern") == "padding_mask":
            feeds[s["name"]] = mask(shape, rng)
        else:
            feeds[s["name"]] = rng.integers(*s["range"], shape).astype(np.int64)
    return feeds


def _random_tail_mask(shape: list, rng) -> np.ndarray:
    """Ones, the second half's positions past the middle 0 or 1 at random (padded rows of a batch)."""
    m = np.ones(shape, np.int64)
    m[:, shape[1] // 2 + 1:] = rng.integers(0, 2, (shape[0], shape[1] - shape[1] // 2 - 1))
    return m


def _check(path: Path, module, specs: list, dims: dict) -> None:
    """ONNX Runtime at each listed value of the symbolic dims equals the torch module."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    for k in range(len(next(iter(dims.values())))):
        at = {d: v[k] for d, v in dims.items()}
        feeds = spec_feeds(specs, at, rng, _random_tail_mask)
        got = sess.run(None, feeds)[0]
        with torch.no_grad():
            want = module(*[torch.from_numpy(feeds[s["name"]]) for s in specs]).numpy()
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{path.name}: ONNX Runtime differs from torch at {at}: "
                             f"{float(np.abs(got - want).max()):.3g}")


def manifest_entries(out: Path) -> tuple[Path, dict]:
    """(the folder's manifest path, its entries by name; none where it has no manifest yet), the folder made."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "manifest.json"
    return path, ({e["name"]: e for e in json.loads(path.read_text())["models"]} if path.exists() else {})


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", help=f"models to export (default all: {', '.join(MODELS)})")
    p.add_argument("--set", choices=["all", "eager", "classifiers", "matrix", "matrix-tiny"], default="all",
                   help="eager: the eager-attention exports only (issue 28); classifiers: the sequence classifiers "
                        "(issue 34); matrix, matrix-tiny: the export matrix (issue 33) at MiniLM-L6's and the "
                        "tests' size")
    p.add_argument("--skip-existing", action="store_true",
                   help="keep models already in the manifest whose file is there with the listed size")
    p.add_argument("--out", type=Path, default=default_out())
    a = p.parse_args(argv)
    man_path, entries = manifest_entries(a.out)
    failed = []
    sets = {"eager": EAGER, "classifiers": CLASSIFIERS, "matrix": MATRIX, "matrix-tiny": MATRIX_TINY}
    for name in a.only or list(sets.get(a.set, MODELS)):
        e = entries.get(name)
        if a.skip_existing and e and (a.out / e["file"]).exists() and (a.out / e["file"]).stat().st_size == e["bytes"]:
            print(f"{name}: already exported", flush=True)
            continue
        print(f"exporting {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            entries[name] = export(name, a.out)
        except Exception as e:  # one model's exporter failure is reported, the others go on
            print(f"  {name}: not exported ({type(e).__name__}: {str(e).strip().splitlines()[0][:300]})",
                  file=sys.stderr, flush=True)
            failed.append(name)
            (a.out / f"{name}.onnx").unlink(missing_ok=True)
            entries.pop(name, None)
            man_path.write_text(json.dumps({"models": [entries[k] for k in sorted(entries)]}, indent=1) + "\n")
            continue
        man_path.write_text(json.dumps({"models": [entries[k] for k in sorted(entries)]}, indent=1) + "\n")
        print(f"  {entries[name]['bytes'] / 1e6:.0f} MB in {time.monotonic() - t0:.0f} s", flush=True)
    if failed:
        print(f"not exported: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
