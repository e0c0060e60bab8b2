import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset

import allgpu
from allgpu.core.data import DistributedDataset, InputContext
from allgpu.core.sampler import ShardSampler


class Indices(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


def epoch_indices(n, global_batch, replicas, epoch, **kw):
    per_rank = []
    for rank in range(replicas):
        sampler = ShardSampler(n, global_batch, replicas, rank, **kw)
        sampler.epoch = epoch
        per_rank.append(list(sampler))
    return per_rank


def test_every_example_once_per_epoch_and_disjoint():
    per_rank = epoch_indices(96, 24, 4, epoch=0)
    flat = [i for batches in per_rank for batch in batches for i in batch]
    assert sorted(flat) == list(range(96))
    assert all(len(batch) == 6 for batches in per_rank for batch in batches)


def test_replicas_split_each_global_batch_of_the_single_replica_order():
    one = epoch_indices(96, 24, 1, epoch=3)[0]
    four = epoch_indices(96, 24, 4, epoch=3)
    for step, global_batch in enumerate(one):
        assert [i for rank in range(4) for i in four[rank][step]] == global_batch


def test_order_changes_each_epoch_and_is_seeded():
    assert epoch_indices(64, 16, 2, epoch=0) != epoch_indices(64, 16, 2, epoch=1)
    assert epoch_indices(64, 16, 2, epoch=1, seed=5) == epoch_indices(64, 16, 2, epoch=1, seed=5)


def test_uneven_tail_is_dropped_or_split_unevenly_never_padded():
    assert len(ShardSampler(50, 16, 2, 0)) == 3
    split = epoch_indices(50, 16, 4, epoch=0, drop_remainder=False)  # 2 left over: replicas 0, 1 one each
    samplers = [ShardSampler(50, 16, 4, r, drop_remainder=False) for r in range(4)]
    assert [s.sizes(3) for s in samplers] == [(1, 2), (1, 2), (0, 2), (0, 2)]
    assert [s.weight(3) for s in samplers] == [2.0, 2.0, 0.0, 0.0] and samplers[0].weight(0) == 1.0
    delivered = [i for p in split for b in p[:3] for i in b] + split[0][3] + split[1][3]
    assert sorted(delivered) == list(range(50))  # every example once; replicas 2, 3 load a template, cut to 0 rows


def test_an_empty_share_is_delivered_as_a_batch_of_zero_rows():
    data = TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    got = []
    for rank in range(4):
        ds = DistributedDataset(data, global_batch_size=8, num_replicas=4, rank=rank, device=torch.device("cpu"),
                                shuffle=False, num_workers=0, drop_remainder=False)
        got.append([tuple(x.shape) for x, _ in ds])
    assert got == [[(2, 1), (1, 1)], [(2, 1), (1, 1)], [(2, 1), (0, 1)], [(2, 1), (0, 1)]]


def test_global_batch_not_divisible_is_a_clear_error():
    with pytest.raises(ValueError, match=r"global_batch_size=30 is not divisible by the 4 replicas.*28 or 32"):
        ShardSampler(100, 30, 4, 0)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        ShardSampler(10, 16, 2, 0)
    with pytest.raises(ValueError, match="not divisible"):
        InputContext(1, 0, 3).get_per_replica_batch_size(8)


def test_iterable_dataset_is_refused_with_the_fix():
    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(3)

    with pytest.raises(TypeError, match="distribute_datasets_from_function"):
        DistributedDataset(Stream(), global_batch_size=2, num_replicas=1, rank=0, device=torch.device("cpu"))


def _consume(n_steps, replicas, state=None, epochs=1):
    seen = []
    for rank in range(replicas):
        ds = DistributedDataset(Indices(96), global_batch_size=24, num_replicas=replicas, rank=rank,
                                device=torch.device("cpu"), num_workers=0, seed=11)
        if state:
            ds.load_state_dict(state)
        it = iter(ds)
        for _ in range(n_steps):
            seen.extend(next(it).tolist())
        saved = ds.state_dict()
    return seen, saved


def test_resume_mid_epoch_with_another_replica_count_sees_exactly_the_rest():
    first, state = _consume(2, replicas=4)
    assert state == {"epoch": 0, "step": 2, "seed": 11, "global_batch_size": 24}
    rest, end_state = _consume(2, replicas=2, state=state)
    assert sorted(first + rest) == list(range(96))
    assert end_state["epoch"] == 1 and end_state["step"] == 0
    with pytest.raises(ValueError, match="global_batch_size=24"):
        DistributedDataset(Indices(96), global_batch_size=12, num_replicas=1, rank=0,
                           device=torch.device("cpu")).load_state_dict(state)


def _sharded_epochs():
    strategy = allgpu.MirroredStrategy()
    data = strategy.distribute_dataset(Indices(64), 16, num_workers=1)
    epochs = []
    for _ in range(2):
        local = torch.cat([batch for batch in data])
        epochs.append(strategy.gather(local).tolist())
    context = strategy.distribute_datasets_from_function(lambda ctx: [ctx]).context
    return epochs, (context.input_pipeline_id, context.num_input_pipelines, context.get_per_replica_batch_size(16))


@pytest.mark.replicas
@pytest.mark.timeout(120)
def test_real_replicas_see_each_example_once_per_epoch_in_a_new_order():
    results = allgpu.launch(_sharded_epochs, num_replicas=2)
    (epoch0, epoch1), _ = results[0]
    assert sorted(epoch0) == list(range(64)) and sorted(epoch1) == list(range(64))
    assert epoch0 != epoch1
    assert results[1][0] == results[0][0]
    assert [r[1] for r in results] == [(0, 2, 8), (1, 2, 8)]


@pytest.mark.replicas
def test_batches_arrive_on_the_replica_device_as_tuples():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    data = strategy.experimental_distribute_dataset(TensorDataset(torch.zeros(8, 2), torch.arange(8)), 4)
    x, y = next(iter(data))
    assert x.shape == (4, 2) and y.shape == (4,) and x.device == strategy.device


@pytest.mark.replicas
def test_tensor_tuples_and_dataloaders_are_accepted():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    x, y = torch.zeros(8, 2), torch.arange(8)
    assert next(iter(strategy.distribute_dataset((x, y), 4)))[1].shape == (4,)
    loader = torch.utils.data.DataLoader(TensorDataset(x, y), batch_size=3)
    with pytest.warns(UserWarning, match="batch_size=3 are replaced"):
        data = strategy.distribute_dataset(loader, 4)
    assert len(data) == 2
    with pytest.raises(ValueError, match=r"lengths \[8, 7\]"):
        strategy.distribute_dataset((x, y[:7]), 4)
