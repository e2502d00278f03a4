"""Export Llama-family decoder LLMs (prefill and one decode step with a KV cache) to ONNX, for the decoder benchmark
and, at a tiny size, for the tests.

Every model is built from a transformers *config* (no hub download) with random weights from a fixed seed, biases and
norm scales spread as in a trained model (`make_peer_models._like_trained`; Gemma stores its norm scale minus 1, so
its stored weights are spread around 0 and the scale it applies around 1). Families, at their published configs
with fewer layers:

    llama    SmolLM2-135M: hidden 576, 9 heads, 3 kv heads, head_dim 64, intermediate 1536, vocab 49152, tied,
             rope_theta 1e5, rms eps 1e-5, 8192 positions; 6 layers
    qwen2    Qwen2.5-0.5B: hidden 896, 14 heads, 2 kv heads, intermediate 4864, q/k/v biases, tied, rope_theta 1e6,
             rms eps 1e-6; 4 layers; vocabulary cut from 151936 to 32768
    phi3     Phi-3-mini-4k: hidden 3072, 32 heads, 32 kv heads, intermediate 8192, packed qkv_proj and gate_up_proj,
             vocab 32064, untied; 2 layers; no sliding window
    gemma    Gemma-2B: hidden 2048, 8 heads, 1 kv head, head_dim 256, intermediate 16384, GELU-tanh gate, norm scale
             weight + 1, embeddings scaled by sqrt(hidden), tied; 2 layers; vocabulary cut from 256000 to 32768
    mistral  Mistral-7B-v0.1: hidden 4096, 32 heads, 8 kv heads, intermediate 14336, vocab 32000, untied,
             rope_theta 1e6; 1 layer; no sliding window
    cohere   Aya-23-8B (Command-R's shape): hidden 4096, 32 heads, 8 kv heads, intermediate 14336, bias-free
             LayerNorm, interleaved rotary, logit scale 0.0625, tied; 1 layer; vocabulary cut from 256000 to 32768
    phi2     Phi-2: hidden 2560, 32 heads of 80, a partial rotary (half rotation) on the first 32 entries of each
             head (`partial_rotary_factor` 0.4), q/k/v biases, attention and MLP in parallel on one LayerNorm,
             gelu_new, vocab 51200, untied LM head with a bias; 2 layers (the tiny copy rotates 6 of each head's 16;
             the genai builder's graph is not equal to it: its logits differ from torch's by 0.045)
    gptj     GPT-J-6B: hidden 4096, 16 heads of 256, a partial interleaved rotary on the first 64 entries of each
             head (`rotary_dim`), its tables gathered from a sin/cos cache by position, attention and MLP in
             parallel on one LayerNorm, gelu_new, vocab 50400, untied; 2 layers (no genai build: its builder has no
             GPT-J; the tiny copy rotates 8 of each head's 16)

Forms, named `{family}_{form}` (transformers' default sdpa attention; llama also with eager attention as
`llama_eager_{form}`), exported by torch's dynamo exporter (`torch.onnx.export(dynamo=True)`, its default opset):

    prefill  input_ids, attention_mask [batch, sequence] int64 -> logits [batch, sequence, vocab] (use_cache=False;
             the model derives the positions itself: 0, 1, ... whatever the padding)
    decode   input_ids [batch, 1], attention_mask [batch, past_sequence + 1] int64,
             past_key_values.{i}.key / .value [batch, kv_heads, past_sequence, head_dim] float32
             -> logits [batch, 1, vocab], present.{i}.key / .value [batch, kv_heads, past_sequence + 1, head_dim]
             (a wrapper builds transformers' DynamicCache from the flat tensors; position = past_sequence)

`batch`, `sequence` and `past_sequence` are torch.export Dims; the exporter writes the mask's and the presents'
length as the expression `past_sequence + 1`, and the manifest lists that name among the `dims` too (with values
consistent with `past_sequence`'s), so a reader that looks shapes up in `dims` needs no expression parser.

Each file is checked: onnx.checker (full check), then ONNX Runtime (CPU) against the torch module at two values of
each symbolic dim (prefill: batch 1, sequence 16 and batch 2, sequence 37; decode: batch 1, past 8 and batch 2,
past 29; batch 2's second row left-padded with 5 zeros at the start of its mask), every output within 1e-3 (rtol
and atol; prefill: the logits of the unpadded positions, since a padded position's query row is fully masked and
torch and the graph fill it differently); the largest difference goes into the manifest (`check`).

`{family}_genai`: each model's HF checkpoint (`save_pretrained`, safetensors, float32, with a word-level tokenizer
over its vocabulary, `t{id}`: the builder loads the checkpoint's tokenizer) goes into `OUT/checkpoints/{family}/` and
onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder -i CHECKPOINT -o OUT/{family}_genai
-p fp32 -e cpu -c CACHE`; its --help crashes on a stray `%` in 0.18.0) turns it into `OUT/{family}_genai/model.onnx`
(with model.onnx.data, genai_config.json and the tokenizer). The manifest lists that graph's inputs, outputs and op
types (GroupQueryAttention with the rotary inside, SkipSimplifiedLayerNormalization; `position_ids` is not an
input), and ONNX Runtime runs it against torch: a prefill from an empty past (past length 0; logits and presents)
at batch 1, sequence 16 and batch 2, sequence 37, then one decode step from the presents it wrote; and a batch 2,
sequence 37 prefill with the second row padded by 5, the logits of its unpadded positions: right padding must match,
left padding is only recorded (the graph reads the mask as sequence lengths, so a left-padded row's positions and
keys differ from transformers'). onnx.checker rejects the graph (ORT's SimplifiedLayerNormalization in the ONNX
domain): its message goes into the manifest and the check goes on. gemma_genai is 1.8e-3 off (logits up to 19;
within the 1e-3 rtol): the builder rounds the embeddings' scale sqrt(2048) to 45.25 (the others: 1e-5 and less).
A builder failure is reported and the other models go on.

It needs torch, transformers, onnxscript and onnxruntime-genai, which the project does not depend on:

    python3 -m venv /tmp/venv-export
    /tmp/venv-export/bin/pip install torch==2.13.0 transformers onnx onnxscript onnxruntime onnxruntime-genai
    /tmp/venv-export/bin/python benchmarks/peers/make_decoder_models.py [--only NAME ...] [--set full|tiny]
        [--skip-existing] [--drop-checkpoints] [--out DIR]

`--set full` (default): the names above, about 5 minutes on 2 cores. Weights: the prefill, decode (and llama's
eager) files of a family share one external data file, `{family}.weights` (content-addressed: a tensor the family
already stored is referenced, not written again; `{family}.weights.json` indexes it; it only grows, so delete it
with the family's files to start over); initializers under 1 KB stay inline. The set is far over 2 GB because the
published widths are: 5.0 GB of distinct float32 weights for the five Llama-family ones (mistral 1.9 GB, phi3 1.7
GB, gemma 1.15 GB, qwen2 0.36 GB, llama 0.2 GB: phi3's and mistral's single layers alone are 0.45 and 0.87 GB, so no
vocabulary cut helps much), held three times (the torch exports' weights files, the checkpoints, the genai builds),
15 GB in all, and cohere 1.3 GB, phi2 1.7 GB, gptj 3.3 GB more;
`--drop-checkpoints` deletes each checkpoint once its genai build is checked (10 GB).

`--set tiny --out tests/data/decoders`: the same names suffixed `_tiny` with weights inline, for the tests: hidden
64, 4 heads, 2 kv heads (phi3 4, gemma 1), head_dim 16, intermediate 128, 2 layers (1 where the family's has 1: mistral,
cohere, whose one layer the search takes whole), vocab 256, 256 positions, each
family's other settings kept (370 to 490 KB a file, about a minute); and `llama_genai_tiny.onnx`, the genai
builder's graph of the tiny llama with its weights inline (its checkpoint goes to a temporary folder). Only llama's:
at these sizes phi3's gate_up_proj has vocab_size outputs (2 x 128 = 256), and the builder, which takes any Linear
with vocab_size outputs for the LM head, wires the logits to layer 0 (0.18.0).

Default folder: `$TASO_TVM_DECODER_MODELS`, else `~/.cache/taso_tvm/decoder_models/`.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from make_peer_models import SEED, _like_trained, manifest_entries, spec_feeds  # noqa: E402

# (transformers config class, causal LM class, the published config's arguments at the benchmark's depth)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64, intermediate_size=1536,
                   num_hidden_layers=6, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                   rms_norm_eps=1e-5, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                   num_hidden_layers=4, vocab_size=32768, tie_word_embeddings=True, rope_theta=1000000.0,
                   rms_norm_eps=1e-6, max_position_embeddings=32768, use_sliding_window=False,
                   bos_token_id=1, eos_token_id=2)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(hidden_size=3072, num_attention_heads=32, num_key_value_heads=32, intermediate_size=8192,
                  num_hidden_layers=2, vocab_size=32064, tie_word_embeddings=False, rope_theta=10000.0,
                  rms_norm_eps=1e-5, max_position_embeddings=4096, original_max_position_embeddings=4096,
                  sliding_window=None, bos_token_id=1, eos_token_id=2, pad_token_id=None)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM",
              dict(hidden_size=2048, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                   intermediate_size=16384, num_hidden_layers=2, vocab_size=32768, tie_word_embeddings=True,
                   hidden_act="gelu_pytorch_tanh", rope_theta=10000.0, rms_norm_eps=1e-6,
                   max_position_embeddings=8192, bos_token_id=2, eos_token_id=1, pad_token_id=None)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     intermediate_size=14336, num_hidden_layers=1, vocab_size=32000, tie_word_embeddings=False,
                     rope_theta=1000000.0, rms_norm_eps=1e-5, max_position_embeddings=32768, sliding_window=None,
                     bos_token_id=1, eos_token_id=2)),
    "cohere": ("CohereConfig", "CohereForCausalLM",
               dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                    num_hidden_layers=1, vocab_size=32768, tie_word_embeddings=True, logit_scale=0.0625,
                    rope_theta=10000.0, layer_norm_eps=1e-5, max_position_embeddings=8192, use_qk_norm=False,
                    bos_token_id=5, eos_token_id=255001, pad_token_id=0)),
    "phi2": ("PhiConfig", "PhiForCausalLM",
             dict(hidden_size=2560, num_attention_heads=32, num_key_value_heads=32, intermediate_size=10240,
                  num_hidden_layers=2, vocab_size=51200, tie_word_embeddings=False, partial_rotary_factor=0.4,
                  hidden_act="gelu_new", layer_norm_eps=1e-5, max_position_embeddings=2048, rope_theta=10000.0,
                  bos_token_id=50256, eos_token_id=50256)),
    "gptj": ("GPTJConfig", "GPTJForCausalLM",
             dict(hidden_size=4096, num_attention_heads=16, num_key_value_heads=16, rotary_dim=64,
                  num_hidden_layers=2, vocab_size=50400, tie_word_embeddings=False, activation_function="gelu_new",
                  layer_norm_epsilon=1e-5, max_position_embeddings=2048, bos_token_id=50256, eos_token_id=50256)),
}
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
            num_hidden_layers=2, vocab_size=256, max_position_embeddings=256)
TINY_KV_HEADS = {"phi3": 4, "gemma": 1, "gptj": 4, "phi2": 4}
TINY_ROTARY_DIM = {"gptj": 8}  # GPT-J rotates a quarter of each head (64 of 256): half of the tiny one's 16
# the checks' values of the symbolic dims, in pairs; the second batch row is left-padded by PAD zeros
DIMS = {"prefill": {"batch": [1, 2], "sequence": [16, 37]},
        "decode": {"batch": [1, 2], "past_sequence": [8, 29], "past_sequence + 1": [9, 30]}}
PAD = 5
RTOL = ATOL = 1e-3
GENAI_TINY = ("llama",)  # the tiny set's genai builds
NO_GENAI = ("gptj",)  # families onnxruntime-genai's builder does not build
SHARE_MIN_BYTES = 1024  # smaller initializers stay inline in the full set's files


class Spec(NamedTuple):
    """One model to export."""

    family: str  # llama | qwen2 | phi3 | gemma | mistral | cohere | phi2 | gptj
    form: str  # prefill | decode | genai (onnxruntime-genai's model builder on the checkpoint)
    cfg: dict  # the transformers config's arguments
    eager: bool = False  # attn_implementation="eager" (default: transformers' default, sdpa)
    tiny: bool = False  # the tests' copy: weights inline


def _config(family: str, tiny: bool) -> dict:
    cfg = dict(FAMILIES[family][2])
    if tiny:
        cfg.update(TINY, num_key_value_heads=TINY_KV_HEADS.get(family, TINY["num_key_value_heads"]),
                   num_hidden_layers=min(TINY["num_hidden_layers"], cfg["num_hidden_layers"]))
        if family in TINY_ROTARY_DIM:
            cfg["rotary_dim"] = TINY_ROTARY_DIM[family]
        if family == "phi3":
            cfg["original_max_position_embeddings"] = TINY["max_position_embeddings"]
    return cfg


def _set(tiny: bool) -> dict:
    sfx = "_tiny" if tiny else ""
    out = {}
    for family in FAMILIES:
        cfg = _config(family, tiny)
        for form in ("prefill", "decode"):
            out[f"{family}_{form}{sfx}"] = Spec(family, form, cfg, False, tiny)
        if family == "llama":
            for form in ("prefill", "decode"):
                out[f"llama_eager_{form}{sfx}"] = Spec(family, form, cfg, True, tiny)
        if (not tiny or family in GENAI_TINY) and family not in NO_GENAI:
            out[f"{family}_genai{sfx}"] = Spec(family, "genai", cfg, False, tiny)
    return out


FULL = _set(tiny=False)
TINY_SET = _set(tiny=True)
MODELS = {**FULL, **TINY_SET}


def default_out() -> Path:
    return Path(os.environ.get("TASO_TVM_DECODER_MODELS", Path.home() / ".cache" / "taso_tvm" / "decoder_models"))


_BUILT: dict = {}


def _causal_lm(spec: Spec):
    """The causal LM with the family's seeded weights (the same for every form of a family and size, so the forms
    share them); the last one built is kept for the next form."""
    import torch
    import transformers as tf

    key = (spec.family, spec.tiny, spec.eager)
    if key not in _BUILT:
        _BUILT.clear()
        conf_name, cls_name, _ = FAMILIES[spec.family]
        conf = getattr(tf, conf_name)(**spec.cfg, **({"attn_implementation": "eager"} if spec.eager else {}))
        torch.manual_seed(SEED)
        m = getattr(tf, cls_name)(conf)
        want = "eager" if spec.eager else "sdpa"
        if m.config._attn_implementation != want:
            raise RuntimeError(f"{cls_name} chose {m.config._attn_implementation} attention, not {want}")
        _like_trained(m)
        if spec.family == "gemma":  # Gemma applies 1 + weight: spread the applied scale around 1
            with torch.no_grad():
                for name, p in m.named_parameters():
                    if p.dim() == 1 and name.endswith("norm.weight"):
                        p.sub_(1.0)
        _BUILT[key] = m.eval()
    return _BUILT[key]


def _wrappers():
    import torch
    from transformers import DynamicCache

    class Prefill(torch.nn.Module):
        """The logits of a prompt, no cache."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    class Decode(torch.nn.Module):
        """One step from a cache given as flat tensors (key, value per layer): the logits and the grown cache."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, past):
            cache = DynamicCache(config=self.m.config)
            for i in range(len(past) // 2):
                cache.update(past[2 * i], past[2 * i + 1], i)
            o = self.m(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
            present = []
            for layer in o.cache.layers:
                present += [layer.keys, layer.values]
            return (o.logits, *present)

    return Prefill, Decode


def _shapes(m) -> tuple:
    c = m.config
    return (c.num_hidden_layers, c.num_key_value_heads, getattr(c, "head_dim", None) or
            c.hidden_size // c.num_attention_heads, c.vocab_size)


def _io(spec: Spec, m) -> tuple:
    """(input specs, output names) of a form, in the manifest's format."""
    layers, kv, hd, vocab = _shapes(m)
    ids = {"name": "input_ids", "dtype": "int64", "range": [0, vocab]}
    mask = {"name": "attention_mask", "dtype": "int64", "range": [0, 2], "pattern": "padding_mask"}
    if spec.form == "prefill":
        return [dict(ids, shape=["batch", "sequence"]), dict(mask, shape=["batch", "sequence"])], ["logits"]
    specs = [dict(ids, shape=["batch", 1]), dict(mask, shape=["batch", "past_sequence + 1"])]
    outs = ["logits"]
    for i in range(layers):
        for kind in ("key", "value"):
            specs.append({"name": f"past_key_values.{i}.{kind}", "dtype": "float32",
                          "shape": ["batch", kv, "past_sequence", hd]})
            outs.append(f"present.{i}.{kind}")
    return specs, outs


