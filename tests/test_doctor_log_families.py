"""``allgpu doctor --log``'s fallback by cause family (:mod:`allgpu.doctor.log_families`): wordings no exact reader
knows are read by what every wording of their cause has in common, with lower confidence, and a log with no family
sign still gets no cause. Every log here was written by us in wordings of the families' kinds: fixtures, never a
figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_families import library_cause, read_families
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import FAMILY_NOTE, verdict_from_log

pytestmark = pytest.mark.unit


def verdict(text: str):
    return verdict_from_log(read_log(text))


@pytest.mark.parametrize("text, cause", [
    # a build without GPU support, in wordings no exact reader has
    ("FooError: this build has not been configured for GPU, rebuild it", "cpu-build"),
    ("mylib.base.Error: [12:01:44] GPU is not enabled", "cpu-build"),
    ("Installed: somelib 3.2.1 (CPU-only)", "cpu-build"),
    ("installed foonet-cpu==1.4.0 from the index", "cpu-build"),
    ("-- config: GGML_CUDA=OFF, building for the host", "cpu-build"),
    # a CUDA library that does not load, named any way
    ("OSError: libcusparseLt.so.0: could not be loaded", "missing-cuda-libs"),
    ("Failed to load the library 'C:\\tools\\cufftw64_11.dll'", "missing-cuda-libs"),
    ("warning: unable to locate libnvrtc-builtins.so.12.4 in the search path", "missing-cuda-libs"),
    ("setup: CUDA toolkit not installed, the extension cannot run", "missing-cuda-libs"),
    ("loader: unable to load any of {libcublasLt.so.12.3, libcublasLt.so.12, libcublasLt.so}", "missing-cuda-libs"),
    ("error: cublas Lt64_12.dll is not found", "missing-cuda-libs"),  # a CUDA library's name split in two words
    ("Bad handle. Could not load symbol cufftPlanMany", "missing-cuda-libs"),
    ("installer: did not detect CUDA on this computer", "missing-cuda-libs"),
    # the driver's own library, or no driver at all
    ("panic: could not open nvml.dll: The specified module could not be found", "no-driver"),
    ("startup: NVIDIA driver is not loaded on this host", "no-driver"),
    ("gpu probe: unable to load NVIDIA driver library libcuda.so.1", "no-driver"),
    ("display server: could not load the NVIDIA kernel module", "no-driver"),
    # the GPU's architecture missing from the build
    ("ERROR: CUDA kernel foo has no device code compatible with CUDA arch 610. bar.cu was compiled for: 700,800",
     "unsupported-compute-capability"),
    ("fatal: sm_35 is not compatible with this release", "unsupported-compute-capability"),
    ("ptxas fatal   : Value 'sm_130' is not defined for option 'gpu-name'", "unsupported-compute-capability"),
    ("warning: your GPU is too old for this release", "unsupported-compute-capability"),
    ("the GPU's compute capability 3.0 is below the minimum required compute capability of 3.5",
     "unsupported-compute-capability"),
    # versions that do not fit
    ("ImportError: /opt/x/libfoo.so: undefined symbol: cublasLtGetVersion", "cuda-version-mismatch"),
    ("please update your NVIDIA driver: it is older than this build's CUDA", "cuda-version-mismatch"),
    ("ImportError: /usr/lib/libcudnn_ops.so.9: version `libcudnn.so.9' not found", "cuda-version-mismatch"),
    ("runtime: cudaGraphInstantiateWithFlags symbol not found", "cuda-version-mismatch"),
    ("mypkg.cuda.runtime does not export expected C function cudaStreamQuery", "cuda-version-mismatch"),
    # math libraries' statuses by number (NVIDIA's enums) and by name
    ("CUSOLVER Error 2 at solver.cc:39", "out-of-memory"),
    ("cuBLAS error 8 in gemm", "unsupported-compute-capability"),
    ("cufft status: CUFFT_ALLOC_FAILED", "out-of-memory"),
    # memory
    ("worker 3: GPU memory exhausted? failed to allocate 812 MB on device 0", "out-of-memory"),
    ("Error: not enough GPU memory to load the model", "out-of-memory"),
    ("the device is occupied by another process, try later", "memory-held"),
    # launch and multi-GPU
    ("RuntimeError: [WinError 10048] Only one usage of each socket address is normally permitted", "port-in-use"),
    ("cannot start the rendezvous on port 6006: another process is using it", "port-in-use"),
    ("AssertionError: the distributed backend has not been initialized", "process-group-missing"),
    ("ERROR: unable to allocate shared memory for the worker queue", "dataloader-shm"),
    ("comm.cc: NCCL reported an unhandled system failure", "nccl-error"),
    ("ValueError: requested cuda:3 but only 2 GPUs are available", "invalid-device-index"),
])
def test_family_names_the_cause_with_lower_confidence(text, cause):
    found = verdict(text)
    assert found.cause_ids[:1] == (cause,), found.cause_ids
    assert FAMILY_NOTE in found.findings[0].cause


def test_status_numbers_follow_each_library_enum():
    # 7 is INTERNAL_ERROR for cuSOLVER but INVALID_VALUE (not a device cause) for cuBLAS
    assert verdict("CUSOLVER Error 7 at x.cc:12").cause_ids[:2] == ("cuda-version-mismatch",
                                                                       "unsupported-compute-capability")
    assert verdict("cuBLAS error 7 in gemm").cause_ids == ()


def test_unrelated_libraries_and_plain_text_name_no_cause():
    assert library_cause("libGL.so.1") == (None, 0.0)
    assert verdict("ImportError: libGL.so.1: cannot open shared object file: No such file or directory").cause_ids == ()
    assert verdict("Epoch 1/10\n100/100 [=====] - 3s - loss: 0.42\nDone.").cause_ids == ()
    assert read_families(["training finished in 3 minutes", ""]) == []


def test_known_messages_win_over_families():
    # a known message names the cause; the family sign in the same log is not used
    text = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\nthe GPU is not enabled for display"
    found = verdict(text)
    assert found.cause_ids[0] == "out-of-memory"
    assert all(FAMILY_NOTE not in f.cause for f in found.findings)


def test_specific_family_ranks_before_generic_memory_words():
    text = "warning: out of memory while retrying\nfatal: no kernel image for this device"
    assert verdict(text).cause_ids[0] == "unsupported-compute-capability"
