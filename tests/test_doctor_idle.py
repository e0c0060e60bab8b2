"""idle_devices (a visible GPU with no replica) and the DataLoader worker advice."""

from __future__ import annotations

import pytest

from allgpu.doctor import Problem, idle_devices
from allgpu.doctor.workers import suggest_workers, usable_cores
from allgpu.errors import DeviceError


def test_every_device_used_is_no_problem():
    assert idle_devices(4, [0, 1, 2, 3]) == []
    assert idle_devices(0, []) == []


def test_one_replica_on_four_gpus_names_the_idle_three():
    [p] = idle_devices(4, [0])
    assert p.id == "idle-device" and p.devices == (1, 2, 3)
    assert "3 of 4 visible GPUs run no replica: cuda:1, cuda:2, cuda:3 sit idle" in p.cause
    assert "MirroredStrategy() with no devices= argument / allgpu run --nproc-per-node auto" in p.fix


def test_shared_device_is_reported():
    problems = idle_devices(2, [0, 0])
    assert [p.id for p in problems] == ["idle-device", "shared-device"]
    assert problems[1].devices == (0,) and "cuda:0 (2 replicas)" in problems[1].cause


@pytest.mark.parametrize("count, devices, text", [(2, [2], "2 is not a visible device index"),
                                                  (2, [-1], "-1 is not"), (2, ["cuda:0"], "'cuda:0' is not"),
                                                  (-1, [], "expected a count >= 0"), (True, [], "count")])
def test_bad_arguments_raise_device_error(count, devices, text):
    with pytest.raises(DeviceError, match=text):
        idle_devices(count, devices)


def test_problem_rejects_unknown_severity():
    with pytest.raises(ValueError, match="severity 'fatal'"):
        Problem("x", "fatal", "cause.", "fix.")


@pytest.mark.parametrize("cores, quota, replicas, workers", [(2, None, 1, 1), (64, None, 4, 8), (64, None, 8, 7),
                                                              (64, 6.0, 4, 0), (1, None, 1, 0), (16, 2.5, 1, 1)])
def test_worker_advice(cores, quota, replicas, workers):
    advice = suggest_workers(cores, quota, replicas)
    assert advice.workers == workers and advice.reason.endswith(".")


def test_quota_lowers_usable_cores_and_is_said():
    assert usable_cores(64, 6.5) == 6 and usable_cores(4, 0.5) == 1 and usable_cores(8, None) == 8
    assert "cgroup quota 6.5 of 64 cores" in suggest_workers(64, 6.5, 1).reason


def test_worker_advice_rejects_no_replicas():
    with pytest.raises(ValueError, match="replicas=0"):
        suggest_workers(4, None, 0)
