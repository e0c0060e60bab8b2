"""``allgpu doctor --log`` reads a tool's own wordings of a cause as a family, not message by message: "GPU is not
accessible/available/enabled" and their qualified forms ("Device API cuda is not enabled", "GPU acceleration is
unavailable"), a hint to install the CUDA flavour, a CUDA entry point missing from a module or op namespace (a CPU
build), CUTLASS's status strings, a failed ``cuInit()`` by its return value, "device_type cpu", and an argparse dump
of the PyTorch examples' ``args.cuda``. Every log here was written by us for tools that do not exist: fixtures,
never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("text", [
    "zorb.base.ZorbError: Check failed: Device API cuda is not enabled. Please install the cuda version of zorb.",
    "ZorbError: CUDA backend is not enabled in this build",
    "warning: you have installed the CPU version of Zorb; install the GPU version of Zorb to train on the GPU",
    "AttributeError: module 'zorb._C' has no attribute '_cuda_getDeviceCount'",
    "AttributeError: '_OpNamespace' 'zorbops' object has no attribute 'set_max_uva_threads'",
])
def test_a_tools_own_build_wordings_read_as_a_cpu_build(text: str) -> None:
    assert causes(text)[:1] == ("cpu-build",)


@pytest.mark.parametrize("text", [
    "AttributeError: 'NoneType' object has no attribute 'cuda'",  # the user's own object, not a build
    "AttributeError: module 'keras.backend' has no attribute '_get_available_gpus'",  # an API version
    "AttributeError: module 'zorb' has no attribute 'gpu_options'",
])
def test_other_missing_attributes_name_no_cpu_build(text: str) -> None:
    assert "cpu-build" not in causes(text)


@pytest.mark.parametrize("text", [
    "GPU is not accessible. Was the zorb library installed correctly?",
    "RuntimeError: Unable to start, no GPU resources available",
    "zorb: GPU acceleration is not available, running on the host",
    "Warning: CUDA unavailable, zorb continues without it",
    ">> Using device_type cpu",
    "Namespace(batch_size=8, cuda=False, epochs=10, no_cuda=False, seed=1)",
])
def test_no_gpu_wordings_name_the_no_gpu_candidates(text: str) -> None:
    named = causes(text)
    assert named[:1] == ("cpu-build",) and "no-driver" in named  # a guess among candidates, never one cause alone


def test_no_cuda_asked_for_is_not_a_missing_gpu() -> None:
    assert causes("Namespace(batch_size=8, cuda=False, epochs=10, no_cuda=True, seed=1)") == ()


@pytest.mark.parametrize(("text", "cause"), [
    ("RuntimeError: zorb/cutlass_gemm.h:210 status failed with error Error Internal",
     "unsupported-compute-capability"),
    ("cutlass::Status kErrorArchMismatch in zorb's fused MLP", "unsupported-compute-capability"),
    ("zorb: cutlass gemm returned Error Insufficient Driver", "cuda-version-mismatch"),
    ("zorb: cutlass gemm initialize failed: Error Memory Allocation", "out-of-memory"),
    ("12:00:01:E :CUDA not supported: cuInit() returned 100", "no-driver"),
])
def test_status_values_read_by_name_or_return_value(text: str, cause: str) -> None:
    assert causes(text)[:1] == (cause,)