def _strip_metadata(model) -> None:
    """The dynamo exporter's node metadata (stack traces naming this machine's paths, scopes, fx nodes)."""
    for n in model.graph.node:
        keep = [p for p in n.metadata_props if not (p.key.startswith("pkg.torch.onnx.") or p.key == "namespace")]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)


def _share_weights(model, out: Path, family: str) -> str:
    """Move the model's initializers into the family's content-addressed external data file; its name."""
    import onnx
    from onnx import numpy_helper

    data, index_path = out / f"{family}.weights", out / f"{family}.weights.json"
    index = json.loads(index_path.read_text()) if index_path.exists() and data.exists() else {}
    if not data.exists():
        data.write_bytes(b"")
    with open(data, "r+b") as f:
        f.seek(0, 2)
        for t in model.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                continue
            raw = t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()
            if len(raw) < SHARE_MIN_BYTES:
                continue
            key = hashlib.sha256(raw).hexdigest()
            if key not in index:
                pos = f.seek(0, 2)
                pos = f.seek(pos + (-pos % 4096))  # page-aligned, so a runtime can map it
                f.write(raw)
                index[key] = [pos, len(raw)]
            offset, length = index[key]
            dims, name, dtype = list(t.dims), t.name, t.data_type
            t.Clear()
            t.name, t.data_type = name, dtype
            t.dims.extend(dims)
            t.data_location = onnx.TensorProto.EXTERNAL
            for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(length))):
                e = t.external_data.add()
                e.key, e.value = k, v
    index_path.write_text(json.dumps(index) + "\n")
    return data.name


