"""allgpu.devices.advice: one answer for loader workers and idle devices, whichever tool asks."""

from __future__ import annotations

import pytest

from allgpu.devices import advice
from allgpu.core.data import auto_num_workers
from allgpu.doctor import EnvironmentReading, idle_devices
from allgpu.doctor.report import worker_advice
from allgpu.errors import ArgumentError, DeviceError
from allgpu.monitor import ReplicaFigures, diagnose


def _fig(replica, host="node", visible=4, cuda=None, input_s=0.0, workers=None):
    return ReplicaFigures(replica, host, f"cuda:{cuda}", 10, 320,
                          {"input": input_s, "compute": 0.9, "comm": 0.0, "optimizer": 0.1, "other": 0.0},
                          visible_gpus=visible, cuda_index=cuda, num_workers=workers)


@pytest.mark.parametrize("cores, quota, replicas, workers", [(2, None, 1, 1), (64, None, 1, 8), (64, None, 4, 8),
                                                              (64, None, 8, 7), (64, 6.0, 4, 0), (16, 2.5, 1, 1)])
def test_suggest_workers_shares_cores_and_caps(cores, quota, replicas, workers):
    got = advice.suggest_workers(cores, quota, replicas)
    assert got.workers == workers and got.usable_cores == advice.usable_cores(cores, quota)
    capped = got.usable_cores // replicas - 1 > advice.MAX_WORKERS
    assert got.reason.endswith(".") and (f"capped at {advice.MAX_WORKERS}" in got.reason) == capped


@pytest.mark.parametrize("args, text", [((4, None, 0), "replicas=0"), ((0, None, 1), "cpu_affinity=0")])
def test_suggest_workers_rejects_nonsense_with_a_typed_value_error(args, text):
    with pytest.raises(ArgumentError, match=text) as info:
        advice.suggest_workers(*args)
    assert isinstance(info.value, ValueError)


def test_auto_workers_doctor_and_advice_agree_on_this_machine():
    here = advice.suggest_workers(advice.cpu_affinity(), advice.cpu_quota(), 2)
    assert auto_num_workers(2) == here.workers == advice.workers_here(2).workers
    reading = EnvironmentReading.from_dict({
        "python_version": "3", "platform": "linux", "torch_version": "2", "cpu_affinity": 64, "cpu_total": 64,
        "cpu_quota": None})
    assert worker_advice(reading) == advice.suggest_workers(64, None, 1)  # CPU-only reading: one replica


@pytest.mark.parametrize("files, quota", [({"cpu.max": "250000 100000\n"}, 2.5), ({"cpu.max": "max 100000\n"}, None),
                                          ({"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000"}, 1.5),
                                          ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
                                          ({"cpu.max": "junk"}, None), ({}, None)])
def test_cpu_quota_reads_cgroup_v2_and_v1(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert advice.cpu_quota(tmp_path) == quota


def test_device_use_names_idle_and_shared_gpus():
    use = advice.device_use(4, [0, 0, 2])
    assert (use.idle, use.shared) == ((1, 3), (0,))
    assert use.idle_message() == ("2 of 4 visible GPUs run no replica: cuda:1, cuda:3 sit idle "
                                  "(replicas run on cuda:0, cuda:2).")
    assert use.shared_message().startswith("Several replicas share cuda:0 (2 replicas)")
    assert advice.device_use(1, [0]).idle == () and advice.device_use(0, []).idle == ()
    with pytest.raises(DeviceError, match="3 is not a visible device index"):
        advice.device_use(2, [3])


def test_doctor_and_monitor_give_one_answer_for_an_idle_gpu():
    [doctor] = idle_devices(4, [0, 1])
    [monitor] = diagnose([_fig(0, cuda=0), _fig(1, cuda=1)])
    for f in (doctor, monitor):
        assert (f.id, f.severity, f.fix, f.devices) == ("idle-device", advice.IDLE_SEVERITY, advice.IDLE_FIX, (2, 3))
    shared = [f for f in diagnose([_fig(0, visible=2, cuda=0), _fig(1, visible=2, cuda=0)]) if f.id == "shared-device"]
    assert [(f.severity, f.devices) for f in shared] == [(p.severity, p.devices) for p in idle_devices(2, [0, 0])
                                                         if p.id == "shared-device"]


def test_monitor_input_bound_fix_quotes_the_shared_worker_rule():
    [f] = diagnose([_fig(0, visible=0, input_s=1.0, workers=0)])
    assert f.id == "input-bound" and advice.WORKERS_RULE in f.fix and f"at most {advice.MAX_WORKERS}" in f.fix
