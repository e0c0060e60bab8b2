"""Fine-tuning that freezes a backbone for the first steps and then unfreezes it (``requires_grad_(True)``, as the
torchvision and timm fine-tuning recipes do): the backbone's parameters were left out of gradient averaging when
mirrored frozen, so after unfreezing each replica trained them on its own gradients and the replicas drifted apart
silently (0.22 apart after 6 steps in a stranger's run). Now 2 replicas equal one at the same global batch."""

import pytest
import torch

import allgpu

pytestmark = pytest.mark.replicas


def _fine_tune(steps: int = 8, unfreeze_at: int = 3):
    strategy = allgpu.MirroredStrategy()
    rank, world = strategy.replica_id_in_sync, strategy.num_replicas_in_sync
    torch.manual_seed(0)
    with strategy.scope():
        backbone = torch.nn.Linear(6, 8)
        model = torch.nn.Sequential(backbone, torch.nn.Tanh(), torch.nn.Linear(8, 1))
        backbone.requires_grad_(False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(steps * 8, 6, generator=g), torch.randn(steps * 8, 1, generator=g)
    for step in range(steps):
        if step == unfreeze_at:
            backbone.requires_grad_(True)
        if step == steps - 2:
            model[2].requires_grad_(False)  # and freezing one later: no error, left as it is
        rows = slice(step * 8 + rank * 8 // world, step * 8 + (rank + 1) * 8 // world)
        torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.timeout(120)
def test_a_backbone_unfrozen_after_mirroring_is_averaged():
    one = allgpu.launch(_fine_tune, num_replicas=1)[0]
    two = allgpu.launch(_fine_tune, num_replicas=2)
    for a, b, c in zip(one, *two):
        torch.testing.assert_close(b, c, rtol=0, atol=0)  # the replicas agree
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # and equal one replica
    assert not torch.equal(one[0], _initial_backbone())  # the backbone did train


def _initial_backbone():
    torch.manual_seed(0)
    return torch.nn.Linear(6, 8).weight.detach()
