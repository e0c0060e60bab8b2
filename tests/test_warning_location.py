"""Issue 24, item 5: every warning allgpu gives is attributed to the user's line (the file and line that called
allgpu), however deep inside allgpu it was raised: the no-GPU fallback of MirroredStrategy and
MultiWorkerMirroredStrategy (it pointed at allgpu/strategies/multi_worker.py), distribute_dataset given a
DataLoader, fit's dropped trailing micro-batches."""

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import allgpu
from allgpu.devices import cuda_device_count


def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, caught


@pytest.mark.skipif(cuda_device_count() > 0, reason="the no-GPU warning needs a machine without GPUs")
@pytest.mark.parametrize("name", ["MirroredStrategy", "MultiWorkerMirroredStrategy"])
def test_the_no_gpu_fallback_warning_points_at_the_users_line(name):
    strategy, caught = _caught(lambda: getattr(allgpu, name)())
    try:
        found = [w for w in caught if "found no GPU" in str(w.message)]
        assert found and found[0].filename == __file__, [(w.filename, w.lineno) for w in caught]
    finally:
        strategy.close()


def test_data_and_fit_warnings_point_at_the_users_line():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    data = TensorDataset(torch.randn(24, 3), torch.randint(0, 2, (24,)))
    _, caught = _caught(lambda: strategy.distribute_dataset(DataLoader(data, batch_size=4), 8))
    assert [w.filename for w in caught if "DataLoader" in str(w.message)] == [__file__]
    with strategy.scope():
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _, caught = _caught(lambda: allgpu.fit(model, optimizer, torch.nn.CrossEntropyLoss(), data, epochs=1,
                                           global_batch_size=8, strategy=strategy, accumulation_steps=2,
                                           num_workers=0, verbose=0))
    assert [w.filename for w in caught if "micro-batches" in str(w.message)] == [__file__]
