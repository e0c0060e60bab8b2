"""Doctor rules, each checked against recorded readings (tests/doctor_readings) and small edits of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from allgpu.doctor import EnvironmentReading, diagnose, exit_code
from allgpu.doctor.reading import GpuProcess, PeerAccess

READINGS = Path(__file__).parent / "doctor_readings"


def load(name: str) -> EnvironmentReading:
    return EnvironmentReading.from_dict(json.loads((READINGS / f"{name}.json").read_text()))


def ids(problems) -> dict[str, str]:
    return {p.id: p.severity for p in problems}


def only(problems, pid):
    found = [p for p in problems if p.id == pid]
    assert len(found) == 1, f"expected one {pid!r} in {[p.id for p in problems]}"
    return found[0]


def replace_gpu(reading, index, **changes):
    gpus = tuple(dataclasses.replace(g, **changes) if g.index == index else g for g in reading.gpus)
    return dataclasses.replace(reading, gpus=gpus)


def test_cpu_only_machine_says_why_no_gpu_and_exits_0():
    problems = diagnose(load("cpu_only"))
    assert ids(problems) == {"no-gpu": "warning"}
    cause = problems[0].cause
    assert cause.startswith("No GPU is visible: torch is a CPU build (2.13.0+cpu) and NVML could not load "
                            "libnvidia-ml.so.1")
    assert "no NVIDIA driver on this machine" in cause
    assert exit_code(problems) == 0


def test_kernel_driver_without_library_is_an_error_naming_containers():
    r = dataclasses.replace(load("cpu_only"), kernel_driver="NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15")
    p = only(diagnose(r), "no-gpu")
    assert p.severity == "error" and "kernel driver is loaded" in p.cause and "--gpus all" in p.fix


def test_nvml_driver_mismatch_is_an_error():
    r = dataclasses.replace(load("cpu_only"), nvml_library_error=None,
                            nvml_error="NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.")
    p = only(diagnose(r), "no-gpu")
    assert p.severity == "error" and "version mismatch" in p.cause.lower() and "reboot" in p.fix


def test_four_gpus_with_cvd0_names_the_three_hidden():
    problems = diagnose(load("four_gpu_cvd0"))
    p = only(problems, "cuda-visible-devices-hides")
    assert p.severity == "warning" and p.devices == (1, 2, 3)
    assert "CUDA_VISIBLE_DEVICES=0" in p.cause and "GPUs 1, 2, 3 hidden" in p.cause
    assert "Only 1 of 4 GPUs can train" in p.cause
    assert "unset CUDA_VISIBLE_DEVICES" in p.fix and "CUDA_VISIBLE_DEVICES=0,1,2,3" in p.fix
    assert "only-one-gpu" not in ids(problems)  # one GPU *visible*, but the machine has four


@pytest.mark.parametrize("value", ["", "-1"])
def test_cvd_hiding_every_gpu_is_an_error(value):
    r = dataclasses.replace(load("four_gpu_cvd0"), cuda_visible_devices=value, torch_cuda_available=False,
                            torch_device_count=0, torch_devices=())
    problems = diagnose(r)
    p = only(problems, "cuda-visible-devices-hides-all")
    assert p.severity == "error" and p.devices == (0, 1, 2, 3) and exit_code(problems) == 1
    assert "torch-cuda-init-failed" not in ids(problems)


def test_healthy_machine_has_no_problem():
    r = load("healthy_four_gpu")
    assert diagnose(r) == [] and exit_code([]) == 0


def test_cpu_build_on_gpu_machine():
    problems = diagnose(load("cpu_build_on_gpu"))
    p = only(problems, "torch-cpu-build")
    assert p.severity == "error" and p.devices == (0, 1)
    assert "CUDA 12.6" in p.fix and "download.pytorch.org/whl/cu" in p.fix
    assert "no-peer-access" not in ids(problems)  # torch cannot use them anyway
    assert exit_code(problems) == 1


def test_driver_too_old_quotes_torch_and_names_both_versions():
    problems = diagnose(load("driver_too_old"))
    p = only(problems, "driver-too-old")
    assert p.severity == "error"
    assert "CUDA 12.8" in p.cause and "CUDA 11.4" in p.cause and "too old (found version 11040)" in p.cause
    assert "torch-cuda-init-failed" not in ids(problems)
    # cu128 wheels ship no sm_70 code: the V100s would fail even with a new driver.
    assert only(problems, "gpu-arch-unsupported").devices == (0, 1)


def test_driver_one_minor_behind_is_a_warning():
    r = dataclasses.replace(load("healthy_four_gpu"), driver_cuda_version="12.2")
    assert ids(diagnose(r)) == {"driver-older-than-build": "warning"}


def test_cuda_init_failure_without_known_cause_quotes_torch():
    r = dataclasses.replace(load("healthy_four_gpu"), torch_cuda_available=False, torch_device_count=0,
                            torch_devices=(), torch_peer_access=(),
                            torch_cuda_error="RuntimeError: CUDA unknown error - this may be due to an incorrectly "
                                             "set up environment")
    p = only(diagnose(r), "torch-cuda-init-failed")
    assert p.severity == "error" and "CUDA unknown error" in p.cause


def test_gpu_busy_names_process_and_memory():
    problems = diagnose(load("gpu_busy"))
    p = only(problems, "gpu-busy")
    assert p.severity == "warning" and p.devices == (1,)
    assert "python (pid 31337, 20990 MiB)" in p.cause and "97% busy" in p.cause
    assert exit_code(problems) == 0


def test_gpu_nearly_full_is_an_error():
    r = replace_gpu(load("gpu_busy"), 1, memory_used_mib=80000.0,
                    processes=(GpuProcess(31337, "python", 79990.0),))
    p = only(diagnose(r), "gpu-busy")
    assert p.severity == "error" and "runs out of memory" in p.cause


def test_own_process_is_not_another_job():
    r = load("gpu_busy")
    r = replace_gpu(dataclasses.replace(r, pid=31337), 1)
    assert "gpu-busy" not in ids(diagnose(r))


def test_memory_held_by_unlisted_processes_is_reported():
    r = replace_gpu(load("healthy_four_gpu"), 2, memory_used_mib=30000.0, processes=())
    p = only(diagnose(r), "gpu-busy")
    assert p.devices == (2,) and "cannot name" in p.cause


def test_hidden_busy_gpu_is_not_reported():
    r = replace_gpu(load("four_gpu_cvd0"), 3, memory_used_mib=30000.0, processes=(GpuProcess(7, "python", 29990.0),))
    assert "gpu-busy" not in ids(diagnose(r))


def test_single_gpu_workstation_is_info_only():
    problems = diagnose(load("one_gpu"))
    assert ids(problems) == {"only-one-gpu": "info"}  # Xorg's 250 MiB is not another job
    assert exit_code(problems) == 0


def test_nccl_missing_with_two_gpus_is_an_error():
    problems = diagnose(load("nccl_missing"))
    p = only(problems, "nccl-missing")
    assert p.severity == "error" and "2 visible GPUs" in p.cause and "WSL2" in p.fix
    assert only(problems, "no-peer-access").devices == (0, 1)


def test_nccl_missing_with_one_gpu_is_info():
    r = dataclasses.replace(load("one_gpu"), nccl_available=False, nccl_version=None)
    assert ids(diagnose(r))["nccl-missing"] == "info"


def test_malformed_cvd_explains_what_cuda_read():
    problems = diagnose(load("cvd_malformed"))
    p = only(problems, "cuda-visible-devices-malformed")
    assert p.severity == "error" and p.devices == (1, 2, 3)
    assert "'0 1 2 3' is read as 0" in p.cause and "CUDA_VISIBLE_DEVICES=0,1,2,3" in p.fix
    assert "cuda-visible-devices-hides" not in ids(problems)


@pytest.mark.parametrize("value, text", [("0,1,-1,2", "'2' after it ignored"), ("1,1", "listed twice"),
                                         ("0,5", "index 5 is past the last GPU"), ("GPU-dead", "matches no GPU")])
def test_other_malformed_values(value, text):
    r = dataclasses.replace(load("four_gpu_cvd0"), cuda_visible_devices=value, torch_devices=())
    p = only(diagnose(r), "cuda-visible-devices-malformed")
    assert text in p.cause


def test_mig_enabled_warns_and_maps_the_instance():
    problems = diagnose(load("mig_enabled"))
    p = only(problems, "mig-enabled")
    assert p.severity == "warning" and p.devices == (0,) and "2 instances" in p.cause
    assert "nvidia-smi -i 0 -mig 0" in p.fix
    assert "cuda-visible-devices-malformed" not in ids(problems)


def test_mig_change_pending():
    r = replace_gpu(load("healthy_four_gpu"), 1, mig_pending=True)
    assert only(diagnose(r), "mig-change-pending").devices == (1,)


def test_mixed_models_with_index_list_warns_about_device_order():
    r = replace_gpu(dataclasses.replace(load("healthy_four_gpu"), cuda_visible_devices="0,1,2,3"), 3,
                    name="NVIDIA H100 80GB HBM3")
    assert ids(diagnose(r)) == {"cuda-device-order": "warning"}
    r = dataclasses.replace(r, cuda_device_order="PCI_BUS_ID")
    assert diagnose(r) == []


def test_no_peer_access_between_visible_pairs():
    r = load("healthy_four_gpu")
    peers = tuple(dataclasses.replace(p, ok=False) if {p.a, p.b} == {1, 2} else p for p in r.torch_peer_access)
    r = dataclasses.replace(r, torch_peer_access=peers, nccl_env={"NCCL_P2P_DISABLE": "1"})
    p = only(diagnose(r), "no-peer-access")
    assert p.devices == (1, 2) and "1-2" in p.cause and "NCCL_P2P_DISABLE" in p.cause


def test_peer_access_reported_in_driver_indices():
    r = dataclasses.replace(load("healthy_four_gpu"), cuda_visible_devices="2,3", torch_device_count=2,
                            torch_devices=load("healthy_four_gpu").torch_devices[2:],
                            torch_peer_access=(PeerAccess(0, 1, False), PeerAccess(1, 0, False)))
    assert only(diagnose(r), "no-peer-access").devices == (2, 3)


def test_few_cores_for_many_gpus():
    r = dataclasses.replace(load("healthy_four_gpu"), cpu_affinity=64, cpu_quota=6.0)
    p = only(diagnose(r), "few-cpu-cores")
    assert "6 usable cores for 4 GPU replicas" in p.cause


def test_problems_come_errors_first():
    severities = [p.severity for p in diagnose(load("nccl_missing"))]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)


@pytest.mark.parametrize("path", sorted(READINGS.glob("*.json")), ids=lambda p: p.stem)
def test_every_problem_has_cause_and_fix(path):
    for p in diagnose(EnvironmentReading.from_dict(json.loads(path.read_text()))):
        assert p.cause.endswith(".") and len(p.fix) > 20


# Readings captured by read_environment() on a real H100 machine (driver 580, torch 2.11.0+cu130).

def test_real_h100_single_gpu_is_healthy():
    r = load("h100_real")
    assert r.torch_devices[0].uuid and r.gpus[0].uuid.endswith(r.torch_devices[0].uuid)
    assert ids(diagnose(r)) == {"only-one-gpu": "info"}


def test_real_h100_busy_with_another_process():
    p = only(diagnose(load("h100_busy_real")), "gpu-busy")
    assert p.severity == "warning" and "python3 (pid 664, 21702 MiB)" in p.cause and "100% busy" in p.cause


def test_real_h100_duplicate_cvd_quotes_torch_and_explains():
    r = load("h100_cvd_duplicate_real")
    assert "invalid device ordinal" in r.torch_cuda_error
    problems = diagnose(r)
    assert ids(problems) == {"cuda-visible-devices-malformed": "error"}
    assert "0 is listed twice, so CUDA shows no GPU at all" in problems[0].cause


@pytest.mark.parametrize("capability, arch, ok", [
    ("8.6", ("sm_80",), True),            # same major, lower minor cubin runs (binary compatibility)
    ("8.0", ("sm_86",), False),           # a newer minor's cubin does not run on an older GPU
    ("9.0", ("sm_80", "compute_80"), True),  # PTX JIT-compiles forward
    ("9.0", ("sm_80",), False),
    ("10.0", ("sm_90a",), False),         # architecture-specific code is not forward compatible
    ("12.0", ("sm_120",), True),
])
def test_arch_support(capability, arch, ok):
    from allgpu.doctor.rules import _supported

    assert _supported(capability, arch) is ok


def test_nvml_failure_with_working_torch_is_a_warning():
    r = dataclasses.replace(load("healthy_four_gpu"), gpus=(), links=(),
                            nvml_error="NVMLError_LibraryNotFound: NVML Shared Library Not Found",
                            nvml_library_error="libnvidia-ml.so.1: cannot open shared object file")
    assert ids(diagnose(r)) == {"nvml-unavailable": "warning"}
