"""Keras inputs split across replicas: disjoint slices that make up each global batch, reshuffled per epoch."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np
import pytest
import torch

keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from allgpu.keras.shard import make_input, slice_bounds  # noqa: E402

N_EXAMPLES, BATCH = 51, 8   # 6 full global batches and one of 3 (uneven over 2 replicas)


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __len__(self):
        return -(-len(self.x) // BATCH)

    def __getitem__(self, i):
        return self.x[i * BATCH:(i + 1) * BATCH], self.y[i * BATCH:(i + 1) * BATCH]


def _ids():
    x = np.arange(N_EXAMPLES, dtype="float32").reshape(-1, 1)
    return x, x[:, 0].astype("int64")


def _inputs(kind, rank, replicas, shuffle):
    x, y = _ids()
    tx, ty = torch.tensor(x), torch.tensor(y)
    common = dict(num_replicas=replicas, rank=rank, device=torch.device("cpu"), seed=3)
    if kind == "arrays":
        return make_input(x, y, batch_size=BATCH, shuffle=shuffle, **common)
    if kind == "tensors":
        return make_input(tx, ty, batch_size=BATCH, shuffle=shuffle, **common)
    if kind == "tf_tensors":  # a batch taken from a tf.data dataset (keras-io's timeseries example predicts on one)
        tf = pytest.importorskip("tensorflow")
        return make_input(tf.constant(x), tf.constant(y), batch_size=BATCH, shuffle=shuffle, **common)
    if kind == "pandas":
        pd = pytest.importorskip("pandas")
        return make_input(pd.DataFrame(x), pd.Series(y), batch_size=BATCH, shuffle=shuffle, **common)
    if kind == "dataset":
        return make_input(TensorDataset(tx, ty), batch_size=BATCH, shuffle=shuffle, **common)
    if kind == "dataloader":
        return make_input(DataLoader(TensorDataset(tx, ty), batch_size=BATCH, shuffle=shuffle), batch_size=None,
                          shuffle=True, **common)
    if kind == "pydataset":
        return make_input(Batches(x, y), batch_size=None, shuffle=shuffle, **common)
    if kind == "generator":
        batches = ((x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, N_EXAMPLES, BATCH))
        return make_input(batches, batch_size=None, shuffle=False, **common)
    raise AssertionError(kind)


def _epoch(data):
    return [(data.global_size, batch[1].tolist()) for batch in data]


@pytest.mark.parametrize("kind", ["arrays", "tensors", "tf_tensors", "pandas", "dataset", "dataloader", "pydataset",
                                  "generator"])
@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_get_disjoint_slices_of_each_global_batch(kind, replicas):
    shuffle = kind != "generator"
    whole = _inputs(kind, 0, 1, shuffle)
    reference = [_epoch(whole) for _ in range(2)]
    parts = [_inputs(kind, r, replicas, shuffle) for r in range(replicas)]
    for epoch in range(2):
        per_replica = [_epoch(p) for p in parts]
        steps = {len(e) for e in per_replica}
        assert steps == {len(reference[epoch])}           # every replica runs the same number of steps
        for step, (size, ids) in enumerate(reference[epoch]):
            pieces = [per_replica[r][step][1] for r in range(replicas)]
            assert [per_replica[r][step][0] for r in range(replicas)] == [size] * replicas
            assert sum(pieces, []) == ids                  # disjoint, in order, together the global batch
    if shuffle:
        assert reference[0] != reference[1]                # reshuffled every epoch
        assert sorted(sum((ids for _, ids in reference[0]), [])) == list(range(N_EXAMPLES))


def test_shuffle_false_keeps_the_order_and_batches_arrive_as_tensors_on_the_device():
    data = _inputs("arrays", 1, 2, shuffle=False)
    batches = list(data)
    assert batches[0][0].tolist() == [[4.0], [5.0], [6.0], [7.0]]
    assert isinstance(batches[0][1], torch.Tensor) and batches[0][1].dtype == torch.int64
    assert data.num_batches == 7 and data.has_partial_batch and data.partial_batch_size == 3


def test_slices_are_near_equal_and_pad_only_below_one_example_per_replica():
    assert [slice_bounds(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [slice_bounds(2, 4, r) for r in range(4)] == [(0, 1), (1, 2), (0, 1), (1, 2)]


def test_bad_inputs_are_named():
    x, y = _ids()
    common = dict(batch_size=8, shuffle=False, num_replicas=2, rank=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="different numbers of examples"):
        make_input(x, y[:10], **common)
    with pytest.raises(TypeError, match="cannot split a str"):
        make_input("data.csv", **common)
    with pytest.raises(ValueError, match="cannot be passed with a DataLoader"):
        make_input(DataLoader(TensorDataset(torch.tensor(x))), y, **common)
