"""A one-replica strategy in one of several launched processes (allgpu run, torchrun) trains alone: said once."""

import warnings

import pytest

import allgpu
from allgpu.runtime import lone_replica

_JOB = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}


@pytest.fixture
def launched(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(lone_replica, "_SAID", set())
    return lambda env: [monkeypatch.setenv(k, v) for k, v in env.items()]


def _runtime_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_one_device_strategy_in_a_launched_job_of_two_says_each_trains_alone(launched):
    launched(_JOB)
    said = _runtime_warnings(lambda: allgpu.OneDeviceStrategy("/cpu:0"))
    assert len(said) == 1 and "2 processes" in said[0] and "MirroredStrategy()" in said[0]
    assert _runtime_warnings(lambda: allgpu.OneDeviceStrategy("/cpu:0")) == []  # once a process


def test_the_default_strategy_of_a_kaggle_fallback_in_a_launched_job_says_so(launched):
    launched(_JOB)
    said = _runtime_warnings(allgpu.get_strategy)
    assert len(said) == 1 and "get_strategy()" in said[0] and "each of the 2" in said[0]


def test_process_one_stays_quiet_and_a_single_process_is_not_warned(launched):
    assert _runtime_warnings(lambda: allgpu.OneDeviceStrategy("/cpu:0")) == []  # python train.py
    assert _runtime_warnings(allgpu.get_strategy) == []
    launched({**_JOB, "RANK": "1", "LOCAL_RANK": "1"})
    assert _runtime_warnings(allgpu.get_strategy) == []  # process 0 says it for the job


def test_inside_a_scope_get_strategy_is_that_strategy_and_not_warned(launched):
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    launched(_JOB)
    with strategy.scope():
        assert _runtime_warnings(lambda: allgpu.get_strategy() is strategy) == []
