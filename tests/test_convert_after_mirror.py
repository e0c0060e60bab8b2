"""A model converted after mirroring (``model.to(torch.bfloat16)``, ``model.double()``, or one submodule's ``.half()``):
its float32 gradient buckets handed float32 gradients to the converted parameters, which torch refuses ("attempting to
assign a gradient with dtype 'float' to a tensor with grad_dtype 'Double'"), on every replica at the first backward.
The buckets now follow the parameters' dtypes; 2 replicas equal one."""

import pytest
import torch

import allgpu

pytestmark = pytest.mark.replicas


def _train(convert: str, steps: int = 4):
    strategy = allgpu.MirroredStrategy()
    rank, world = strategy.replica_id_in_sync, strategy.num_replicas_in_sync
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    if convert == "whole":
        model.double()
    else:
        model[0].double()  # one submodule: not the first parameter of its bucket
        model[2].register_forward_pre_hook(lambda m, args: (args[0].float(),))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(steps * 8, 6, generator=g, dtype=torch.float64), torch.randn(steps * 8, 1, generator=g)
    for step in range(steps):
        rows = slice(step * 8 + rank * 8 // world, step * 8 + (rank + 1) * 8 // world)
        out = model(x[rows])
        torch.nn.functional.mse_loss(out.double(), y[rows].double()).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("convert", ["whole", "part"])
def test_a_model_converted_after_mirroring_trains_as_one_replica(convert):
    one = allgpu.launch(_train, num_replicas=1, args=(convert,))[0]
    two = allgpu.launch(_train, num_replicas=2, args=(convert,))
    for a, b, c in zip(one, *two):
        assert a.dtype == b.dtype
        torch.testing.assert_close(b, c, rtol=0, atol=0)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
