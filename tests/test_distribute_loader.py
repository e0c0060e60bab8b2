"""`distribute_dataset(DataLoader(ds, batch_size=B, ...))` with no global_batch_size reads the loader as TensorFlow
reads a batched tf.data dataset: B is the global batch; its shuffling, drop_last and collate_fn carry over."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset, default_collate

import allgpu
from allgpu.core.data import batched_loader_settings
from allgpu.errors import ArgumentError

DATA = TensorDataset(torch.arange(40.0).unsqueeze(1), torch.arange(40))
NOT_GIVEN = {"shuffle": None, "num_workers": None, "drop_remainder": None, "collate_fn": None}


def test_the_loader_settings_are_taken_unless_given():
    batch, opts = batched_loader_settings(DataLoader(DATA, batch_size=8, shuffle=True, drop_last=False), None,
                                          dict(NOT_GIVEN))
    assert batch == 8 and opts == {"shuffle": True, "num_workers": 0, "drop_remainder": False, "collate_fn": None}
    batch, opts = batched_loader_settings(DataLoader(DATA, batch_size=8), 16, dict(NOT_GIVEN, shuffle=False))
    assert batch == 16 and opts["shuffle"] is False and opts["num_workers"] == "auto"  # global batch given: defaults


def test_no_global_batch_and_nothing_to_take_it_from_is_a_clear_error():
    with pytest.raises(ArgumentError, match="global_batch_size"):
        batched_loader_settings(DATA, None, dict(NOT_GIVEN))
    with pytest.raises(ArgumentError, match="global_batch_size"):
        batched_loader_settings(DataLoader(DATA, batch_size=None), None, dict(NOT_GIVEN))


def test_one_device_yields_the_loaders_own_batches_in_order():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    tagged = []

    def collate(examples):  # a custom collate_fn is kept
        tagged.append(len(examples))
        return default_collate(examples)

    got = [y.tolist() for _, y in strategy.distribute_dataset(DataLoader(DATA, batch_size=16, collate_fn=collate))]
    assert got == [list(range(0, 16)), list(range(16, 32)), list(range(32, 40))]  # DataLoader's drop_last=False
    assert tagged == [16, 16, 8]


def test_drop_last_true_drops_the_short_last_batch():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    got = [len(y) for _, y in strategy.distribute_dataset(DataLoader(DATA, batch_size=16, drop_last=True))]
    assert got == [16, 16]


def _shards(shuffle):
    strategy = allgpu.MirroredStrategy()
    loader = DataLoader(DATA, batch_size=8, shuffle=shuffle, drop_last=True)
    return [y.tolist() for _, y in strategy.experimental_distribute_dataset(loader)]


@pytest.mark.replicas
@pytest.mark.timeout(120)
@pytest.mark.parametrize("shuffle", [False, True])
def test_two_replicas_split_each_global_batch_of_the_loader(shuffle):
    first, second = allgpu.launch(_shards, num_replicas=2, args=(shuffle,))
    assert len(first) == len(second) == 5 and all(len(b) == 4 for b in first + second)
    seen = sorted(v for batch in first + second for v in batch)
    assert seen == list(range(40))  # disjoint and complete
    in_order = [v for a, b in zip(first, second) for v in a + b]
    assert (in_order == list(range(40))) is (not shuffle)


def test_a_loader_on_a_distributed_sampler_is_read_as_ddp_reads_it():
    """A DDP port's (or Ray Train's prepare_data_loader's) loader: batch_size is per replica. Read as the global
    batch, 2 replicas trained on half the batch the user meant (and took twice the steps), silently."""
    from torch.utils.data import DistributedSampler

    loader = DataLoader(DATA, batch_size=4, sampler=DistributedSampler(DATA, num_replicas=2, rank=0, shuffle=False))
    batch, opts = batched_loader_settings(loader, None, dict(NOT_GIVEN), 2)
    assert batch == 8 and opts["shuffle"] is False
    with pytest.raises(ArgumentError, match="splits the data 2 ways, but the strategy has 4 replicas"):
        batched_loader_settings(loader, None, dict(NOT_GIVEN), 4)


def _ddp_loader_shards():
    from torch.utils.data import DistributedSampler

    strategy = allgpu.MirroredStrategy()
    loader = DataLoader(DATA, batch_size=4, sampler=DistributedSampler(DATA, shuffle=False), drop_last=True)
    return [y.tolist() for _, y in strategy.distribute_dataset(loader)]


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_two_replicas_given_a_distributed_sampler_loader_take_its_per_replica_batch():
    first, second = allgpu.launch(_ddp_loader_shards, num_replicas=2)
    assert all(len(b) == 4 for b in first + second) and len(first) == len(second) == 5
    assert [v for a, b in zip(first, second) for v in a + b] == list(range(40))  # global batches of 8, in order


def test_sampler_set_epoch_kept_from_a_ddp_or_ray_port_picks_the_epoch():
    """`loader.sampler.set_epoch(epoch)` (Ray's and DDP's loop, kept after the port; needed to resume a user's own
    loop at the right order) was an AttributeError on the strategy's sampler."""
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    loader = strategy.distribute_dataset(DATA, global_batch_size=8, num_workers=0)
    epochs = [[y.tolist() for _, y in loader] for _ in range(3)]
    loader.sampler.set_epoch(2)
    assert [y.tolist() for _, y in loader] == epochs[2]
    assert [y.tolist() for _, y in loader] != epochs[2]  # and the next iteration goes on to epoch 3
    loader.sampler.set_epoch(1)
    assert [y.tolist() for _, y in loader] == epochs[1]
