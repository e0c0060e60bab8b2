"""The core invariant: N replicas at global batch B train exactly like one replica at batch B."""

import pytest
import torch
from torch.utils.data import TensorDataset

import allgpu

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def make_data(n=160, features=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, 1, generator=g)).tanh() + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def train(optimizer_name: str, steps: int = 20, global_batch_size: int = 16):
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(replica_seed := strategy.replica_id_in_sync)  # different on purpose: scope() must broadcast
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        if optimizer_name == "sgd":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = strategy.distribute_dataset(make_data(), global_batch_size, seed=7, num_workers=0)
    done = 0
    while done < steps:
        for x, y in data:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done == steps:
                break
    del replica_seed
    return [p.detach().clone() for p in model.parameters()], strategy.gradient_sync.rounds


@pytest.fixture(scope="module")
def single():
    return {name: allgpu.launch(train, num_replicas=1, args=(name,))[0] for name in ("sgd", "adam")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_replicas_match_one_replica(single, replicas, optimizer_name):
    results = allgpu.launch(train, num_replicas=replicas, args=(optimizer_name,))
    reference, _ = single[optimizer_name]
    for params, rounds in results:
        assert rounds == 20
        for got, want in zip(params, reference):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    for other, _ in results[1:]:  # replicas stay bit-identical to each other
        assert all(torch.equal(a, b) for a, b in zip(results[0][0], other))


def _compressed(compression):
    strategy = allgpu.MirroredStrategy(gradient_compression=compression)
    torch.manual_seed(0)
    with strategy.scope():
        model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in strategy.distribute_dataset(make_data(), 16, seed=7, num_workers=0):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.timeout(120)
def test_bf16_gradient_compression_stays_close_and_keeps_replicas_identical():
    exact = allgpu.launch(_compressed, num_replicas=2, args=(None,))[0]
    compressed = allgpu.launch(_compressed, num_replicas=2, args=("bf16",))
    for got, want in zip(compressed[0], exact):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)
    assert not all(torch.equal(a, b) for a, b in zip(compressed[0], exact))  # it did compress
    assert all(torch.equal(a, b) for a, b in zip(compressed[0], compressed[1]))
    with pytest.raises(ValueError, match="gradient_compression='int8'"):
        allgpu.MirroredStrategy(num_replicas=1, gradient_compression="int8")
