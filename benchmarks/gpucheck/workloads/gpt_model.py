"""The small GPT of issue 33, as a user writes one: the model the GPU check's launch-bound job
(``train_job.py launch``) and the probe's on/off cost harness (``gpt_onoff.py``) both train.

Shapes: ``launch``, the case the issue saw misread (8 layers, width 512, sequence 512, four
micro-batches of 16 a step: about 70 ms a step on an H100/H200 in bf16 with fused AdamW, not
compiled, the card idle between kernels a third of the time); ``gpu``, the card the limit (width
1024, one micro-batch of 64); ``toy``, the same code small enough for a CPU (CI, no card).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SHAPES = {
    "launch": {"vocab": 8192, "width": 512, "layers": 8, "heads": 8, "seq": 512, "batch": 16,
               "micro": 4},
    "gpu": {"vocab": 8192, "width": 1024, "layers": 8, "heads": 16, "seq": 512, "batch": 64,
            "micro": 1},
    "toy": {"vocab": 64, "width": 32, "layers": 2, "heads": 2, "seq": 16, "batch": 4, "micro": 2},
}  # fmt: skip


class Block(torch.nn.Module):
    """A pre-norm GPT block: attention through ``scaled_dot_product_attention`` (flash)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(torch.nn.Module):
    """Token and position embeddings, the blocks, a final norm and the vocabulary head; given
    ``targets``, forward returns the loss (as nanoGPT does), else the logits."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq: int, **_: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.zeros(seq, width))
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
