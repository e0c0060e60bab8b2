"""The reading: JSON round trip, clear errors for bad saved readings, and a real read of this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from allgpu.doctor import EnvironmentReading, ReadingFormatError, read_environment
from allgpu.doctor.reading import GpuReading

READINGS = sorted((Path(__file__).parent / "doctor_readings").glob("*.json"))


@pytest.mark.parametrize("path", READINGS, ids=lambda p: p.stem)
def test_recorded_readings_round_trip(path):
    data = json.loads(path.read_text())
    reading = EnvironmentReading.from_dict(data)
    assert reading.to_dict() == data
    assert EnvironmentReading.from_dict(json.loads(json.dumps(reading.to_dict()))) == reading


def test_nested_values_become_dataclasses_and_tuples():
    reading = EnvironmentReading.from_dict(json.loads(READINGS[0].read_text()))
    assert all(isinstance(g, GpuReading) for g in reading.gpus) and isinstance(reading.gpus, tuple)


def test_missing_required_field_is_named():
    with pytest.raises(ReadingFormatError, match="required field 'torch_version'"):
        EnvironmentReading.from_dict({"python_version": "3.11", "platform": "Linux"})


def test_unknown_field_is_named():
    with pytest.raises(ReadingFormatError, match="unknown field.*gpu_count"):
        EnvironmentReading.from_dict({"python_version": "3.11", "platform": "x", "torch_version": "2", "gpu_count": 4})


def test_wrong_type_names_the_path():
    data = {"python_version": "3.11", "platform": "x", "torch_version": "2",
            "gpus": [{"index": "zero", "name": "A100", "uuid": "GPU-1"}]}
    with pytest.raises(ReadingFormatError, match=r"reading\.gpus\[0\]\.index: expected int, got 'zero'"):
        EnvironmentReading.from_dict(data)


def test_not_an_object():
    with pytest.raises(ReadingFormatError, match="expected a JSON object"):
        EnvironmentReading.from_dict([1, 2])


@pytest.mark.replicas
def test_read_this_machine(monkeypatch):
    """A real read (no fakes): this CI machine has a CPU build of torch and no NVIDIA driver."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    reading = read_environment()
    assert reading.torch_version == torch.__version__ and reading.torch_cuda == torch.version.cuda
    assert reading.cuda_visible_devices == "0,1" and reading.nccl_env == {"NCCL_DEBUG": "INFO"}
    assert reading.pid == os.getpid() and reading.cpu_affinity == len(os.sched_getaffinity(0))
    assert EnvironmentReading.from_dict(reading.to_dict()) == reading
    if torch.version.cuda is None and not Path("/proc/driver/nvidia").exists():
        assert reading.gpus == () and reading.torch_device_count == 0
        assert reading.nvml_error and "libnvidia-ml.so.1" in (reading.nvml_library_error or "")
