"""The status-enum reader of ``doctor --log``: CUDA, HIP, NVML and NCCL statuses read by name, number (both CUDA
numberings) or text, each member's settled cause (or none). The lines are fixtures written here from the libraries'
message formats; they count in no figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_enum_tables import CUDA, NCCL, NVML
from allgpu.doctor.log_enums import enum_notes, read_enums
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def _one(line: str):
    reads = read_enums([line])
    assert len(reads) == 1, reads
    return reads[0]


@pytest.mark.parametrize("line,name,via", [
    ("RuntimeError: cuda runtime error (30) : unknown error at /x/THCGeneral.cpp:70", "cudaErrorUnknown", "text"),
    ("Check failed: error == cudaSuccess (30 vs. 0)", "cudaErrorUnknown", "number"),  # CUDA <= 10.0's numbering
    ("mytool: CUDA error 999", "cudaErrorUnknown", "number"),  # CUDA >= 10.1's
    ("Check failed: error == cudaSuccess (38 vs. 0)", "cudaErrorNoDevice", "number"),
    ("cudaGetDeviceCount() returned CUDA_ERROR_NO_DEVICE", "cudaErrorNoDevice", "name"),
    ("THCudaCheck FAIL file=k.cu line=7 error=8", "cudaErrorInvalidDeviceFunction", "number"),
    ("CUDA error 10 in file 'a.cu' line 3", "cudaErrorInvalidDevice", "number"),
    ("code=209(cudaErrorNoKernelImageForDevice) \"cudaMemcpy\"", "cudaErrorNoKernelImageForDevice", "name"),
    ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!", "cudaErrorNoKernelImageForDevice",
     "name"),
    ("RuntimeError: HIP error: invalid device function", "cudaErrorInvalidDeviceFunction", "text"),
    ("warp: CUDA error: error code 34", "cudaErrorStubLibrary", "number"),
    ("Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized", "cudaErrorSystemNotReady",
     "text"),
    ("Failed to initialize NVML: Driver/library version mismatch", "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "text"),
    ("pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "NVML_ERROR_DRIVER_NOT_LOADED", "name"),
    ("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error", "ncclSystemError", "text"),
])
def test_member_read_by_name_number_or_text(line, name, via):
    read = _one(line)
    assert (read.name, read.via) == (name, via)


def test_numbers_are_read_only_where_cuda_prints_them():
    assert read_enums(["worker exited with code=2", "Check failed: status == CUDNN_STATUS_SUCCESS (4 vs. 0)",
                       "out of memory", "unknown error while parsing"]) == []


def test_every_member_has_a_text_and_a_mapping_with_its_source():
    for member in CUDA + NVML + NCCL:
        assert member.texts and member.names
        if member.cause:
            assert member.refs, member.names  # every cause is taken from threads (or the exact reader's)
        if member.also:
            assert member.cause not in member.also


def test_faults_are_read_but_name_no_cause():
    log = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    verdict = verdict_from_log(read_log(log))
    assert verdict.cause_ids == ()
    assert any("cudaErrorIllegalAddress (700)" in n and "no cause named" in n for n in verdict.notes)


def test_a_member_names_its_cause_when_no_known_message_does():
    verdict = verdict_from_log(read_log("gpu_burn: Couldn't init CUDA: error code 222\n"))
    assert verdict.cause_ids[:1] == ("cuda-version-mismatch",)
    verdict = verdict_from_log(read_log("solver.cu:12 CUDA Error 38\n"))  # legacy cudaErrorNoDevice: ambiguous
    assert verdict.cause_ids[:2] == ("devices-hidden", "no-driver")


def test_notes_say_which_causes_threads_settled():
    notes = enum_notes(read_enums(["Check failed: error == cudaSuccess (30 vs. 0)"]))
    assert notes == ["CUDA status read at line 1: cudaErrorUnknown (30), 'unknown error': settled as no-driver or "
                     "cuda-version-mismatch in different threads."]


def test_dorado_invalid_device_ids_is_cuda_visible_devices_naming_absent_gpus():
    log = ("[error] CUDA_VISIBLE_DEVICES=0,1 specifies more device ids than the number of GPUs present\n"
           "terminate called after throwing an instance of 'std::runtime_error'\n  what():  Invalid device ids\n")
    assert verdict_from_log(read_log(log)).cause_ids[:1] == ("devices-hidden",)
    bare = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  Invalid device ids\n"
    assert verdict_from_log(read_log(bare)).cause_ids[:2] == ("devices-hidden", "invalid-device-index")


def test_rocm_and_mps_twins_of_cuda_wordings():
    assert verdict_from_log(read_log("RuntimeError: No HIP GPUs are available\n")).cause_ids[:1] == ("devices-hidden",)
    mps = "MPS not available because the current PyTorch install was not built with MPS enabled.\n"
    assert verdict_from_log(read_log(mps)).cause_ids[:1] == ("cpu-build",)


@pytest.mark.parametrize("log, first", [
    # NCCL's result text on a line that names NCCL only inside ProcessGroupNCCL
    ("RuntimeError: ProcessGroupNCCL.cpp:260, unhandled system error\n", "nccl-error"),
    # JAX 0.3's wording of a backend that did not start, for a jaxlib without the CUDA platform
    ("RuntimeError: Backend 'gpu' failed to initialize: NOT_FOUND: Could not find registered platform with name: "
     "\"cuda\".\n", "cpu-build"),
    # a REPL one-liner's answer, the call closed by a quote
    ("$ python -c \"import torch; print(torch.cuda.is_available())\"\nFalse\n", "cpu-build"),
    # torch.utils.cpp_extension: a CUDA toolkit found, torch.cuda.is_available() False
    ("No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'\n", "no-driver"),
])
def test_wordings_read_by_their_source(log, first):
    assert verdict_from_log(read_log(log)).cause_ids[:1] == (first,)


@pytest.mark.parametrize("figures, first", [
    # PyTorch <= 1.4 figures: most of a 4 GiB GPU is neither allocated, cached nor free: another process holds it
    ("4.00 GiB total capacity; 1.50 GiB already allocated; 20.00 MiB free; 10.00 MiB cached", "memory-held"),
    # a 1 GiB GPU whose unaccounted memory is about one CUDA context: the job itself ran out
    ("1024.00 MiB total capacity; 400.00 MiB already allocated; 30.00 MiB free; 40.00 MiB cached", "out-of-memory"),
])
def test_oldest_torch_oom_figures(figures, first):
    log = f"RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; {figures})\n"
    assert verdict_from_log(read_log(log)).cause_ids[:1] == (first,)
