"""``allgpu doctor --log`` reads more wordings by family: a tool's GPU backend "not correctly set up", a package's
compiled ops module missing (``<pkg>._ext``, ``<pkg>_cuda``), a device option whose choices hold no GPU, an extension
library's op with no CUDA kernel, "CUDA extension not installed" (with ``CUDA_HOME`` unset: no toolkit first),
"install the correct version of CUDA", OpenCL finding no platform or device, a container runtime finding no NVIDIA
libraries, a library lookup reported over two lines, and cuDNN's bare INTERNAL_ERROR as memory reserved up front.
Every log here was written by us for tools that do not exist: fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA environment is not correctly set up",
    "zorb.GpuError: GPU support is not properly configured (is zorb-gpu installed?)",
    "ModuleNotFoundError: No module named 'zorbvision._ext'",
    "ImportError: No module named 'zorb_ops_cuda'",
    "zorb.py: error: argument --device: invalid choice: 'cuda' (choose from 'cpu', 'auto')",
])
def test_a_gpu_backend_not_installed_reads_as_a_cpu_build(text: str) -> None:
    assert causes(text)[:1] == ("cpu-build",)


def test_choices_that_hold_a_gpu_name_no_cpu_build() -> None:
    text = "zorb.py: error: argument --device: invalid choice: 'cuda' (choose from 'cpu', 'rocm')"
    assert "cpu-build" not in causes(text)


def test_torchs_own_module_is_not_a_packages_compiled_ops() -> None:
    assert causes("ModuleNotFoundError: No module named 'torch._C'") == ()


@pytest.mark.parametrize("text", [
    "NotImplementedError: Could not run 'zorbvision::roi_align' with arguments from the 'CUDA' backend.",
    "zorb: CUDA extension not installed.",
    "EP Error: CUDA_PATH is set but CUDA could not be loaded. Please install the correct version of CUDA and cuDNN",
])
def test_an_extension_built_for_another_cuda_reads_as_a_version_mismatch(text: str) -> None:
    assert causes(text)[:1] == ("cuda-version-mismatch",)


def test_cuda_home_unset_puts_the_missing_toolkit_first() -> None:
    text = "zorb: CUDA extension not installed.\nOSError: CUDA_HOME environment variable is not set."
    assert causes(text)[:1] == ("missing-cuda-libs",)


@pytest.mark.parametrize("text", [
    "ZorbBoostError: No OpenCL device found",
    "clGetPlatformIDs failed with -1001 (zorbcl)",
    "WARNING: Could not find any NVIDIA libraries on this host!\nNo GPU detected, zorb runs on the CPU.",
])
def test_no_opencl_platform_or_no_nvidia_libraries_reads_as_the_driver(text: str) -> None:
    assert causes(text)[:1] == ("no-driver",)


def test_a_lookup_over_two_lines_names_the_library() -> None:
    text = "zorb -s\nCUDA libraries:\nFinding cusolver\n\tERROR: can't locate lib\nFinding zlib\n\tERROR: can't locate lib"
    verdict = verdict_from_log(read_log(text))
    assert verdict.cause_ids[:1] == ("missing-cuda-libs",)
    assert "cusolver" in verdict.findings[0].evidence[0]


def test_a_lookup_of_a_library_unrelated_to_cuda_names_no_cause() -> None:
    assert causes("Finding zlib\nERROR: can't locate lib") == ()


def test_cudnn_internal_error_alone_reads_as_memory_reserved_up_front() -> None:
    assert causes("zorb: cudnn failed: CUDNN_STATUS_INTERNAL_ERROR")[:1] == ("memory-held",)
