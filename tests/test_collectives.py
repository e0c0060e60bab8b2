import time
from pathlib import Path

import pytest
import torch

import allgpu
from allgpu.errors import CollectiveTimeoutError, ReplicaFailedError

pytestmark = pytest.mark.replicas  # real processes: the replicas tier (see tests/conftest.py)


def _values():
    strategy = allgpu.MirroredStrategy()
    r = strategy.replica_id_in_sync
    value = torch.tensor([r + 1.0, 10.0 * (r + 1)])
    ragged = torch.arange(r + 1, dtype=torch.float32) + 10 * r  # replica r holds r + 1 values
    return {
        "sum": strategy.reduce("sum", value).tolist(),
        "sum_enum": strategy.reduce(allgpu.ReduceOp.SUM, value).tolist(),  # tf.distribute.ReduceOp.SUM spelling
        "mean": strategy.reduce("mean", value).tolist(),
        "max": strategy.reduce("max", value).tolist(),
        "min": strategy.reduce("MIN", value).tolist(),
        "number": strategy.reduce("sum", 1).item(),
        "mean_axis": strategy.reduce("mean", ragged, axis=0).item(),
        "sum_axis": strategy.reduce("sum", ragged, axis=0).item(),
        "gather": strategy.gather(ragged).tolist(),
        "gather_2d": strategy.gather(torch.full((r + 1, 2), float(r)), axis=0).shape,
        "ids": (strategy.replica_id_in_sync, strategy.num_replicas_in_sync),
        # Accelerate's gather((predictions, labels)) and tf.distribute's nests: the same structure back
        "gather_nest": strategy.gather((ragged, {"labels": torch.full((r + 1,), r)})),
        "reduce_nest": strategy.reduce("sum", {"loss": value, "count": [torch.tensor(1.0)]}),
    }


@pytest.mark.timeout(60)
def test_reduce_and_gather_values_on_three_replicas():
    results = allgpu.launch(_values, num_replicas=3)
    for rank, got in enumerate(results):
        assert got["sum"] == got["sum_enum"] == [6.0, 60.0]
        assert got["mean"] == [2.0, 20.0]
        assert got["max"] == [3.0, 30.0]
        assert got["min"] == [1.0, 10.0]
        assert got["number"] == 3
        # all six values: 0 | 10 11 | 20 21 22 -> mean 14, sum 84
        assert got["mean_axis"] == pytest.approx(84 / 6)
        assert got["sum_axis"] == 84
        assert got["gather"] == [0.0, 10.0, 11.0, 20.0, 21.0, 22.0]
        assert tuple(got["gather_2d"]) == (6, 2)
        assert got["ids"] == (rank, 3)
        predictions, labels = got["gather_nest"]
        assert predictions.tolist() == got["gather"] and labels["labels"].tolist() == [0, 1, 1, 2, 2, 2]
        assert got["reduce_nest"]["loss"].tolist() == [6.0, 60.0] and got["reduce_nest"]["count"][0].item() == 3


def test_one_device_reduce_is_identity_and_bad_op_is_named():
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    assert strategy.reduce("mean", torch.tensor([1.0, 3.0]), axis=0).item() == 2.0
    assert strategy.gather(torch.ones(2, 3)).shape == (2, 3)
    with pytest.raises(ValueError, match="'prod'.*'sum', 'mean', 'max', 'min'"):
        strategy.reduce("prod", 1.0)
    predictions, labels = strategy.gather((torch.ones(2), torch.zeros(2, dtype=torch.long)))  # a tuple of tensors
    assert predictions.tolist() == [1.0, 1.0] and labels.tolist() == [0, 0]
    assert strategy.reduce("sum", {"a": torch.tensor(2.0)})["a"].item() == 2.0
    assert strategy.reduce("sum", (1.0, 2.0)).tolist() == [1.0, 2.0]  # numbers alone: one tensor, as before
    for default in (allgpu.get_strategy(),):  # outside any scope: the default strategy
        assert default.gather([torch.ones(1), torch.ones(2)])[1].shape == (2,)
    with pytest.raises(allgpu.errors.ArgumentTypeError, match=r"strategy.gather takes .*got str"):
        strategy.gather("labels")


def _replica_one_skips_a_reduce():
    strategy = allgpu.MirroredStrategy(timeout=3)
    strategy.reduce("sum", 1.0)  # REPLICA_ONE_LAST_REDUCE
    if strategy.replica_id_in_sync == 0:
        strategy.reduce("sum", 2.0)  # replica 1 never makes this call
    else:
        time.sleep(8)  # alive but elsewhere: the timeout, not a closed connection, must catch it
    return "finished"


@pytest.mark.timeout(60)
def test_a_skipped_collective_times_out_naming_the_replica_and_the_line():
    start = time.monotonic()
    with pytest.raises(ReplicaFailedError) as info:
        allgpu.launch(_replica_one_skips_a_reduce, num_replicas=2, timeout=3)
    assert time.monotonic() - start < 3 + 10
    text = info.value.remote_traceback
    assert "CollectiveTimeoutError" in text
    assert "replica 0 waited" in text and "all_reduce(sum)" in text
    line = next(i for i, text_line in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "# REPLICA_ONE_LAST_REDUCE" in text_line)
    assert "replica 1 is behind" in text and f"test_collectives.py:{line}" in text  # replica 1's last reduce


def test_timeout_error_is_typed():
    assert issubclass(CollectiveTimeoutError, RuntimeError)


def _big_result():
    strategy = allgpu.MirroredStrategy()
    return torch.full((1 << 18,), float(strategy.replica_id_in_sync))  # 1 MiB: far over a pipe's 64 KiB


@pytest.mark.timeout(60)
def test_launch_returns_results_larger_than_a_pipe_buffer():
    results = allgpu.launch(_big_result, num_replicas=2)
    assert [r.shape[0] for r in results] == [1 << 18] * 2
    assert [float(r[0]) for r in results] == [0.0, 1.0]
