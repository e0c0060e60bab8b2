"""PT012: a sharded model's forward under a rank guard (issue 24 part 4), with the near-misses that are fine."""

import textwrap

import pytest

from allgpu.lint import check_source

pytestmark = pytest.mark.unit


def pt012(src):
    return [f for f in check_source(textwrap.dedent(src), "t.py") if f.rule_id == "PT012"]


ALLGPU = """
import allgpu, torch
strategy = allgpu.FullyShardedStrategy()
with strategy.scope():
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters())
"""


def test_allgpu_fully_sharded_forward_under_is_chief():
    [f] = pt012(ALLGPU + """
for step in range(10):
    loss = model(x).sum()
    if strategy.is_chief:
        val = model(x_val).mean()
        print(val)
""")
    assert f.line == 11 and "if strategy.is_chief:" in f.message and "Fix: " in f.message
    assert "reduce the metric" in f.message


def test_nanogpt_helper_under_master_process_and_generate():
    found = pt012("""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
master_process = ddp_rank == 0
model = FSDP(GPT(conf))

@torch.no_grad()
def estimate_loss():
    return model(X, Y)

if iter_num % eval_interval == 0 and master_process:
    losses = estimate_loss()
if master_process:
    print(model.generate(idx, 20))
""")
    assert [f.line for f in found] == [12, 14] and "estimate_loss()" in found[0].message


def test_else_branch_of_rank_guard_and_fully_shard_argument():
    found = pt012("""
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
fully_shard(model)
if dist.get_rank() == 0:
    log("skip")
else:
    out = model(x)
""")
    assert [f.line for f in found] == [8] and "else branch" in found[0].message


def test_not_reported():
    # the forward on every replica, only the print guarded
    assert not pt012(ALLGPU + "val = model(x_val).mean()\nif strategy.is_chief:\n    print(val)\n")
    # a mirrored (not sharded) model may run forward on one replica
    assert not pt012(ALLGPU.replace("FullyShardedStrategy", "MirroredStrategy") +
                     "if strategy.is_chief:\n    print(model(x))\n")
    # DDP, as nanoGPT really uses it
    assert not pt012("""
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(model)
if master_process:
    losses = model(X)
""")
    # the optimizer built in the sharded scope is not a model
    assert not pt012(ALLGPU + "if strategy.is_chief:\n    optimizer.zero_grad()\n")
