"""``allgpu doctor --log`` beyond known messages: driver and container warnings, context-creation failures, CUDA
library spellings of TensorFlow 0.x-2.x, PyTorch and Windows, the setting a log shows (OS, frameworks, builds'
CUDA, devices), "no GPU available" lines, throughput series, and candidates named in order for messages with
several causes. Every log here was written by us from the message formats: fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.causes import CAUSE_IDS
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("line, cause", [
    ("Failed to initialize NVML: Unknown Error", "no-driver"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
     "Driver is properly installed and present in your system.", "no-driver"),
    ("docker: Error response from daemon: failed to create shim task: OCI runtime create failed: "
     "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.", "no-driver"),
    ("ERROR: No supported GPU(s) detected to run this container", "no-driver"),
    ("ERROR: This container was built for NVIDIA Driver Release 530.30 or later, but\n       version 470.82 was "
     "detected and compatibility mode is UNAVAILABLE.", "cuda-version-mismatch"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.2, please update your driver to a "
     "newer version", "cuda-version-mismatch"),
    ("WARNING: Detected NVIDIA NVIDIA H100 80GB HBM3 GPU, which is not yet supported in this version of the "
     "container", "unsupported-compute-capability"),
    ("E tensorflow/stream_executor/cuda/cuda_diagnostics.cc:303] kernel version 470.57.2 does not match DSO version "
     "470.63.1 -- cannot find working devices in this configuration", "no-driver"),
    ("RuntimeError: CUDA driver error: CUDA_ERROR_STUB_LIBRARY", "no-driver"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized",
     "no-driver"),
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) but found runtime "
     "version (8, 5, 0).", "cuda-version-mismatch"),
    # CUDA library lookups: TensorFlow 1.x Windows, 0.x/1.x Linux, cuDNN 8.3+ on Windows, PyTorch on Windows/Linux.
    ("ImportError: Could not find 'cudart64_90.dll'. TensorFlow requires that this DLL be installed in a directory "
     "that is named in your %PATH% environment variable.", "missing-cuda-libs"),
    ("I tensorflow/stream_executor/dso_loader.cc:119] Couldn't open CUDA library libcudnn.so.5. LD_LIBRARY_PATH: "
     "/usr/local/cuda/lib64", "missing-cuda-libs"),
    ("Could not locate zlibwapi.dll. Please make sure it is in your library path!", "missing-cuda-libs"),
    ('OSError: [WinError 126] The specified module could not be found. Error loading "C:\\Users\\me\\venv\\lib\\'
     'site-packages\\torch\\lib\\cudnn_adv_infer64_8.dll" or one of its dependencies.', "missing-cuda-libs"),
    ("ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory",
     "missing-cuda-libs"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the driver",
     "unsupported-compute-capability"),
    ("Could not locate cudnn_ops_infer64_8.dll. Please make sure it is in your library path!", "missing-cuda-libs"),
    ("THCudaCheck FAIL file=/src/THC/THCTensorCopy.cu line=205 error=8 : invalid device function",
     "unsupported-compute-capability"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_86'", "unsupported-compute-capability"),
    ("RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly", "dataloader-shm"),
    ("RuntimeError: CUDA unknown error", "no-driver"),
    ("Error in CuDNN: CUDNN_STATUS_NOT_INITIALIZED", "cuda-version-mismatch"),
    ("W tensorflow/core/common_runtime/gpu/gpu_device.cc:1] Invalid GPU compute capability",
     "unsupported-compute-capability"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(handle, opa, opb)`",
     "cuda-version-mismatch"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: jaxlib/gpu/solver_handle_pool.cc:37: operation "
     "gpusolverDnCreate(&handle) failed: cuSolver internal error", "cuda-version-mismatch"),
    ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "cuda-version-mismatch"),
])
def test_driver_container_and_library_messages(line, cause):
    assert causes(line)[:1] == (cause,)


def test_a_dll_that_is_not_a_cuda_library_names_no_cause():
    assert causes('OSError: [WinError 126] Error loading "C:\\Python39\\lib\\site-packages\\torch\\lib\\fbgemm.dll" '
                  "or one of its dependencies.") == ()


def test_a_message_with_several_causes_names_them_in_order():
    verdict = verdict_from_log(read_log("RuntimeError: CUDA error: out of memory"))
    assert verdict.cause_ids == ("out-of-memory", "memory-held")
    assert "Candidate" in verdict.findings[1].cause and "other causes" in verdict.findings[0].cause
    assert causes("E cuda_driver.cc:152] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is "
                  "detected") == ("devices-hidden", "no-driver")
    # Another message deciding it: no candidates from the first.
    assert causes("CUDA_VISIBLE_DEVICES=-1 python train.py\nfailed call to cuInit: CUDA_ERROR_NO_DEVICE")[:1] == (
        "devices-hidden",)


def test_no_device_under_wsl2_is_the_driver():
    log = ("Could not load library /usr/lib/wsl/lib/libcuda.so.1\n"
           "E cuda_driver.cc:152] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected")
    assert causes(log)[:1] == ("no-driver",)
    # A Windows drive mounted at /mnt/c is WSL too; numba's wording of the same failure.
    numba = ('  File "/mnt/c/Users/me/proj/.venv/lib/python3.12/site-packages/numba/cuda/cudadrv/driver.py", line 1\n'
             "numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: Call to cuInit results in "
             "CUDA_ERROR_NO_DEVICE (100)")
    verdict = verdict_from_log(read_log(numba))
    assert verdict.cause_ids[:1] == ("no-driver",) and "numba" in " ".join(verdict.notes)


WINDOWS_TF = """\
(tf) PS C:\\Users\\me\\project> python check.py
TensorFlow version: 2.12.0
Num GPUs Available:  0
"""


def test_tensorflow_2_11_or_later_on_native_windows_is_a_cpu_build():
    verdict = verdict_from_log(read_log(WINDOWS_TF))
    assert verdict.cause_ids == ("cpu-build",)
    assert "native Windows" in " ".join(verdict.findings[0].evidence)
    assert "Runs on native Windows" in " ".join(verdict.notes)
    # The same TensorFlow on native Windows before 2.11 could use the GPU: not a CPU build.
    assert causes(WINDOWS_TF.replace("2.12.0", "2.10.1"))[:1] == ("missing-cuda-libs",)


def test_no_gpu_lines_name_candidates_from_the_build():
    assert causes("tensorflow version 2.13.1\nNum GPUs Available: 0") == ("cpu-build", "missing-cuda-libs",
                                                                        "no-driver")
    assert causes(">>> torch.__version__\n'2.1.0+cu121'\n>>> torch.cuda.is_available()\nFalse")[:1] == ("no-driver",)
    assert causes(">>> torch.cuda.is_available()\nTrue") == ()
    both = "tf.test.is_gpu_available() False\ntorch.cuda.is_available() False"
    assert causes(both)[:1] == ("no-driver",)
    listing = '[name: "/device:CPU:0"\ndevice_type: "CPU"\nmemory_limit: 268435456\n]'
    assert causes(listing)[:1] == ("missing-cuda-libs",)
    assert causes(listing + '\n[name: "/device:GPU:0"\ndevice_type: "GPU"\n]') == ()


SMI_OLD_DRIVER = """\
torch 2.1.0+cu121
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
torch.cuda.is_available(): False
"""


def test_a_build_for_a_newer_cuda_than_the_driver_supports_is_a_version_mismatch():
    verdict = verdict_from_log(read_log(SMI_OLD_DRIVER))
    assert verdict.cause_ids[:1] == ("cuda-version-mismatch",)
    assert "CUDA 12.1" in verdict.findings[0].evidence[0] and "CUDA 11.4" in verdict.findings[0].evidence[0]
    assert causes(SMI_OLD_DRIVER.replace("+cu121", "+cu113"))[:1] == ("no-driver",)


def _steps(times: list[float]) -> str:
    return "\n".join(f"step {i * 10}, loss = 2.{i:02d} ({128 / t:.1f} examples/sec; {t:.3f} sec/batch)"
                     for i, t in enumerate(times))


def test_steps_that_stall_in_bursts_are_input_bound():
    stalled = [0.9, 0.5] + [0.1, 0.1, 0.1, 0.6, 0.1, 0.1, 0.1, 0.7, 0.1, 0.1, 0.1, 0.65]
    verdict = verdict_from_log(read_log(_steps(stalled)))
    assert verdict.cause_ids == ("input-bound", "communication-bound")
    assert "3 of 12 step-time readings" in verdict.findings[0].evidence[0]
    assert causes(_steps([0.9, 0.5] + [0.1, 0.11, 0.1, 0.12, 0.1, 0.1, 0.11, 0.1, 0.1, 0.1])) == ()


SCALING = """\
num_gpus: 1
total images/sec: 400.5
num_gpus: 4
total images/sec: 520.0
"""


def test_throughput_that_does_not_grow_with_gpus_names_input_then_communication():
    verdict = verdict_from_log(read_log(SCALING))
    assert verdict.cause_ids == ("input-bound", "communication-bound")
    assert "32% of linear scaling" in verdict.findings[0].evidence[0]
    socket = SCALING + "node1:12:12 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] via NET/Socket/0\n"
    assert causes(socket) == ("communication-bound", "input-bound")
    linear = SCALING.replace("520.0", "1560.0")
    assert causes(linear) == ()
    assert "communication-bound" in CAUSE_IDS


def test_a_log_with_no_known_message_says_what_it_read_and_names_no_cause():
    log = ('Traceback (most recent call last):\n  File "/home/me/train.py", line 40, in <module>\n'
           '    x = x.to("cuda:1")\n  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", '
           "line 1145, in to\nValueError: bad value")
    verdict = verdict_from_log(read_log(log))
    notes = " ".join(verdict.notes)
    assert verdict.cause_ids == () and verdict.nothing_known
    assert "Frameworks in the log: pytorch" in notes and "Devices the log names: cuda:1" in notes


SMI = """+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA A10G                    On  | 00000000:00:1E.0 Off |                    0 |
|  0%   31C    P0              58W / 300W |  {used}MiB / 23028MiB |      {util}%      Default |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
{procs}+---------------------------------------------------------------------------------------+
"""


def test_nvidia_smi_memory_held_with_no_process_listed_is_memory_held_then_an_idle_job():
    nobody = SMI.format(used=20480, util=0, procs="|  No running processes found" + " " * 59 + "|\n")
    assert causes(nobody) == ("memory-held", "input-bound")
    empty = SMI.format(used=20480, util=0, procs="")
    assert causes(empty) == ("memory-held", "input-bound")
    assert "lists no process" in " ".join(verdict_from_log(read_log(nobody)).notes)
    # The job is listed: memory held at 0% is only a weak sign of an idle job, no cause named.
    row = "|    0   N/A  N/A     4242      C   python" + " " * 36 + "20470MiB |\n"
    listed = SMI.format(used=20480, util=0, procs=row)
    assert causes(listed) == ()
    assert read_log(listed).facts.smi_processes == 1
    # Busy, or hardly any memory held: nothing.
    assert causes(SMI.format(used=20480, util=97, procs="")) == ()
    assert causes(SMI.format(used=2, util=0, procs="")) == ()


def test_a_gpu_newer_than_the_build_has_no_kernels():
    # TensorFlow 1.x is built with CUDA 10.0: nothing for an A100 (the note written in Chinese, as users paste it).
    log = ("InternalError: Blas GEMM launch failed : a.shape=(64, 512), m=512, n=10, k=64\n"
           "我的tensorflow-gpu=1.14.0，显卡是A100")
    assert causes(log)[:2] == ("unsupported-compute-capability", "cuda-version-mismatch")
    assert read_log(log).facts.versions["tensorflow"] == "1.14.0"
    # PyTorch built for CUDA 12.1 on a Blackwell card; built for CUDA 12.8 it has kernels for it.
    torch_log = ("torch 2.3.1+cu121\nGPU 0: NVIDIA GeForce RTX 5090\n"
                 "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert causes(torch_log)[0] == "unsupported-compute-capability"
    assert "needs CUDA 12.8 or later" in str(verdict_from_log(read_log(torch_log)).findings[0])
    assert "needs CUDA" not in str(verdict_from_log(read_log(torch_log.replace("+cu121", "+cu128"))).findings)
    # A run whose GPUs registered and that shows no failure: the card is not a cause.
    ok = ("tensorflow 2.3.0\nI gpu_device.cc:1] Adding visible gpu devices: 0\n"
          "I gpu_device.cc:1] Created TensorFlow device (/job:localhost/replica:0/task:0/device:GPU:0 with 22000 MB "
          "memory) -> physical GPU (device: 0, name: GeForce RTX 3090, pci bus id: 0000:01:00.0)")
    assert "unsupported-compute-capability" not in causes(ok)
    # Short names are not read from other words.
    assert read_log("loss A2 B4 cell L4 done").setting.gpu_arch is None


def test_tf_blas_launch_failure_names_memory_first_then_the_gpu():
    assert causes("tensorflow.python.framework.errors_impl.InternalError: Blas SGEMM launch failed : m=32, n=10, "
                  "k=40") == ("memory-held", "unsupported-compute-capability", "cuda-version-mismatch")


def test_jax_without_a_gpu_backend_is_a_cpu_build():
    assert causes("RuntimeError: Unknown backend gpu")[0] == "cpu-build"
    assert causes("RuntimeError: Unknown backend: 'gpu' requested, but no platforms that are instances of gpu are "
                  "present. Platforms present are: cpu")[0] == "cpu-build"
