"""CentralStorageStrategy: one copy of parameters and optimizer state, same training as one replica."""

import pytest
import torch

import allgpu
from tests.test_equivalence import make_data

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _train(kind: str, steps: int = 10):
    strategy = allgpu.CentralStorageStrategy() if kind == "central" else allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = strategy.distribute_dataset(make_data(), 16, seed=7, num_workers=0)
    for step, (x, y) in enumerate(data):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 == steps:
            break
    params = [p.detach().clone() for p in model.parameters()]
    state_devices = sorted({str(t.device) for s in optimizer.state.values() for t in s.values()
                            if isinstance(t, torch.Tensor) and t.dim() > 0})
    central = None
    if kind == "central" and strategy.is_chief:
        central = [strategy.central_copy(p).clone() for p in model.parameters()]
        assert all(strategy.central_copy(p).data_ptr() != p.data_ptr() for p in model.parameters())
    return params, len(optimizer.state), state_devices, central


@pytest.mark.timeout(120)
def test_central_storage_trains_like_one_replica_with_state_only_on_the_central_copy():
    reference = allgpu.launch(_train, num_replicas=1, args=("mirrored",))[0][0]
    results = allgpu.launch(_train, num_replicas=2, args=("central",))
    (params0, states0, devices0, central0), (params1, states1, _, central1) = results
    for got, want in zip(params0, reference):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))  # replicas refreshed from the central copy
    assert all(torch.equal(a, b) for a, b in zip(params0, central0))
    assert states0 == 4 and devices0 == ["cpu"]  # Adam's moments, once, on the central device
    assert states1 == 0 and central1 is None  # replica 1 keeps no optimizer state at all
