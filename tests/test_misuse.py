"""Issue 10: the misuse walk. What a new user gets wrong, each ending within seconds in a typed allgpu error
whose message names what is wrong and the fix (never a hang, never a bare backend traceback). Ctrl-C and
processes that die or never arrive are in tests/test_hangs.py; checkpoint folders in test_checkpoint_safety.py."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset

import allgpu
from allgpu import checkpoint
from allgpu.errors import (AllGpuError, CheckpointError, ClusterConfigError, DatasetTypeError, DeviceError,
                           InputError, NotMirroredError, StrategyStartError, UnsupportedError)
from tests.harness import run_cli

pytestmark = pytest.mark.timeout(30)


def _data(n=10):
    return TensorDataset(torch.randn(n, 2), torch.zeros(n).long())


@pytest.mark.parametrize("devices, message", [
    (["gpu0"], "'gpu0' is not understood"),
    (["/tpu:0"], "'/tpu:0' is not understood"),
    (["/cpu:0", "/cpu:0"], "lists a device twice"),
    (["/gpu:0", "cuda:0"], "lists a device twice"),
])
def test_bad_and_duplicate_device_names(devices, message):
    with pytest.raises(DeviceError, match=message):
        allgpu.MirroredStrategy(devices=devices)


@pytest.mark.parametrize("value, says", [("0 1", "is read as 0"), ("zero", "the list ends at 'zero'"),
                                         ("0,,1", "'1' after it ignored")])
def test_malformed_cuda_visible_devices_is_explained_as_cuda_reads_it(value, says):
    from allgpu.devices import explain_cuda_visible_devices

    assert says in explain_cuda_visible_devices(value)  # CUDA does not refuse these: allgpu says what CUDA does


@pytest.mark.parametrize("batch, message", [
    (0, "global_batch_size=0; expected a positive integer"),
    (3, "not divisible by the 2 replicas"),
    (64, "fewer than one global batch of 64"),
])
def test_global_batch_zero_not_divisible_or_larger_than_the_data(batch, message):
    from allgpu.core.data import DistributedDataset

    with pytest.raises(InputError, match=message):
        DistributedDataset(_data(), global_batch_size=batch, num_replicas=2, rank=0, device=torch.device("cpu"),
                           num_workers=0)


@pytest.mark.parametrize("drop", [True, False])
def test_an_empty_dataset_says_empty_not_drop_remainder(drop):
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with pytest.raises(InputError, match="the dataset is empty") as info:
        strategy.distribute_dataset(_data(0), 4, drop_remainder=drop, num_workers=0)
    assert "drop_remainder" not in str(info.value)


def test_an_iterable_dataset_names_the_alternative():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter([])

    with pytest.raises(DatasetTypeError, match="distribute_datasets_from_function"):
        allgpu.OneDeviceStrategy("/cpu:0").distribute_dataset(Stream(), 4)


def test_dict_batches_in_fit_name_the_keys_and_the_fix():
    class Dicts(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return {"x": torch.zeros(2), "label": 0}

    model = torch.nn.Linear(2, 2)
    with pytest.raises(InputError, match=r"got a dict with keys \['label', 'x'\].*return \(x, y\)"):
        allgpu.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss(), Dicts(),
                   epochs=1, global_batch_size=4, num_workers=0, verbose=False)


def test_model_outside_scope_and_a_parameter_added_after_scope():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        outside = torch.nn.Linear(2, 2)
        with pytest.raises(NotMirroredError, match="created outside strategy.scope") as refused:
            outside(torch.zeros(1, 2))
        # one replica (a notebook kernel): it says why it stops though nothing is lost in this run
        assert "one replica, so nothing is lost here" in str(refused.value)
        assert "across the 1 replicas" not in str(refused.value)
        with strategy.scope():
            model = torch.nn.Linear(2, 2)
        model.extra = torch.nn.Parameter(torch.zeros(2))  # added after scope() exited
        with pytest.raises(NotMirroredError, match=r"(?s)Linear.extra.*strategy.mirror\(model\)"):
            model(torch.zeros(1, 2))
    finally:
        strategy.close()


def test_a_default_strategy_that_finds_no_gpu_says_why_and_how_to_get_cpu_replicas(recwarn):
    strategy = allgpu.MirroredStrategy()  # this machine has no GPU (a CPU build of torch)
    try:
        [warning] = [w for w in recwarn if "found no GPU" in str(w.message)]
        text = str(warning.message)
        from allgpu.devices import why_no_gpu  # the tests hide GPUs: CUDA_VISIBLE_DEVICES="" (tests/conftest.py)

        assert "one replica on /cpu:0" in text and why_no_gpu() in text and "devices=['/cpu:0', '/cpu:1']" in text
        assert warning.filename == __file__  # points at the user's line
    finally:
        strategy.close()
    recwarn.clear()
    allgpu.MirroredStrategy(devices=["/cpu:0"]).close()  # asked for: nothing to explain
    assert not [w for w in recwarn if "found no GPU" in str(w.message)]


def test_data_parallel_around_a_mirrored_model_is_refused_naming_the_wrapper():
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with strategy.scope():
            model = torch.nn.Linear(2, 2)
        with pytest.raises(UnsupportedError, match=r"DataParallel wraps a model built in strategy.scope.*drop the"):
            torch.nn.DataParallel(model)(torch.zeros(1, 2))
        model(torch.zeros(1, 2))  # the model itself still trains
    finally:
        strategy.close()


def _ddp_around_mirrored():
    strategy = allgpu.MirroredStrategy()
    with strategy.scope():
        model = torch.nn.Linear(2, 2)
    try:
        torch.nn.parallel.DistributedDataParallel(model)(torch.zeros(1, 2))
    except UnsupportedError as exc:
        return str(exc)
    return "no error"


@pytest.mark.replicas
@pytest.mark.timeout(60)
def test_ddp_around_a_mirrored_model_is_refused_instead_of_all_reducing_twice():
    for message in allgpu.launch(_ddp_around_mirrored, num_replicas=2):
        assert "DistributedDataParallel wraps a model built in strategy.scope()" in message
        assert "a second time" in message


def _ddp_beside_a_strategy():
    strategy = allgpu.MirroredStrategy()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))  # DDP's own, outside scope()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((1, 2), float(torch.distributed.get_rank() + 1))
    model(x).sum().backward()
    optimizer.step()
    return model.module.weight.detach().clone()


@pytest.mark.replicas
@pytest.mark.timeout(60)
def test_a_hand_written_ddp_model_beside_a_strategy_trains_with_ddp_averaging_its_gradients():
    first, second = allgpu.launch(_ddp_beside_a_strategy, num_replicas=2)
    torch.manual_seed(0)
    expected = torch.nn.Linear(2, 2).weight.detach() - 0.1 * 1.5  # d(sum)/dW is x: the mean of 1 and 2
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(second, expected)


def test_two_strategies_with_different_counts():
    first = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with pytest.raises(StrategyStartError, match="already runs a MirroredStrategy with 1 replica"):
            allgpu.MirroredStrategy(num_replicas=2)
    finally:
        first.close()


def test_one_replica_gives_torch_distributed_a_world_of_one_until_the_last_strategy_closes():
    """A script ported from DDP keeps DistributedSampler(dataset) and dist.get_rank(): on one replica (plain python
    on one device, or the one-device fallback) torch raised 'Default process group has not been initialized'."""
    import torch.distributed as dist

    first = allgpu.MirroredStrategy(num_replicas=1)
    second = allgpu.MirroredStrategy(devices=["/cpu:0"])  # Keras' multi-GPU guide makes one per training run
    try:
        assert (dist.get_world_size(), dist.get_rank(), second.num_replicas_in_sync) == (1, 0, 1)
        assert list(torch.utils.data.distributed.DistributedSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]
        total = torch.ones(2)
        dist.all_reduce(total)
        assert total.tolist() == [1.0, 1.0]
    finally:
        first.close()
        assert dist.is_initialized()  # the second strategy still runs on it
        second.close()
    assert not dist.is_initialized()


def test_a_meta_device_model_under_mirrored_strategy_names_the_fix():
    """Before: torch's bare 'Cannot copy out of meta tensor; no data!' at the scope's exit."""
    strategy = allgpu.MirroredStrategy(num_replicas=1)
    try:
        with pytest.raises(UnsupportedError, match=r"meta device.*Fix: build the model on the device.*FullySharded"):
            with strategy.scope(), torch.device("meta"):
                torch.nn.Linear(3, 2)
    finally:
        strategy.close()


@pytest.mark.parametrize("config, message", [
    ("not json", "not valid JSON"),
    (json.dumps({"cluster": {"worker": ["a:1"]}}), 'no "task" field'),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}), "task.index is 3"),
])
def test_malformed_tf_config_names_the_field(monkeypatch, config, message):
    monkeypatch.setenv("TF_CONFIG", config)
    with pytest.raises(ClusterConfigError, match=message):
        allgpu.MultiWorkerMirroredStrategy()


def _saved(tmp_path):
    model = torch.nn.Linear(3, 2)
    return checkpoint.save(tmp_path, model, step=1), model


def test_checkpoints_truncated_bit_flipped_or_from_another_model(tmp_path):
    path, model = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        checkpoint.restore(path, model)
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="sha256 mismatch"):
        checkpoint.restore(path, model)
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=r"missing keys '0.bias'.*unexpected keys 'bias'"):
        checkpoint.restore(path, torch.nn.Sequential(torch.nn.Linear(3, 2)))


def test_every_error_is_an_allgpu_error_and_the_builtin_a_user_catches():
    assert issubclass(InputError, ValueError) and issubclass(InputError, AllGpuError)
    assert issubclass(DatasetTypeError, TypeError) and issubclass(DatasetTypeError, AllGpuError)


@pytest.mark.replicas
@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (["run", "missing.py"], "script 'missing.py' not found"),
    (["run", "--cpu-replicas", "0", "x.py"], "--cpu-replicas: 0: expected a positive whole number"),
    (["run", "--cpu-replicas", "two", "x.py"], "'two' is not a whole number"),
    (["demo", "--replicas", "0"], "--replicas: 0: expected a positive whole number"),
    (["demo", "--replicas", "3", "--batch-size", "64"], "--batch-size 63 or 66"),
    (["demo", "--epochs", "-1"], "expected a positive whole number"),
    (["doctor", "--reading", "missing.json"], "cannot read it"),
    (["doctor", "--reading", "binary.dat"], "not a text file"),
    (["lint", "missing.py"], "no such file"),
    (["bench", "--replicas", "0"], "--replicas: 0: expected a positive whole number"),
    (["bench", "--model", "nope"], "'nope': expected one of digits_cnn, mlp_1m, all, or FILE.py:FUNCTION"),
])
def test_cli_commands_with_a_missing_file_or_a_bad_number(tmp_path, args, message):
    (tmp_path / "binary.dat").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "x.py").write_text("print('never run')\n")
    result = run_cli(*args, cwd=tmp_path, timeout=50)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert message in result.stderr
    assert "Traceback" not in result.stderr


SPAWN_FROM_STDIN = """
import allgpu
def train():
    return 1
if __name__ == "__main__":
    allgpu.launch(train, num_replicas=2, start_method="spawn")
"""


@pytest.mark.replicas
def test_spawn_from_a_stdin_script_is_refused_up_front():
    from tests.harness import run_python

    result = run_python(["-"], stdin=SPAWN_FROM_STDIN, timeout=25)
    assert result.returncode != 0
    assert "StrategyStartError" in result.stderr and "start_method='fork'" in result.stderr
    assert "FileNotFoundError" not in result.stderr  # not the replicas' raw failure
