"""``allgpu doctor --log`` reads more wordings by family: a tool's own "this GPU is too old" (too old to be
supported, a capability requirement ``>= N``, "only supports <architecture> GPUs or newer", "requires <architecture>
or newer"), the PTX assembler failing, the subject-first "CUDA version/driver is incompatible", a tool with no build
for the CUDA it found ("no matching cuda flavor"), the driver's own libraries (``libnvidia-*``, ``libnvcuvid``,
``nvEncodeAPI``) as the driver rather than a CUDA library, "CUDA is installed, but the device is not available" as the
driver first, and ``is_available`` in every binding's spelling with its answer marked ``> false``. Every log here was
written by us for tools that do not exist: fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("text", [
    "RuntimeError: Found NVIDIA Quadro K620 which is too old to be supported by the zorb compiler",
    "zorb only supports devices of CUDA Capability >= 8.0, but your device is of CUDA capability 7.5",
    "RuntimeError: ZorbAttention only supports Hopper GPUs or newer.",
    "ValueError: zorb's fused kernels require an Ampere or newer GPU",
    "zorb: bf16 kernels need a Turing card",
    "RuntimeError: ptxas failed with error code 4294967295 (zorb)",
])
def test_a_tools_gpu_too_old_wordings_read_as_the_architecture(text: str) -> None:
    assert causes(text)[:1] == ("unsupported-compute-capability",)


@pytest.mark.parametrize("text", [
    "ZorbError: cannot load the GPU kernels: CUDA version/driver is incompatible with package",
    "zorb: the cuDNN version is not compatible with this wheel",
])
def test_subject_first_incompatibility_reads_as_a_version_mismatch(text: str) -> None:
    assert causes(text)[:1] == ("cuda-version-mismatch",)


def test_no_build_for_the_cuda_found_is_a_version_mismatch_with_cpu_next() -> None:
    assert causes("No matching cuda flavor for linux-x86_64 found: cu101/sm_75.")[:2] == (
        "cuda-version-mismatch", "cpu-build")


@pytest.mark.parametrize("lib", ["libnvidia-encode.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvcuvid.so.1",
                                 "nvEncodeAPI64.dll", "nvcuvid.dll"])
def test_the_drivers_own_libraries_read_as_the_driver(lib: str) -> None:
    assert causes(f"[zorb_enc @ 0x55] Cannot load {lib}")[:1] == ("no-driver",)


def test_cuda_toolkit_libraries_stay_cuda_libraries() -> None:
    assert causes("zorb: Cannot load libnvrtc.so.12")[:1] == ("missing-cuda-libs",)


def test_cuda_said_installed_puts_the_driver_before_the_build() -> None:
    named = causes("WARNING (zorb.cuda): CUDA is installed, but device gpu is not available (error: cuda unavailable)")
    assert named[:1] == ("no-driver",) and "cpu-build" not in named


@pytest.mark.parametrize("call", ['println!("{:?}", Cuda::is_available());',
                                  "std::cout << torch::cuda::is_available();", "CUDA.functional()",
                                  "CudaUtils.hasCuda()"])
def test_is_available_in_other_bindings_reads_as_no_gpu(call: str) -> None:
    assert causes(f"{call}\n> false")[:1] == ("cpu-build",)  # the guess among the candidates when nothing else tells


def test_is_available_answered_true_names_nothing() -> None:
    assert causes('println!("{:?}", Cuda::is_available());\n> true') == ()


def test_ptxas_lines_that_are_not_failures_name_nothing() -> None:
    assert causes("ptxas info    : Used 32 registers, 352 bytes cmem[0]") == ()
