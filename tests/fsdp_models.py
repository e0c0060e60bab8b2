"""Shared by the FullyShardedStrategy tests: a model with repeated blocks, a tied weight and a frozen parameter."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

VOCAB = 16


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class TiedNet(nn.Module):
    """Token embedding (16 x width), ``blocks`` Blocks, an output projection sharing the embedding's weight, and a
    frozen per-feature scale. Input: (batch, 4) token ids; output: (batch, 16) logits."""

    def __init__(self, width: int = 16, blocks: int = 3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(blocks)])
        self.out = nn.Linear(width, VOCAB, bias=False)
        self.out.weight = self.embed.weight  # tied
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, width), requires_grad=False)  # frozen

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h.mean(1) * self.scale)


def make_data(n=320, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, 4), generator=g)
    y = (x[:, 0] * 3 + x[:, 1]) % VOCAB
    return TensorDataset(x, y)
