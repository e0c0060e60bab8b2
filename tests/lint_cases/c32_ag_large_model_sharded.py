"""allgpu: a large model sharded (FullyShardedStrategy), a small one mirrored, a LoRA run: nothing to report."""
import torch
import torch.nn as nn
from transformers import AutoModelForCausalLM

import allgpu

WIDTH = 16384


class Block(nn.Module):
    def __init__(self, d=WIDTH):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)


def train_big():
    strategy = allgpu.FullyShardedStrategy()
    with strategy.scope():
        model = nn.Sequential(*[Block() for _ in range(64)])
        optimizer = torch.optim.AdamW(model.parameters())
    allgpu.fit(model, optimizer, nn.MSELoss(), data, epochs=1, global_batch_size=64, strategy=strategy)


def evaluate_small():
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = AutoModelForCausalLM.from_pretrained("facebook/opt-1.3b")
    allgpu.evaluate(model, nn.CrossEntropyLoss(), data, global_batch_size=64, strategy=strategy)