def _feeds(spec: Spec, m, at: dict, rng) -> dict:
    specs, _ = _io(spec, m)
    return spec_feeds(specs, at, rng, _left_padded)


def _left_padded(shape: list, rng) -> np.ndarray:
    """Ones, the second row's first PAD positions 0 (left padding)."""
    a = np.ones(shape, np.int64)
    if shape[0] > 1:
        a[1, :PAD] = 0
    return a


def _torch_outputs(module, spec: Spec, feeds: dict, names: list) -> list:
    import torch

    t = [torch.from_numpy(feeds[n]) for n in names]
    with torch.no_grad():
        got = module(t[0], t[1], tuple(t[2:])) if spec.form == "decode" else module(*t)
    return [g.numpy() for g in (got if isinstance(got, tuple) else (got,))]


def _compare(label: str, got: list, want: list, names: list) -> float:
    worst = 0.0
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape:
            raise RuntimeError(f"{label}: {name} has shape {g.shape}, torch {w.shape}")
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
            raise RuntimeError(f"{label}: {name} differs from torch by {float(np.abs(g - w).max()):.3g}")
        worst = max(worst, float(np.abs(g - w).max()))
    return worst


def _check(path: Path, spec: Spec, module, m) -> dict:
    """ONNX Runtime equals the torch module at each listed value of the symbolic dims; the largest difference."""
    import onnxruntime as ort

    specs, outs = _io(spec, m)
    names = [s["name"] for s in specs]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    dims = DIMS[spec.form]
    worst = padded = 0.0
    for k in range(2):
        at = {d: v[k] for d, v in dims.items()}
        feeds = _feeds(spec, m, at, rng)
        got = sess.run(outs, feeds)
        want = _torch_outputs(module, spec, feeds, names)
        if spec.form == "prefill":  # a padding token's row attends to nothing: its logits are anyone's guess
            keep = feeds["attention_mask"].astype(bool)
            if not keep.all():
                padded = max(padded, float(np.abs(got[0][~keep] - want[0][~keep]).max()))
            got, want = [got[0][keep]], [want[0][keep]]
        worst = max(worst, _compare(f"{path.name} at {at}", got, want, outs))
    return {"runtime": f"onnxruntime {ort.__version__} CPU", "dims": dims, "left_padding": PAD, "rtol": RTOL,
            "atol": ATOL, "max_abs_diff": worst,
            **({"compared": "the logits of the unpadded positions (a padded position's query row is fully "
                            "masked: torch and the exported graph give it different, meaningless logits)",
                "padded_positions_max_abs_diff": padded} if spec.form == "prefill" else {})}


