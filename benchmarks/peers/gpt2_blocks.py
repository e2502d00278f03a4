"""GPT-2's architecture written out in torch (token and position embeddings, pre-norm blocks with packed Q/K/V,
causal additive mask, tanh GELU, final layer norm): transformers' own GPT-2 does not export with torch 2.13 here
(TorchScript fails in its mask code, `aten::diff` / `unordered_map::at`; the dynamo export fails in ONNX Runtime's
LayerNormalization). Used by `make_peer_models.py` and `../bench_big.py`; needs torch.

`python benchmarks/peers/gpt2_blocks.py OUT.onnx` writes the tiny copy the tests use (tests/data/gpt2_blocks_tiny.onnx:
2 layers, hidden 32, 4 heads, vocabulary 96, 64 positions, TorchScript export at opset 17)."""
import math

import torch

nn, F = torch.nn, torch.nn.functional
VOCAB, POSITIONS = 50257, 1024


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.c_attn, self.c_proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.c_fc, self.mlp_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x, mask):
        b, t, _ = x.shape
        h, nh = self.hidden, self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (z.view(b, t, nh, h // nh).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // nh) + mask[:t, :t]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """input_ids [batch, sequence] -> the last hidden state [batch, sequence, hidden]."""

    def __init__(self, hidden: int, layers: int, heads: int, vocab: int = VOCAB, positions: int = POSITIONS):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
        self.h = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.register_buffer("mask", torch.full((positions, positions), -1e4).triu(1))

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for blk in self.h:
            x = blk(x, self.mask)
        return self.ln_f(x)


def export_tiny(path: str) -> None:
    """The tests' copy: GPT-2's form at a size that optimizes in seconds."""
    torch.manual_seed(0)
    model = GPT2(hidden=32, layers=2, heads=4, vocab=96, positions=64).eval()
    torch.onnx.export(model, (torch.randint(0, 96, (1, 16)),), path, input_names=["input_ids"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}})


if __name__ == "__main__":
    import sys

    export_tiny(sys.argv[1])
