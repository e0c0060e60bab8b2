"""FSDP1's ``auto_wrap_policy`` as ``FullyShardedStrategy(shard_modules=...)``, and FSDP1's ``MixedPrecision`` /
``CPUOffload`` objects, as pytorch/tutorials' FSDP tutorial passes them.

Before: a policy function stopped the job (every replica) with ``TypeError: size_based_auto_wrap_policy() missing
2 required positional arguments: 'recurse' and 'nonwrapped_numel'``, a ``ModuleWrapPolicy`` with one missing
``'recurse'``, and ``mixed_precision=MixedPrecision(...)`` with ``TypeError: unhashable type: 'MixedPrecision'``.
The units are checked against FSDP1's own walk (``torch.distributed.fsdp.wrap._recursive_wrap``, recording what it
would wrap)."""

import functools

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import CPUOffload, MixedPrecision
from torch.distributed.fsdp.wrap import (CustomPolicy, ModuleWrapPolicy, _recursive_wrap, lambda_auto_wrap_policy,
                                         size_based_auto_wrap_policy, transformer_auto_wrap_policy)

import allgpu
from allgpu.errors import ArgumentTypeError
from allgpu.strategies.sharded.plan import plan_units, validate_shard_modules

pytestmark = pytest.mark.unit


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.attn = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.mlp(self.attn(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.blocks = nn.Sequential(*[Block(16) for _ in range(3)])
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 50)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))))


def _fsdp1_wraps(model, policy):
    """What FSDP1 wraps, by its own walk with a wrapper that records the module and returns it unwrapped."""
    wrapped = []

    def record(module, **kwargs):
        wrapped.append(module)
        return module

    if hasattr(policy, "_run_policy"):
        return set(policy._run_policy(model, set(), {})) - {model}
    _recursive_wrap(model, policy, record, set(), set(), only_wrap_children=True)
    return set(wrapped)


POLICIES = {
    "size 1000": functools.partial(size_based_auto_wrap_policy, min_num_params=1000),
    "size 100": functools.partial(size_based_auto_wrap_policy, min_num_params=100),
    "transformer": functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}),
    "lambda": functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: isinstance(m, nn.Embedding)),
    "module classes": ModuleWrapPolicy({Block, nn.Embedding}),
    "custom": CustomPolicy(lambda m: isinstance(m, Block) or m is None),
}


@pytest.mark.parametrize("name", POLICIES)
def test_an_fsdp1_policy_shards_the_modules_fsdp1_wraps(name):
    policy = POLICIES[name]
    validate_shard_modules(policy)
    model = Net()
    names = {m: n for n, m in model.named_modules()}
    expected = {names[m] for m in _fsdp1_wraps(model, policy)}  # the recording wrapper leaves the model as it was
    got = [names[m] for m in plan_units(model, policy)]
    assert got and sorted(got) == sorted(expected)
    assert not any(later.startswith(f"{unit}.") for i, unit in enumerate(got) for later in got[i + 1:])  # children
    # before their parents, as fully_shard needs


def test_a_strategy_trains_with_an_fsdp1_policy_and_names_fsdp1_objects():
    strategy = allgpu.FullyShardedStrategy(num_replicas=1, shard_modules=POLICIES["transformer"])
    try:
        with strategy.scope():
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.tensor([[1, 2, 3]])).sum().backward()
        optimizer.step()
        assert strategy.plans["Net"] == "3 x Block"
    finally:
        strategy.close()
    with pytest.raises(ArgumentTypeError, match=r"mixed_precision='bf16'"):
        allgpu.FullyShardedStrategy(mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    with pytest.raises(ArgumentTypeError, match=r"offload_to_cpu=True"):
        allgpu.FullyShardedStrategy(offload_to_cpu=CPUOffload(offload_params=True))
