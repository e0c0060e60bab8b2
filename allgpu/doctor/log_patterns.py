"""The messages ``allgpu doctor --log`` knows, written from the formats TensorFlow (1.x to 2.21), JAX/XLA,
PyTorch and NCCL print (message texts are facts of each framework's source).

Each :class:`Pattern` is one message; ``cause`` is a documented cause id (:mod:`allgpu.doctor.causes`) or None
for a device fact, and ``weight`` says how strongly the message alone points at the cause: 1.0 settles it, less
only supports it. Messages that need a value read from them (a library name, memory figures) carry a
``kind`` that :mod:`allgpu.doctor.log_reader` interprets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `2019-07-13 22:58:51.029: I tensorflow/core/...cc:142] msg`, `I0000 00:00:1712.34   123 cuda_dnn.cc:522] msg`,
# `W external/local_xla/xla/...cc:447] msg`, Windows `I C:\tf_jenkins\...\gpu_device.cc:1030] msg`.
PREFIX = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: )?(?P<level>[IWEF])(?:\d{4} \d\d:\d\d:[\d.]+\s+\d+)?\s+"
    r"(?P<src>\S+?\.(?:cc|cpp|h|py)):(?P<line>\d+)\]\s?(?P<msg>.*)$"
)


@dataclass(frozen=True)
class Pattern:
    """One known message.

    Attributes:
        id: stable identifier, e.g. ``"tf-dlopen-failed"``.
        regex: searched in each line (case-sensitive unless compiled otherwise).
        cause: documented cause id, or None for a device fact.
        weight: 0-1, how strongly the message alone points at ``cause``.
        kind: how the reader treats it beyond the cause: ``""`` (plain), ``"library"`` (group 1 is a library
            name), ``"jax-backend"`` (group 1 is JAX's reason), ``"torch-oom"``, ``"tf-free-memory"``,
            ``"cvd"`` (group 1 is a CUDA_VISIBLE_DEVICES value), ``"no-device"``, and for facts
            ``"present"``, ``"registered"``, ``"strategy"``, ``"jax-devices"``, ``"nccl-ranks"``, ``"skipped"``;
            the fallback's family signs (:mod:`allgpu.doctor.log_families`) also use ``"status"``.
        what: what the message means, one line.
        also: other causes public threads settled the same message as, most frequent first: the verdict names
            them after ``cause`` as candidates when nothing else in the log decides between them.
    """

    id: str
    regex: re.Pattern[str]
    cause: str | None
    weight: float
    kind: str
    what: str
    also: tuple[str, ...] = ()


def _p(pid: str, regex: str, cause: str | None, weight: float, what: str, kind: str = "", flags: int = 0,
       also: tuple[str, ...] = ()) -> Pattern:
    return Pattern(pid, re.compile(regex, flags), cause, weight, kind, what, also)


I = re.IGNORECASE
PATTERNS: tuple[Pattern, ...] = (
    # --- device facts -------------------------------------------------------------------------------------------
    _p("tf-found-device", r"Found device (\d+) with properties", None, 0, "TensorFlow found a GPU", "present"),
    _p("tf-adding-visible", r"Adding visible gpu devices: ([\d, ]+)", None, 0, "TensorFlow registers GPUs",
       "registered"),
    _p("tf-created-device", r"Creat(?:ed|ing) (?:TensorFlow )?device \(?/(?:job:\w+/replica:\d+/task:\d+/)?"
       r"(?:device:)?GPU:(\d+)", None, 0, "TensorFlow created a GPU device", "registered", I),
    _p("tf-skipping-gpus", r"Skipping registering GPU devices", None, 0, "TensorFlow registered no GPU", "skipped"),
    _p("strategy-devices", r"Number of devices: (\d+)|num_replicas_in_sync\W{1,4}(\d+)", None, 0,
       "replicas of the strategy", "strategy"),
    _p("strategy-using", r"Using (?:Mirrored|MultiWorkerMirrored|OneDevice|CentralStorage)Strategy with devices? "
       r"\(?([^)\n]*)", None, 0, "devices the strategy runs on", "strategy-list"),
    _p("jax-devices", r"\[((?:(?:Cuda|Gpu|StreamExecutorGpu|Cpu|Tpu)Device\(id=\d+[^)]*\)|(?:cuda|gpu|cpu|tpu)"
       r"\(id=\d+\))(?:,\s*(?:(?:Cuda|Gpu|StreamExecutorGpu|Cpu|Tpu)Device\(id=\d+[^)]*\)|(?:cuda|gpu|cpu|tpu)"
       r"\(id=\d+\)))*)\]", None, 0, "devices JAX lists", "jax-devices"),
    _p("xla-streamexecutor", r"StreamExecutor device \((\d+)\): (?!Host|<undefined>)", None, 0,
       "XLA lists a CUDA device", "present"),
    _p("lightning-gpu", r"GPU available: (True|False)(?: \(\w+\))?, used: (True|False)", None, 0,
       "PyTorch Lightning's device summary", "lightning"),
    _p("lightning-cvd", r"LOCAL_RANK: \d+ - CUDA_VISIBLE_DEVICES: \[([\d,\s]+)\]", None, 0,
       "GPUs PyTorch Lightning sees", "registered"),
    _p("non-gpu-strategy", r"There are non-GPU devices in `tf\.distribute\.Strategy`", None, 0,
       "the strategy runs on non-GPU devices", "strategy-cpu"),
    _p("nccl-init-complete", r"NCCL INFO .*nranks (\d+).*Init COMPLETE", None, 0, "NCCL joined the GPUs",
       "nccl-ranks"),
    _p("nvidia-smi-row", r"^\|\s+(\d+)\s+(?:NVIDIA|Tesla|GeForce|Quadro|TITAN|RTX|A\d|H\d|L\d|V\d)[^|]*\|",
       None, 0, "a GPU in nvidia-smi's table", "present"),
    # --- no-driver ----------------------------------------------------------------------------------------------
    _p("tf-no-cuda-drivers", r"Could not find cuda drivers on your machine", "no-driver", 1.0,
       "TensorFlow found no libcuda (no NVIDIA driver)"),
    _p("tf-kernel-driver", r"kernel driver does not appear to be running on this host", "no-driver", 1.0,
       "no NVIDIA kernel module (/proc/driver/nvidia/version is missing)"),
    _p("torch-no-driver", r"Found no NVIDIA driver on your system", "no-driver", 1.0,
       "PyTorch found no NVIDIA driver"),
    _p("smi-no-driver", r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "no-driver",
       1.0, "nvidia-smi cannot reach the driver"),
    _p("container-no-gpu", r"could not select device driver .{0,12}with capabilities: \[\[gpu\]\]|"
       r"The NVIDIA Driver was not detected\. +GPU functionality will not be available", "no-driver", 1.0,
       "the container was started without GPU support (NVIDIA Container Toolkit, --gpus)"),
    _p("libcuda-missing", r"libcuda\.so\.1: cannot open shared object file", "no-driver", 1.0,
       "the driver library libcuda is missing"),
    _p("nvml-version-mismatch", r"Driver/library version mismatch", "no-driver", 1.0,
       "the loaded kernel driver and its libraries differ (reboot after a driver upgrade)"),
    _p("cuinit-303", r"failed call to cuInit: (?:UNKNOWN ERROR \(303\)|CUDA_ERROR_UNKNOWN)", "no-driver", 0.6,
       "cuInit failed: driver missing or not usable here", also=('cuda-version-mismatch',)),
    _p("torch-driver-init", r"CUDA driver initialization failed, you might not have a CUDA gpu", "no-driver", 0.7,
       "PyTorch could not start the CUDA driver"),
    # --- devices-hidden -----------------------------------------------------------------------------------------
    _p("cuda-no-device", r"CUDA_ERROR_NO_DEVICE|no CUDA-capable device is detected", "devices-hidden", 0.6,
       "CUDA sees no device", "no-device", also=('no-driver',)),
    _p("cvd-set", r"CUDA_VISIBLE_DEVICES['\"]?\]?\s*=\s*((['\"]?)[-\d, ]*\2)(?=\s|$|;|&|\))", "devices-hidden", 0,
       "CUDA_VISIBLE_DEVICES set in the run", "cvd"),
    _p("torch-no-gpus", r"No (?:CUDA|HIP) GPUs are available", "devices-hidden", 0.6,
       "PyTorch sees no (or fewer) GPUs than the script asks for", also=('no-driver',)),
    _p("torch-cuda-unknown", r"CUDA unknown error(?: - this may be due to an incorrectly set up environment)?",
       "no-driver", 0.6, "CUDA failed to start with an unknown error (a driver left unusable, e.g. after suspend)",
       also=('devices-hidden',)),
    _p("cuda-error-30", r"\(30 vs\. 0\)|failed with error #30\b|cudaErrorUnknown\b|cuda runtime error \(30\)|"
       r"\berror=30 : unknown error|cuInit failed: unknown error", "no-driver", 0.6,
       "the CUDA runtime failed with an unknown error (error 30): the driver is not usable here"),
    _p("tf-set-visible-empty", r"set_visible_devices\(\s*\[\s*\]", "devices-hidden", 1.0,
       "tf.config.set_visible_devices([]) hides every GPU"),
    # --- missing-cuda-libs --------------------------------------------------------------------------------------
    _p("tf-dlopen-failed", r"Could not (?:load dynamic library|dlopen library|load library|open) '?"
       r"((?:lib)?[\w+-]+(?:\.so[\w.]*|\.dll))'?", "missing-cuda-libs", 1.0,
       "a CUDA library failed to load", "library"),
    _p("libcuda-unversioned", r"(?<![\w.])libcuda\.so: cannot open shared object file", "missing-cuda-libs", 0.8,
       "the unversioned libcuda.so link that cuDNN loads is not on the loader path (libcuda.so.1 may be there)"),
    _p("tf-cannot-dlopen", r"Cannot dlopen some GPU libraries", "missing-cuda-libs", 1.0,
       "TensorFlow skipped the GPUs because CUDA libraries are missing"),
    _p("lib-not-found", r"(lib(?:cudart|cublas|cublasLt|cudnn\w*|cufft|curand|cusolver|cusparse|nvrtc|nvJitLink|"
       r"nccl|cupti)[\w.]*): cannot open shared object file", "missing-cuda-libs", 1.0,
       "a CUDA library is not on the loader path"),
    _p("dnn-not-found", r"DNN library is not found|Unable to load cuDNN|cuDNN (?:library )?(?:was )?not found",
       "missing-cuda-libs", 1.0, "cuDNN could not be loaded", flags=I),
    _p("jax-backend-failed", r"(?:Unable to initialize backend '(?:cuda|gpu)'|CUDA backend failed to initialize|"
       r"Backend '(?:cuda|gpu)' failed to initialize): (.*)", None, 0, "JAX's CUDA backend did not start", "jax-backend"),
    # --- cuda-version-mismatch ----------------------------------------------------------------------------------
    _p("driver-insufficient", r"driver version is insufficient for CUDA runtime version|"
       r"CUDA_ERROR_INSUFFICIENT_DRIVER", "cuda-version-mismatch", 1.0, "the driver is older than the CUDA runtime"),
    _p("torch-driver-too-old", r"The NVIDIA driver on your system is too old", "cuda-version-mismatch", 1.0,
       "the driver is older than PyTorch's CUDA"),
    _p("cudnn-older", r"Loaded runtime CuDNN library: .* but source was compiled with", "cuda-version-mismatch", 1.0,
       "the cuDNN loaded is older than the one TensorFlow was built with"),
    _p("jax-version-found", r"Found (?:CUDA|cuDNN|cuSOLVER|cuBLAS|cuFFT|cuSPARSE|NCCL|CUPTI|cuPTI) version \d+, "
       r"but JAX was built against version \d+", "cuda-version-mismatch", 1.0,
       "a CUDA library is older than the one JAX was built with"),
    _p("jax-outdated", r"Outdated \w+ installation found", "cuda-version-mismatch", 1.0,
       "JAX found an outdated CUDA component"),
    _p("ptx-unsupported", r"CUDA_ERROR_UNSUPPORTED_PTX_VERSION|PTX was compiled with an unsupported toolchain",
       "cuda-version-mismatch", 1.0, "the driver cannot run PTX from a newer CUDA"),
    _p("driver-mismatch", r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|unsupported display driver / cuda driver combination|"
       r"forward compatibility was attempted on non supported HW", "cuda-version-mismatch", 1.0,
       "driver and CUDA do not fit together"),
    # --- unsupported-compute-capability -------------------------------------------------------------------------
    _p("tf-ignoring-gpu", r"Ignoring (?:visible )?gpu device \(device:", "unsupported-compute-capability",
       1.0, "TensorFlow ignores a GPU below its minimum compute capability", flags=I),
    _p("torch-sm-incompatible", r"with CUDA capability sm_\d+ is not compatible with the current PyTorch "
       r"installation", "unsupported-compute-capability", 1.0, "PyTorch has no kernels for this GPU"),
    _p("no-kernel-image", r"no kernel image is available for execution(?: on the (?:device|driver))?|"
       r"CUDA_ERROR_NO_BINARY_FOR_GPU",
       "unsupported-compute-capability", 1.0, "the build has no kernels for this GPU's architecture"),
    _p("torch-gpu-too-old", r"PyTorch no longer supports this GPU because it is too old",
       "unsupported-compute-capability", 1.0, "the GPU is below PyTorch's minimum"),
    _p("min-capability", r"No CUDA device found with minimum required compute capability",
       "unsupported-compute-capability", 1.0, "no GPU meets the minimum compute capability"),
    # --- single-device-strategy ---------------------------------------------------------------------------------
    _p("strategy-not-used", r"Device is available but not used by distribute strategy", "single-device-strategy",
       1.0, "a GPU exists that the strategy leaves out"),
    _p("one-device-strategy", r"OneDeviceStrategy", "single-device-strategy", 0, "OneDeviceStrategy in use",
       "one-device"),
    # --- memory-held --------------------------------------------------------------------------------------------
    _p("torch-cublas-create", r"CUBLAS_STATUS_(?:NOT_INITIALIZED|ALLOC_FAILED) when calling `?cublasCreate|"
       r"Create cublas handle failed", "out-of-memory", 1.0,
       "cuBLAS found no memory for its handle while the job's tensors filled the GPU",
       also=('memory-held', 'cuda-version-mismatch')),
    _p("cublas-not-init", r"CUBLAS_STATUS_NOT_INITIALIZED(?! when calling)|CUBLAS_STATUS_ALLOC_FAILED(?! when calling)",
       "memory-held", 1.0, "cuBLAS could not allocate its handle (memory taken)", also=('out-of-memory',)),
    _p("cudnn-conv-algorithm", r"Failed to get convolution algorithm\. This is probably because cuDNN failed to "
       r"initialize", "memory-held", 1.0, "cuDNN could not start (TensorFlow reserved the memory it needs)",
       also=('cuda-version-mismatch',)),
    _p("driver-api-oom", r"\bCUDA_ERROR_OUT_OF_MEMORY\b", "memory-held", 0.6,
       "a CUDA driver call (context creation) found no memory left", also=('out-of-memory',)),
    _p("torch-cudnn-not-init", r"(?<!handle: )CUDNN_STATUS_NOT_INITIALIZED", "cuda-version-mismatch", 0.6,
       "PyTorch could not start cuDNN (usually a cuDNN/CUDA that does not match the build; sometimes no memory)",
       also=('out-of-memory', 'memory-held')),
    _p("xla-driver-hint", r"Possibly insufficient driver version: [\d.]+", "cuda-version-mismatch", 0.8,
       "XLA found the driver too old for its cuDNN"),
    _p("xla-memory-usage", r"Memory usage: (\d+) bytes free, (\d+) bytes total", None, 0,
       "memory free when XLA failed to start cuDNN"),
    _p("cudnn-handle", r"Could not create cudnn handle: CUDNN_STATUS_(?:INTERNAL_ERROR|ALLOC_FAILED|NOT_INITIALIZED)",
       "memory-held", 1.0, "cuDNN could not allocate its handle (memory taken)",
       also=('cuda-version-mismatch', 'missing-cuda-libs')),
    _p("ctx-retain-oom", r"cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY|cuCtxCreate.*OUT_OF_MEMORY",
       "memory-held", 1.0, "no memory left even to create a CUDA context"),
    _p("tf-prealloc-failed", r"failed to allocate [\d.]+\w? \(\d+ bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY",
       "memory-held", 0.8, "TensorFlow could not reserve its memory: something else holds it", also=('out-of-memory',)),
    _p("devices-busy", r"all CUDA-capable devices are busy or unavailable|CUDA_ERROR_DEVICE_UNAVAILABLE",
       "memory-held", 1.0, "another process holds the GPU (exclusive mode)", also=('no-driver',)),
    _p("tf-free-memory", r"(?:totalMemory|Total memory): ([\d.]+)([KMGT]i?B).*?(?:freeMemory|Free memory): "
       r"([\d.]+)([KMGT]i?B)", None, 0, "memory free when TensorFlow started", "tf-free-memory"),
    _p("tf-free-memory-next", r"^Free memory: ([\d.]+)([KMGT]i?B)", None, 0, "memory free (TF 0.x/1.x)",
       "tf-free-memory-next"),
    _p("tf-total-memory", r"^Total memory: ([\d.]+)([KMGT]i?B)\s*$", None, 0, "total memory (TF 0.x/1.x)",
       "tf-total-memory"),
    # --- out-of-memory ------------------------------------------------------------------------------------------
    _p("tf-oom-tensor", r"OOM when allocating tensor", "out-of-memory", 1.0, "TensorFlow ran out of GPU memory"),
    _p("tf-resource-exhausted", r"ResourceExhaustedError|Resource exhausted: OOM|RESOURCE_EXHAUSTED: "
       r"(?:Out of memory|Failed to allocate)", "out-of-memory", 1.0, "the allocator ran out of memory"),
    _p("tf-bfc-oom", r"ran out of memory trying to allocate(?!.*not a failure)", "out-of-memory", 1.0,
       "the BFC allocator ran out of memory"),
    _p("torch-oom", r"(?:CUDA out of memory\. |^\W*)Tried to allocate (.*)", "out-of-memory", 1.0,
       "PyTorch ran out of GPU memory", "torch-oom", flags=I),
    _p("torch-oom-plain", r"CUDA out of memory(?!\. Tried to allocate)", "out-of-memory", 1.0,
       "PyTorch ran out of GPU memory", "oom-where", flags=I, also=('memory-held',)),
    _p("cuda-error-oom", r"CUDA error: out of memory", "out-of-memory", 1.0, "a CUDA call ran out of memory",
       "oom-where", also=('memory-held',)),
    # --- input-bound --------------------------------------------------------------------------------------------
    _p("lightning-workers", r"does not have many workers which may be a bottleneck", "input-bound", 1.0,
       "the DataLoader has too few workers for the GPU"),
    _p("profiler-input-bound", r"(?:HIGHLY|moderately) input-bound|is input-bound because", "input-bound", 1.0,
       "the profiler found the step waiting for input", flags=I),
    # --- nccl-error ---------------------------------------------------------------------------------------------
    _p("nccl-error", r"NCCL error|NCCL failure|nccl\w*Error\b|ncclSystemError|ncclUnhandledCudaError|"
       r"ncclInternalError|ncclRemoteError|NCCL communicator was aborted", "nccl-error", 1.0, "NCCL failed", flags=I),
    _p("nccl-socket", r"WARN (?:Net : )?(?:Socket creation failed|Call to connect (?:failed|timeout|returned)|"
       r"Connect to \S+ failed|Call to (?:recv|write) failed)", "nccl-error", 1.0,
       "NCCL could not open or keep a socket between ranks (interface, firewall, IPv4/IPv6)"),
    _p("nccl-shm", r"Error while creating shared memory segment|Call to (?:posix_fallocate|shm_open) failed",
       "nccl-error", 1.0, "NCCL could not create its shared-memory segment (/dev/shm too small or not writable)"),
    _p("nccl-missing", r"Distributed package doesn't have NCCL built in|NCCL is not available", "nccl-error", 1.0,
       "this PyTorch build has no NCCL"),
    _p("nccl-warn", r"NCCL WARN", "nccl-error", 0.5, "NCCL warned (alone, not enough: some warnings are benign)"),
    _p("nccl-watchdog", r"Watchdog caught collective operation timeout", "nccl-error", 1.0,
       "a collective hung until the watchdog stopped it"),
    # --- launch and loader failures ------------------------------------------------------------------------------
    _p("port-in-use", r"Address already in use|EADDRINUSE|errno: 98\b|failed to listen on any local network address",
       "port-in-use", 1.0, "the rendezvous port is taken"),
    _p("no-process-group", r"Default process group (?:has not been|is not) initialized|SyncBatchNorm is only "
       r"supported within torch\.nn\.parallel\.DistributedDataParallel", "process-group-missing", 1.0,
       "a distributed call ran in a process outside any process group"),
    _p("loader-shm", r"DataLoader worker \(pid \d+\) is killed by signal: Bus\b|bus error encountered in worker|"
       r"dataloader's workers are out of shared memory", "dataloader-shm", 1.0,
       "DataLoader workers ran out of shared memory", flags=I),
    _p("invalid-ordinal", r"invalid device ordinal", "invalid-device-index", 1.0,
       "the script asked for a GPU index that does not exist"),
    # --- cpu-build ----------------------------------------------------------------------------------------------
    _p("torch-not-compiled", r"Torch not compiled with CUDA enabled", "cpu-build", 1.0, "PyTorch is a CPU build"),
    _p("jaxlib-no-cuda", r"CUDA-enabled jaxlib is not installed", "cpu-build", 1.0, "jaxlib is a CPU build"),
    _p("jax-fallback-cpu", r"No GPU/TPU found, falling back to CPU", "cpu-build", 0.8,
       "JAX found no GPU backend"),
    _p("torch-cpu-version", r"\b\d+\.\d+\.\d+\+cpu\b", "cpu-build", 0.8, "a +cpu build of PyTorch"),
    _p("torch-version-cuda", r"torch\.version\.cuda\)?\s*(?:[:=#-]+\s*)?(None)?\s*$", "cpu-build", 0,
       "PyTorch's CUDA version (None: a CPU build)", "version-cuda"),
    _p("torch-built-none", r"CUDA used to build PyTorch: None", "cpu-build", 1.0, "PyTorch was built without CUDA"),
    _p("tf-built-with-cuda", r"is_(?:buil[dt]|compiled)_with_cuda\(\)\)?\s*(?:[:=#-]*\s*)?((?i:False))?",
       "cpu-build", 0,
       "the CUDA build flag (TensorFlow is_built_with_cuda, Paddle is_compiled_with_cuda)", "built-with-cuda"),
)