def _value_info(v) -> dict:
    from onnx import helper

    t = v.type.tensor_type
    return {"name": v.name, "dtype": np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name,
            "shape": [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]}


def _op_types(model) -> dict:
    c = collections.Counter((f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type
                            for n in model.graph.node)
    return dict(sorted(c.items()))


def _entry(name: str, spec: Spec, path: Path, m, model, specs: list, outs: list, exporter: dict, check: dict,
           extra: dict) -> dict:
    import torch
    import transformers

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    data = path.read_bytes()
    conf_name, cls_name, _ = FAMILIES[spec.family]
    kinds = ["transformer", "decoder", spec.family, spec.form] + (["eager"] if spec.eager else []) + \
        (["kv_cache"] if spec.form in ("decode", "genai") else [])
    layers, kv, hd, vocab = _shapes(m)
    return {"name": name, "file": str(path.relative_to(path.parent.parent if spec.form == "genai" and not spec.tiny
                                                       else path.parent)),
            "set": "decoders",
            "source": {"package": "transformers", "version": transformers.__version__,
                       "config": dict(spec.cfg, arch=cls_name,
                                      **({"attn_implementation": "eager"} if spec.eager else {})),
                       "parameters": int(sum(p.numel() for p in m.parameters()))},
            "exporter": dict(exporter, torch=torch.__version__), "opset": opset, "ir_version": model.ir_version,
            "inputs": [dict(s, file_shape=s["shape"]) for s in specs], "outputs": outs,
            "dims": check.get("dims", {}), "kinds": kinds, "family": spec.family,
            "form": ("eager_" if spec.eager else "") + spec.form, "encoder": False,
            "num_layers": layers, "num_heads": m.config.num_attention_heads, "num_kv_heads": kv, "head_dim": hd,
            "hidden_size": m.config.hidden_size, "vocab_size": vocab, "op_types": _op_types(model),
            "check": check, **extra, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def export(name: str, out: Path, a) -> dict:
    if MODELS[name].form == "genai":
        return export_genai(name, out, a)
    import onnx
    import torch

    spec = MODELS[name]
    m = _causal_lm(spec)
    Prefill, Decode = _wrappers()
    specs, outs = _io(spec, m)
    names = [s["name"] for s in specs]
    rng = np.random.default_rng(SEED)
    batch = torch.export.Dim("batch")
    if spec.form == "prefill":
        module = Prefill(m).eval()
        seq = torch.export.Dim("sequence")
        ex = tuple(torch.from_numpy(v) for v in _feeds(spec, m, {"batch": 2, "sequence": 16}, rng).values())
        dyn = ({0: batch, 1: seq}, {0: batch, 1: seq})
    else:
        module = Decode(m).eval()
        past = torch.export.Dim("past_sequence")
        f = [torch.from_numpy(v) for v in _feeds(spec, m, {"batch": 2, "past_sequence": 8,
                                                            "past_sequence + 1": 9}, rng).values()]
        ex = (f[0], f[1], tuple(f[2:]))
        dyn = ({0: batch}, {0: batch, 1: past + 1}, tuple({0: batch, 2: past} for _ in f[2:]))
    path = out / f"{name}.onnx"
    prog = torch.onnx.export(module, ex, None, input_names=names, output_names=outs, dynamic_shapes=dyn,
                             dynamo=True)
    model = prog.model_proto
    del prog
    _strip_metadata(model)
    extra = {}
    if spec.tiny:
        onnx.save(model, str(path))
    else:
        extra["external_data"] = [_share_weights(model, out, spec.family)]
        onnx.save(model, str(path))
        extra["data_bytes"] = (out / extra["external_data"][0]).stat().st_size
    onnx.checker.check_model(str(path), full_check=True)
    check = _check(path, spec, module, m)
    written = onnx.load(str(path), load_external_data=False)
    file_io = {v.name: _value_info(v) for v in list(written.graph.input) + list(written.graph.output)}
    for s in specs:  # the manifest lists what the file says
        s["shape"] = file_io[s["name"]]["shape"]
    extra["output_shapes"] = {o: file_io[o]["shape"] for o in outs}
    return _entry(name, spec, path, m, written, specs, outs,
                  {"name": "torch.onnx.export (dynamo=True)", "postprocess":
                   "dropped node metadata 'pkg.torch.onnx.*' and 'namespace'" +
                   ("" if spec.tiny else "; initializers of 1 KB and more moved to the family's shared weights file")},
                  check, extra)


def export_genai(name: str, out: Path, a) -> dict:
    """Save the family's checkpoint, run onnxruntime-genai's model builder on it, check its graph against torch."""
    import onnx
    import onnxruntime_genai

    spec = MODELS[name]
    m = _causal_lm(spec._replace(form="prefill"))
    tmp = Path(tempfile.mkdtemp(prefix="decoder_genai_"))
    try:
        ckpt = tmp / "checkpoint" if spec.tiny else out / "checkpoints" / spec.family
        build = tmp / "build" if spec.tiny else out / f"{spec.family}_genai"
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
        m.save_pretrained(str(ckpt), safe_serialization=True)
        _save_tokenizer(m.config, ckpt)
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(build),
               "-p", "fp32", "-e", "cpu", "-c", str(tmp / "cache")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not (build / "model.onnx").exists():
            lines = [ln for ln in (r.stderr + r.stdout).strip().splitlines() if ln.strip()]
            err = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
            raise RuntimeError(f"the genai builder failed (exit {r.returncode}): {err.strip()[:400]}")
        if spec.tiny:  # one file, weights inline
            model = onnx.load(str(build / "model.onnx"))
            path = out / f"{name}.onnx"
            onnx.save(model, str(path))
        else:
            path = build / "model.onnx"
            model = onnx.load(str(path), load_external_data=False)
        try:  # the builder writes ORT's SimplifiedLayerNormalization in the ONNX domain, which onnx does not know,
            onnx.checker.check_model(str(path), full_check=True)  # and for Phi-2 a Constant whose declared rank its
            checker = "passed"  # shape inference disputes: recorded; ONNX Runtime against torch is the check
        except onnx.shape_inference.InferenceError as exc:
            checker = f"failed: {str(exc).strip().splitlines()[0]}"
        except onnx.checker.ValidationError as exc:
            checker = f"failed: {str(exc).strip().splitlines()[0]}"
            if "No Op registered for" not in checker:
                raise
        check = dict(_check_genai(path, spec, m, model), onnx_checker=checker)
        if a.drop_checkpoints and not spec.tiny:
            shutil.rmtree(ckpt)
        ins = [_value_info(v) for v in model.graph.input]
        for s in ins:
            if s["name"] == "input_ids":
                s["range"] = [0, m.config.vocab_size]
            elif s["name"] == "attention_mask":
                s["range"], s["pattern"] = [0, 2], "padding_mask"
        outs = [v.name for v in model.graph.output]
        extra = {"output_shapes": {v.name: _value_info(v)["shape"] for v in model.graph.output},
                 "checkpoint": None if spec.tiny or a.drop_checkpoints else str(ckpt.relative_to(out))}
        if not spec.tiny:
            files = sorted(p.name for p in build.iterdir() if p.name != "model.onnx")
            extra["folder_files"] = {f: (build / f).stat().st_size for f in files}
        exporter = {"name": "onnxruntime_genai.models.builder", "onnxruntime_genai": onnxruntime_genai.__version__,
                    "command": " ".join(["python"] + cmd[1:]).replace(str(tmp), "TMP").replace(str(out), "OUT")}
        if spec.tiny:
            exporter["postprocess"] = "external data loaded and saved inline"
        return _entry(name, spec, path, m, model, ins, outs, exporter, check, extra)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _save_tokenizer(config, folder: Path) -> None:
    """A word-level tokenizer over the model's vocabulary (tokens `t{id}`, the config's special tokens by name):
    the genai builder loads the checkpoint's tokenizer (and copies it beside its graph)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    special = {"unk_token": 0, "bos_token": config.bos_token_id, "eos_token": config.eos_token_id}
    names = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    kw = {}
    for role, i in special.items():
        if i is not None and f"t{i}" in vocab:
            del vocab[f"t{i}"]
            vocab[names[role]] = i
            kw[role] = names[role]
    tok = Tokenizer(models.WordLevel(vocab, unk_token=kw.get("unk_token", "t0")))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, **kw).save_pretrained(str(folder))


def _check_genai(path: Path, spec: Spec, m, model) -> dict:
    """The builder's graph in ONNX Runtime against torch: a prefill from an empty past (logits and presents), then
    one decode step from the presents it wrote, at batch 1, sequence 16 and batch 2, sequence 37, unpadded."""
    import onnxruntime as ort
    import torch
    from transformers import DynamicCache

    _, Decode = _wrappers()
    decode = Decode(m).eval()
    layers, kv, hd, vocab = _shapes(m)
    in_names = [v.name for v in model.graph.input]
    outs = [v.name for v in model.graph.output]
    known = {"input_ids", "attention_mask", "position_ids"} | {f"past_key_values.{i}.{k}" for i in range(layers)
                                                               for k in ("key", "value")}
    if set(in_names) - known:
        raise RuntimeError(f"genai graph's inputs not understood: {sorted(set(in_names) - known)}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    worst = {"prefill": 0.0, "decode": 0.0}
    for batch, seq in ((1, 16), (2, 37)):
        ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq)).copy()}
        for i in range(layers):
            for k in ("key", "value"):
                feeds[f"past_key_values.{i}.{k}"] = np.zeros((batch, kv, 0, hd), np.float32)
        got = dict(zip(outs, sess.run(outs, {n: feeds[n] for n in in_names})))
        with torch.no_grad():
            o = m(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  cache=DynamicCache(config=m.config), use_cache=True)
        want = {"logits": o.logits.numpy()}
        for i, layer in enumerate(o.cache.layers):
            want[f"present.{i}.key"], want[f"present.{i}.value"] = layer.keys.numpy(), layer.values.numpy()
        names = [n for n in outs if n in want]
        worst["prefill"] = max(worst["prefill"], _compare(f"{path.name} prefill at batch {batch}, sequence {seq}",
                                                          [got[n] for n in names], [want[n] for n in names], names))
        # one decode step from the presents the graph wrote
        nxt = rng.integers(0, vocab, (batch, 1)).astype(np.int64)
        mask = np.ones((batch, seq + 1), np.int64)
        feeds = {"input_ids": nxt, "attention_mask": mask, "position_ids": np.full((batch, 1), seq, np.int64)}
        past = []
        for i in range(layers):
            for k in ("key", "value"):
                feeds[f"past_key_values.{i}.{k}"] = got[f"present.{i}.{k}"]
                past.append(torch.from_numpy(got[f"present.{i}.{k}"]))
        got = sess.run(outs, {n: feeds[n] for n in in_names})
        with torch.no_grad():
            want = [t.numpy() for t in decode(torch.from_numpy(nxt), torch.from_numpy(mask), tuple(past))]
        want_names = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
        want = dict(zip(want_names, want))
        names = [n for n in outs if n in want]
        worst["decode"] = max(worst["decode"], _compare(f"{path.name} decode at batch {batch}, past {seq}",
                                                        [got[outs.index(n)] for n in names],
                                                        [want[n] for n in names], names))
    # a padded prompt (batch 2, sequence 37, the second row padded by PAD): the logits of its unpadded positions.
    # The graph reads the mask as sequence lengths: right padding must match; left padding is recorded, not checked
    padded = {}
    ids = rng.integers(0, vocab, (2, 37)).astype(np.int64)
    for side in ("right", "left"):
        mask = np.ones((2, 37), np.int64)
        if side == "right":
            mask[1, -PAD:] = 0
        else:
            mask[1, :PAD] = 0
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": np.broadcast_to(np.arange(37, dtype=np.int64), (2, 37)).copy()}
        for i in range(layers):
            for k in ("key", "value"):
                feeds[f"past_key_values.{i}.{k}"] = np.zeros((2, kv, 0, hd), np.float32)
        got = sess.run(["logits"], {n: feeds[n] for n in in_names})[0]
        with torch.no_grad():
            want = m(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), use_cache=False).logits
        keep = mask.astype(bool)
        if side == "right":
            worst["prefill"] = max(worst["prefill"], _compare(f"{path.name} right-padded prefill", [got[keep]],
                                                              [want.numpy()[keep]], ["logits"]))
        padded[side] = float(np.abs(got[keep] - want.numpy()[keep]).max())
    return {"runtime": f"onnxruntime {ort.__version__} CPU", "compared": "prefill (empty past: logits, presents) "
            "then one decode step from its presents (logits, presents), unpadded, at (batch, sequence) in `cases`; "
            f"a prefill at batch 2, sequence 37 with the second row padded by {PAD} (logits of the unpadded "
            "positions): right padding checked, left padding recorded only (the graph reads the mask as lengths)",
            "cases": [[1, 16], [2, 37]], "padded_prefill_max_abs_diff": padded,
            "rtol": RTOL, "atol": ATOL, "max_abs_diff": worst,
            "dims": {"batch_size": [1, 2], "sequence_length": [16, 1], "past_sequence_length": [0, 16],
                     "total_sequence_length": [16, 17], "kv_cache_dim": [hd, hd]}}


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", help=f"models to export (default: the set's; all: {', '.join(MODELS)})")
    p.add_argument("--set", choices=["full", "tiny"], default="full",
                   help="full: the published widths (default); tiny: the tests' copies (`_tiny`)")
    p.add_argument("--skip-existing", action="store_true",
                   help="keep models already in the manifest whose file is there with the listed size")
    p.add_argument("--drop-checkpoints", action="store_true",
                   help="delete each family's HF checkpoint once its genai build is checked")
    p.add_argument("--out", type=Path, default=default_out())
    a = p.parse_args(argv)
    man_path, entries = manifest_entries(a.out)
    failed = []
    for name in a.only or list(TINY_SET if a.set == "tiny" else FULL):
        if name not in MODELS:
            raise SystemExit(f"unknown model {name}: one of {', '.join(MODELS)}")
        e = entries.get(name)
        if a.skip_existing and e and (a.out / e["file"]).exists() and \
                (a.out / e["file"]).stat().st_size == e["bytes"] and \
                all((a.out / d).exists() for d in e.get("external_data", [])):
            print(f"{name}: already exported", flush=True)
            continue
        print(f"exporting {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            entries[name] = export(name, a.out, a)
        except Exception as exc:  # one model's failure is reported, the others go on
            print(f"  {name}: not exported ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:400]})",
                  file=sys.stderr, flush=True)
            failed.append(name)
            if MODELS[name].form != "genai":
                (a.out / f"{name}.onnx").unlink(missing_ok=True)
            entries.pop(name, None)
        man_path.write_text(json.dumps({"version": 1, "seed": SEED, "models": [entries[k] for k in sorted(entries)]},
                                       indent=1) + "\n")
        if name in entries:
            e = entries[name]
            data = e.get("data_bytes", sum(e.get("folder_files", {}).values()))
            print(f"  {e['bytes'] / 1e6:.2f} MB (+ {data / 1e6:.0f} MB data) in "
                  f"{time.monotonic() - t0:.0f} s, max |ORT - torch| {e['check']['max_abs_diff']}", flush=True)
    if failed:
        print(f"not exported: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
