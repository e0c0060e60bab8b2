"""TensorFlow's other spellings of the strategy methods run unchanged (each replica is one process here)."""

import torch
from torch.utils.data import TensorDataset

import allgpu


def test_tensorflow_aliases_do_what_their_modern_names_do():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    data = TensorDataset(torch.arange(8.0).unsqueeze(1), torch.arange(8))
    assert strategy.experimental_run_v2(lambda a, b=0: a + b, args=(2,), kwargs={"b": 3}) == 5
    assert strategy.experimental_local_results("loss") == ("loss",)
    batches = strategy.experimental_distribute_datasets_from_function(
        lambda ctx: [(ctx.input_pipeline_id, ctx.get_per_replica_batch_size(4))])
    assert list(batches) == [(0, 4)]
    got = [y.tolist() for _, y in strategy.experimental_distribute_dataset(data, 4, shuffle=False, num_workers=0)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7]]
    value = strategy.experimental_distribute_values_from_function(
        lambda ctx: (ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync))
    assert value == (0, 1)
