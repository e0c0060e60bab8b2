"""Issue 10, item 5: a new distribute_dataset object per epoch reshuffles (tf.data reshuffle_each_iteration),
the same on every replica; randomness inside __getitem__ is seeded per (seed, epoch, example)."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import allgpu

N = 64


def _indices():
    return TensorDataset(torch.arange(N))


def _epoch_orders(strategy, epochs=3, batch=16):
    orders = []
    for _ in range(epochs):  # the README's loop, inside an epoch loop: a new object every epoch
        seen = []
        for (xb,) in strategy.distribute_dataset(_indices(), global_batch_size=batch, num_workers=0):
            seen.append(strategy.gather(xb))
        orders.append(torch.cat(seen).tolist())
    return orders


def test_a_new_dataset_object_per_epoch_reshuffles():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    orders = _epoch_orders(strategy)
    assert all(sorted(o) == list(range(N)) for o in orders)
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]
    # Same as iterating one object three times.
    one = strategy_orders = allgpu.OneDeviceStrategy("/cpu:0").distribute_dataset(_indices(), 16, num_workers=0)
    assert [torch.cat([xb for (xb,) in one]).tolist() for _ in range(3)] == orders
    # A fresh strategy (a fresh process) starts again at epoch 0: runs are reproducible.
    assert _epoch_orders(allgpu.OneDeviceStrategy("/cpu:0")) == orders
    del strategy_orders


def _two_replica_orders():
    strategy = allgpu.MirroredStrategy()
    try:
        return _epoch_orders(strategy)
    finally:
        strategy.close()


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_new_objects_reshuffle_identically_on_every_replica_and_match_one_device():
    reference = _epoch_orders(allgpu.OneDeviceStrategy("/cpu:0"))
    results = allgpu.launch(_two_replica_orders, num_replicas=2)
    assert results[0] == results[1] == reference


class Augmented(Dataset):
    """Draws from torch, numpy and random in __getitem__, as augmentation code does."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([float(i), torch.rand(()).item(), float(np.random.rand()), random.random()])


@pytest.mark.replicas  # loader workers are processes
def test_getitem_randomness_is_per_example_and_leaves_the_training_stream_alone():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    data = strategy.distribute_dataset(Augmented(), 4, num_workers=0, shuffle=True)
    epoch0 = torch.cat(list(data))
    assert torch.equal(torch.rand(3), expected_next)  # loading drew nothing from the global stream
    by_index = {int(r[0]): r for r in epoch0}
    # The same example gets the same draws with loader workers and with another batch size...
    again = allgpu.OneDeviceStrategy("/cpu:0").distribute_dataset(Augmented(), 8, num_workers=2)
    for row in torch.cat(list(again)):
        assert torch.equal(row, by_index[int(row[0])])
    # ... and new draws in the next epoch.
    epoch1 = {int(r[0]): r for r in torch.cat(list(data))}
    assert all(not torch.equal(epoch1[i][1:], by_index[i][1:]) for i in range(16))
