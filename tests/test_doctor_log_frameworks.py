"""``allgpu doctor --log`` on the kinds of causes beyond TensorFlow/JAX/PyTorch wording: PaddlePaddle, ONNX Runtime,
MXNet, Caffe, CuPy and Numba saying "no GPU build", "library not found", "out of memory"; version mismatches read
from a driver version; containers without GPUs; WSL1 and macOS; CPU-only packages; runs that hang in NCCL. Every
log here was written by us from the frameworks' message formats: fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.log_setting import driver_cuda
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def causes(text: str) -> tuple[str, ...]:
    return verdict_from_log(read_log(text)).cause_ids


@pytest.mark.parametrize("text, cause", [
    # no GPU in the build
    ("PermissionDeniedError: Cannot use CUDAPlace in CPU only version, Please recompile or reinstall Paddle with "
     "CUDA support.", "cpu-build"),
    ("mxnet.base.MXNetError: [10:21:03] src/storage/storage.cc:119: Compile with USE_CUDA=1 to enable GPU usage",
     "cpu-build"),
    ("F0312 09:14:22.101 4312 common.cpp:66] Cannot use GPU in CPU-only Caffe: check mode.", "cpu-build"),
    ("xgboost.core.XGBoostError: XGBoost version not compiled with GPU support.", "cpu-build"),
    ("warning: not compiled with GPU offload support, --n-gpu-layers option will be ignored", "cpu-build"),
    ("UserWarning: Specified provider 'CUDAExecutionProvider' is not in available provider names.Available "
     "providers: 'CPUExecutionProvider'", "cpu-build"),
    (">>> paddle.is_compiled_with_cuda()\nFalse", "cpu-build"),
    # a CUDA library not found
    ("RuntimeError: (PreconditionNotMet) The third-party dynamic library (libcudnn.so) that Paddle depends on is not "
     "configured correctly. (error code is libcudnn.so: cannot open shared object file)", "missing-cuda-libs"),
    ("RuntimeError: (PreconditionNotMet) The third-party dynamic library (cudnn64_8.dll) that Paddle depends on is "
     "not configured correctly. (error code is 126)", "missing-cuda-libs"),
    ("E0721 ... Cannot load cudnn shared library. Cannot invoke method cudnnGetVersion", "missing-cuda-libs"),
    ("[E:onnxruntime:Default, provider_bridge_ort.cc:1351 TryGetProviderInfo_CUDA] LoadLibrary failed with error "
     "126 \"\" when trying to load \"C:\\venv\\lib\\site-packages\\onnxruntime\\capi\\onnxruntime_providers_cuda.dll\"",
     "missing-cuda-libs"),
    ("[W:onnxruntime:Default, onnxruntime_pybind_state.cc:640 CreateExecutionProviderInstance] Failed to create "
     "CUDAExecutionProvider. Please reference https://onnxruntime.ai/docs/execution-providers/"
     "CUDA-ExecutionProvider.html#requirements to ensure all dependencies are met.", "missing-cuda-libs"),
    ("FileNotFoundError: Could not find module 'C:\\Program Files\\cuDNN\\bin\\cudnn_cnn_infer64_8.dll' (or one of "
     "its dependencies). Try using the full path with constructor syntax.", "missing-cuda-libs"),
    ("RuntimeError: CuPy failed to load libnvrtc.so.12: OSError: libnvrtc.so.12: cannot open shared object file",
     "missing-cuda-libs"),
    ("RuntimeError: Unable to load cuSPARSE. Is it installed?", "missing-cuda-libs"),
    ("numba.cuda.cudadrv.error.NvvmSupportError: libNVVM cannot be found. Do `conda install cudatoolkit`",
     "missing-cuda-libs"),
    # out of memory
    ("ResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 1.500000GB memory on GPU 0, "
     "14.2GB memory has been allocated and available memory is only 600.0MB.", "out-of-memory"),
    ("mxnet.base.MXNetError: [23:54:01] src/storage/./pooled_storage_manager.h:161: cudaMalloc retry failed: out of "
     "memory", "out-of-memory"),
    ("F0101 10:00:00.000 123 syncedmem.cpp:71] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
     "out-of-memory"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
     "Exception during initialization: bfc_arena.cc:368 AllocateRawInternal Failed to allocate memory for requested "
     "buffer of size 268435456", "out-of-memory"),
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes).",
     "out-of-memory"),
    # versions that do not fit
    ("W0522 14:31:24.083271  3337 gpu_resources.cc:196] WARNING: device: 0. The installed Paddle is compiled with "
     "CUDA 11.8, but CUDA runtime version in your machine is 11.6, which may cause serious incompatible bug.",
     "cuda-version-mismatch"),
    ("RuntimeError: cuDNN version mismatch: PyTorch was compiled against 7102 but linked against 7005",
     "cuda-version-mismatch"),
    ("InternalError: CUDA runtime implicit initialization on GPU:0 failed. Status: device kernel image is invalid",
     "cuda-version-mismatch"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_INVALID_IMAGE",
     "cuda-version-mismatch"),
    ("jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the "
     "errors above for more details.", "cuda-version-mismatch"),
    # containers and machines without a GPU
    ("$ nvidia-smi\nbash: nvidia-smi: command not found", "no-driver"),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", "no-driver"),
    ("ls: cannot access '/dev/nvidia0': No such file or directory", "no-driver"),
    ("numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: CUDA driver library cannot be found.",
     "no-driver"),
    # hangs between GPUs
    ("[rank1]:[E1111 17:10:53] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
     "monitoring enqueued collectives.", "nccl-error"),
    ("[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
     "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.", "nccl-error"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for key: "
     "store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)", "nccl-error"),
    ("[2023-01-01 10:00:00.000000: W horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be "
     "reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 "
     "seconds.", "nccl-error"),
])
def test_each_kind_in_another_frameworks_words(text, cause):
    assert causes(text)[:1] == (cause,)


def test_a_log_that_stops_in_ncccl_setup_is_a_hang_and_one_that_goes_on_is_not():
    setup = ("node1:1234:1300 [0] NCCL INFO Channel 00/02 :    0   1\n"
             "node1:1234:1300 [0] NCCL INFO Connected all rings\n"
             "node1:1234:1300 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    assert causes("Epoch 0 starting\n" + setup)[:1] == ("nccl-error",)
    went_on = setup + "Epoch 1/10 loss 2.31\nEpoch 2/10 loss 1.97\nEpoch 3/10 loss 1.52\n"
    assert "nccl-error" not in causes(went_on)
    # a real failure after the setup lines names its own cause first
    assert causes(setup + "RuntimeError: CUDA out of memory.")[:1] == ("out-of-memory",)


def test_driver_version_tells_the_newest_cuda_and_a_newer_build_is_a_mismatch():
    assert driver_cuda("470.82.01") == "11.4"
    assert driver_cuda("525.60.13") == "12.0"
    assert driver_cuda("390.25") == "9.0"
    assert driver_cuda("nonsense") is None
    log = ("torch 2.1.0+cu121\nDriver Version: 470.82.01\n"
           ">>> torch.cuda.is_available()\nFalse")
    assert causes(log)[:1] == ("cuda-version-mismatch",)
    # CUDA 11.x builds run on any 11.x driver (minor-version compatibility)
    assert causes("torch 1.13.1+cu117\nDriver Version: 470.82.01\n>>> torch.cuda.is_available()\nFalse")[:1] == (
        "no-driver",)
    # before CUDA 11, the minor counts: a 10.2 build needs a 440 driver
    assert causes("paddlepaddle-gpu==2.0.2.post102\nDriver Version: 418.87.01\n"
                  "RuntimeError: CUDA error(35)")[:1] == ("cuda-version-mismatch",)


@pytest.mark.parametrize("text, cause", [
    # macOS has no CUDA build at all
    ("Python 3.10 on Darwin arm64\n>>> torch.cuda.is_available()\nFalse", "cpu-build"),
    # WSL1 gives Linux no GPU
    ("Linux DESKTOP-1 4.4.0-19041-Microsoft #1237-Microsoft x86_64 GNU/Linux\n>>> torch.cuda.is_available()\nFalse",
     "no-driver"),
    # CPU-only packages named in a pip list
    ("tensorflow-cpu    2.9.1\nNum GPUs Available:  0", "cpu-build"),
    ("paddlepaddle     2.4.2\npaddleocr        2.6.1\n>>> paddle.device.cuda.device_count()\n0", "cpu-build"),
    ("onnxruntime==1.16.0\nprint(ort.get_device()) # GPU count: 0", "cpu-build"),
    # JAX listing only its CPU device without a reason is a jaxlib without CUDA
    (">>> import jax\n>>> jax.devices()\n[CpuDevice(id=0)]", "cpu-build"),
    # a REPL answer a few lines below the call, with other output between
    ("import tensorflow as tf\ntf.test.is_gpu_available()\n\nreturns:\n\n2.4.0\nFalse", "missing-cuda-libs"),
])
def test_the_setting_orders_the_candidates_for_no_gpu(text, cause):
    assert causes(text)[:1] == (cause,)


def test_the_gpu_variant_of_a_package_clears_its_cpu_flavour():
    log = read_log("paddlepaddle-gpu 2.4.2.post117\npaddlepaddle 2.4.2\nonnxruntime-gpu 1.16\nonnxruntime 1.16\n")
    assert log.setting.cpu_packages == []
    assert log.setting.other_cuda == ("11.7", "paddlepaddle-gpu 2.4.2.post117")
    assert read_log("jaxlib 0.4.20+cuda12.cudnn89").setting.other_cuda[0] == "12.0"
    assert read_log("pip install mxnet-cu102").setting.other_cuda[0] == "10.2"


def test_informational_lines_of_other_frameworks_name_no_cause():
    assert causes("PaddlePaddle works well on 1 GPU.\nPaddlePaddle is installed successfully!") == ()
    assert causes("return torch._C._cuda_getDeviceCount() > 0") == ()
    assert causes("export NCCL_BLOCKING_WAIT=1\nexport NCCL_ASYNC_ERROR_HANDLING=1") == ()


@pytest.mark.parametrize("text, cause", [
    ("RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you "
     "are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu').\n"
     "torch 2.0.1+cpu", "cpu-build"),
    ("torch.cuda.is_available() returns False\ntorch 2.0.1+cu118", "no-driver"),
    ("RuntimeError: Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1. Please use "
     "torch.load with map_location to map your storages to an existing device.", "invalid-device-index"),
    ("lightning_fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [1]\n"
     " But your machine only has: [0]", "invalid-device-index"),
    ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
     "expected, but not set", "process-group-missing"),
    ("RuntimeError: unable to write to file </torch_1234_567890>: No space left on device (28)", "dataloader-shm"),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
     "missing-cuda-libs"),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 17.5 GB, other allocations: 1.2 GB)", "out-of-memory"),
    ("Unable to determine the device handle for GPU0000:01:00.0: Unknown Error", "no-driver"),
])
def test_libraries_on_top_of_a_framework_and_launch_mistakes(text, cause):
    assert causes(text)[:1] == (cause,)


@pytest.mark.parametrize("text, cause", [
    # CUDA runtime error 30 in the wordings of old PyTorch, Caffe/Paddle checks and PyCUDA
    ("THCudaCheck FAIL file=/pytorch/torch/lib/THC/THCGeneral.c line=70 error=30 : unknown error", "no-driver"),
    ("RuntimeError: cuda runtime error (30) : unknown error at /pytorch/torch/lib/THC/THCGeneral.c:70", "no-driver"),
    ("F0420 10:00:00.000 1 init.cc:34] Check failed: error == cudaSuccess (30 vs. 0)", "no-driver"),
    ("pycuda._driver.Error: cuInit failed: unknown error", "no-driver"),
    # an extension op built while no CUDA toolkit was found
    ("RuntimeError: Not compiled with GPU support", "missing-cuda-libs"),
    ("NotImplementedError: Cuda is not availabel", "missing-cuda-libs"),
    # a single-process wrapper asked for several GPUs
    ("AssertionError: MMDataParallel only supports single GPU training, if you need to train with multiple GPUs, "
     "please use MMDistributedDataParallel instead.", "process-group-missing"),
    # no PCI bus visible at all
    ("pcilib: Cannot open /proc/bus/pci\nlspci: Cannot find any working access method.", "no-driver"),
])
def test_more_wordings_of_known_kinds(text, cause):
    assert causes(text)[:1] == (cause,)


@pytest.mark.parametrize("text", [
    # any tool's own "no GPU" wording: each is read as the framework reporting no usable GPU, its cause ordered by
    # the setting (here none is shown, so the build comes first), never a cause of its own
    'level=INFO source=probe.go:88 msg="no compatible GPUs were discovered"',
    "warning: no usable GPU found, layers stay on the host",
    "backend_init: found 0 CUDA devices",
    "NOTICE: No NVIDIA GPU detected. Falling back to CPU.",
    "AppError: the app is not able to use GPU; pass --cpu to run anyway",
    'msg="inference compute" id=0 library=cpu variant="" compute="" driver=0.0',
    "fatal: could not find any usable GPU on this host",
    "warnings.warn: FP16 is not supported on CPU; using FP32 instead",
    "Using device: cpu",
])
def test_any_tools_no_gpu_wording_is_read_as_no_usable_gpu(text):
    found = verdict_from_log(read_log(text))
    assert found.cause_ids[:3] == ("cpu-build", "no-driver", "devices-hidden"), found.cause_ids


def test_falling_back_to_the_cpu_for_want_of_memory_is_memory_not_the_build():
    assert causes('msg="not enough vram left for the model, falling back to CPU only"')[:1] == ("out-of-memory",)


def test_no_gpu_said_by_a_gpu_build_puts_the_driver_first():
    text = "W0101 init.cc:12] Compiled with WITH_GPU, but no GPU found in runtime."
    assert causes(text)[:3] == ("no-driver", "cuda-version-mismatch", "devices-hidden")


@pytest.mark.parametrize("text", [
    "ValueError: this kernel needs compute capability of at least 8.0; the GPU has 7.5",
    "the GPU device is not supported: compute capability 3.0 < 3.5",
])
def test_a_gpu_below_what_the_build_needs_in_other_words(text):
    assert causes(text)[:1] == ("unsupported-compute-capability",)


@pytest.mark.parametrize("text, cause", [
    # an op library without its CUDA kernels; Ollama packaged with CPU runners only
    ("RuntimeError: roi_align_forward_impl: implementation for device cuda:1 not found.", "cpu-build"),
    ('level=INFO source=routes.go:1200 msg="Dynamic LLM libraries" runners="[cpu cpu_avx cpu_avx2]"', "cpu-build"),
    # a build whose CMake found no CUDA toolkit, whatever else the tool then says
    ("-- Looking for a CUDA compiler - NOTFOUND\nmytool: GPU isn't used", "missing-cuda-libs"),
    ("CMake Warning: Could NOT find CUDAToolkit (missing: CUDAToolkit_INCLUDE_DIR)", "missing-cuda-libs"),
    # a bare import failure naming a CUDA library
    ("ImportError: libcublas.so.11", "missing-cuda-libs"),
])
def test_builds_without_gpu_kernels_in_their_tools_words(text, cause):
    assert causes(text)[:1] == (cause,)


def test_ollama_runners_with_a_gpu_runner_and_unrelated_imports_name_no_cause():
    assert causes('msg="Dynamic LLM libraries" runners="[cpu cpu_avx2 cuda_v12 rocm]"') == ()
    assert causes("ImportError: libGL.so.1") == ()


def test_markdown_bold_in_a_paste_is_read_through():
    assert causes("torch.cuda.is_available=**False**")[:1] == ("cpu-build",)
    assert causes("print(torch.cuda.is_available())\n**False**")[:1] == ("cpu-build",)
