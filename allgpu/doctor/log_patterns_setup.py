"""Messages about the setting a run starts in, beside :mod:`allgpu.doctor.log_patterns`: driver and container
warnings (NVML, the NVIDIA Container Toolkit, NGC containers' banners), CUDA context-creation failures by their CUDA
error names, every spelling TensorFlow 0.x-2.x, PyTorch and XLA use for a CUDA library they could not load (Linux
``.so`` and Windows ``.dll``), and the lines a user prints to show that no GPU is available.

Message texts are facts of NVIDIA's tools and of each framework's source. ``also`` lists the other causes the same
message is settled as in public threads, most frequent first.
"""

from __future__ import annotations

import re

from allgpu.doctor.log_patterns import Pattern, _p

I = re.IGNORECASE

SETUP_PATTERNS: tuple[Pattern, ...] = (
    # --- driver and container warnings --------------------------------------------------------------------------
    _p("nvml-init-failed", r"Failed to initialize NVML: (?:Unknown Error|Driver Not Loaded|GPU access blocked)",
       "no-driver", 0.8, "NVML cannot reach the driver (not loaded, or the container lost its device files)"),
    _p("smi-no-nvml", r"NVIDIA-SMI couldn't find libnvidia-ml\.so|libnvidia-ml\.so(?:\.1)?: cannot open shared",
       "no-driver", 1.0, "the driver's NVML library is missing"),
    _p("smi-no-devices", r"^\s*No devices were found\s*$", "no-driver", 0.7,
       "nvidia-smi runs but finds no GPU (driver not bound to it, or none passed to the container/VM)",
       also=("devices-hidden",)),
    _p("toolkit-init-error", r"nvidia-container-cli: (?:initialization error|mount error|detection error)",
       "no-driver", 1.0,
       "the NVIDIA Container Toolkit could not reach the host driver"),
    # A container runtime's GPU flag finding no driver on the host (Singularity/Apptainer --nv: "Could not find any
    # NVIDIA libraries on this host!"; the same said of binaries or of the driver).
    _p("runtime-no-nvidia-libs", r"(?:could not|couldn't|cannot|unable to|failed to) (?:find|locate) (?:any )?"
       r"NVIDIA (?:driver )?(?:libraries|binaries|driver)\b", "no-driver", 1.0,
       "the container runtime found no NVIDIA driver libraries on the host (not installed, or off its search path)",
       flags=I, also=("devices-hidden",)),
    _p("ngc-no-gpu", r"ERROR: No supported GPU\(s\) detected to run this container", "no-driver", 1.0,
       "an NGC container started without a GPU (docker run --gpus all)"),
    _p("ngc-driver-old", r"This container was built for NVIDIA Driver Release [\d.]+ or later|compatibility mode is "
       r"UNAVAILABLE", "cuda-version-mismatch", 0.8, "the host driver is older than the container's CUDA"),
    _p("toolkit-requirement", r"requirement error: unsatisfied condition: cuda\s*>=\s*[\d.]+|"
       r"unsatisfied condition: driver\s*>=", "cuda-version-mismatch", 1.0,
       "the host driver does not support the container image's CUDA"),
    _p("invalid-compute-capability", r"Invalid GPU compute capability", "unsupported-compute-capability", 0.8,
       "TensorFlow could not use the GPU's compute capability", flags=I),
    _p("ngc-gpu-unsupported", r"WARNING: Detected NVIDIA .{2,40} GPU, which is not yet supported in this version of "
       r"the container", "unsupported-compute-capability", 0.8, "the container's CUDA predates this GPU"),
    _p("dso-version-mismatch", r"kernel version [\d.]+ does not match DSO version [\d.]+|"
       r"NVRM: API mismatch", "no-driver", 1.0,
       "the kernel driver and its user-space libraries differ (reboot or reload after a driver upgrade)"),
    _p("stub-libcuda", r"CUDA_ERROR_STUB_LIBRARY|CUDA driver is a stub library|cudaErrorStubLibrary", "no-driver", 1.0,
       "the CUDA toolkit's stub libcuda is loaded instead of the driver's"),
    _p("fabric-not-ready", r"CUDA_ERROR_SYSTEM_NOT_READY|system not yet initialized|cudaErrorSystemNotReady",
       "no-driver", 0.8, "the GPUs are not ready (NVSwitch machines: nvidia-fabricmanager not running)"),
    _p("compat-not-supported", r"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE|cudaErrorCompatNotSupportedOnDevice",
       "cuda-version-mismatch", 1.0, "CUDA forward compatibility is not supported on this GPU: the driver is too old"),
    _p("insufficient-driver-runtime", r"cudaErrorInsufficientDriver|CUDA driver version is insufficient",
       "cuda-version-mismatch", 1.0, "the driver is older than the CUDA runtime"),
    _p("torch-cudnn-version", r"cuDNN version incompatibility: PyTorch was compiled\s+against|"
       r"needs to have matching major version and equal or higher minor version", "cuda-version-mismatch", 1.0,
       "the cuDNN found is not the one the build needs"),
    # --- context creation ---------------------------------------------------------------------------------------
    _p("ctx-create-failed", r"(?:failed to create|could not create|cannot create|unable to create) (?:a )?CUDA "
       r"context|cuCtxCreate(?:_v\d)?\b.*(?:failed|error)|cuDevicePrimaryCtxRetain\b.*(?:failed|error)(?!.*OUT_OF_MEM)",
       "no-driver", 0.6, "the CUDA context could not be created", flags=I,
       also=("memory-held", "cuda-version-mismatch")),
    _p("cuda-not-initialized", r"CUDA_ERROR_NOT_INITIALIZED|cudaErrorInitializationError|CUDA driver initialization "
       r"failed", "no-driver", 0.6, "CUDA failed to initialise", also=("cpu-build", "cuda-version-mismatch")),
    _p("cuda-os-error", r"CUDA_ERROR_OPERATING_SYSTEM|OS call failed or operation not supported on this OS",
       "no-driver", 0.6, "an OS call under CUDA failed (a container or VM without the device files)"),
    _p("devices-unavailable", r"CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable",
       "memory-held", 1.0, "another process holds the GPU (exclusive mode)", also=("no-driver",)),
    # --- kernels built for another architecture, loader workers -------------------------------------------------
    _p("invalid-device-function", r"invalid device function|cudaErrorInvalidDeviceFunction",
       "unsupported-compute-capability", 0.8, "the kernels were built for another GPU architecture (nvcc -arch, "
       "TORCH_CUDA_ARCH_LIST, a build made on another machine)", flags=I, also=("cuda-version-mismatch",)),
    _p("nvcc-unsupported-arch", r"nvcc fatal\s*: Unsupported gpu architecture '(?:compute|sm)_\d+'",
       "unsupported-compute-capability", 0.7, "the CUDA toolkit cannot build kernels for the architecture asked for",
       also=("cuda-version-mismatch",)),
    _p("loader-exited", r"DataLoader worker \(pid\(?s?\)? [\d, ]+\) exited unexpectedly", "dataloader-shm", 0.6,
       "a DataLoader worker died without a message (in containers mostly /dev/shm too small)", flags=I),
    # --- CUDA libraries: TensorFlow 0.x/1.x, Windows, PyTorch, XLA spellings -----------------------------------------
    _p("tf1-could-not-find-dll", r"Could not find '((?:cu|nv|cudnn)\w*\.dll)'", "missing-cuda-libs", 1.0,
       "TensorFlow 1.x on Windows could not find a CUDA DLL on %PATH%", "library"),
    _p("tf0-couldnt-open", r"Couldn't open CUDA library (\S+?)(?:\. LD_LIBRARY_PATH|\s|$)", "missing-cuda-libs", 1.0,
       "TensorFlow 0.x/1.x could not open a CUDA library", "library"),
    _p("could-not-locate-lib", r"Could not locate (\S+?\.(?:dll|so[\d.]*))(?:\W|$)", None, 0,
       "cuDNN 8+ could not find one of its sub-libraries", "library"),
    _p("zlibwapi", r"Could not locate zlibwapi\.dll|zlibwapi\.dll.*not found", "missing-cuda-libs", 1.0,
       "cuDNN 8.3+ on Windows needs zlibwapi.dll on %PATH%"),
    _p("torch-win-dll", r"Error loading \"[^\"]*?\\?([\w.-]+\.dll)\" or one of its dependencies", None, 0,
       "PyTorch on Windows could not load one of its DLLs", "library"),
    _p("cannot-open-so", r"(?:ImportError|OSError): (lib[\w+-]*\.so[\w.]*): cannot open shared object file", None, 0,
       "a shared library the framework needs is not on the loader path", "library"),
    _p("xla-libdevice", r"Can't find libdevice directory|libdevice not found at|Couldn't (?:get|find) ptxas|"
       r"ptxas (?:not found|could not be found)|Couldn't invoke ptxas", "missing-cuda-libs", 0.8,
       "XLA cannot find the CUDA toolkit's libdevice/ptxas (set XLA_FLAGS=--xla_gpu_cuda_data_dir)"),
    _p("win-dll-load-failed", r"ImportError: DLL load failed(?: while importing _pywrap_tensorflow_internal)?",
       "missing-cuda-libs", 0.6, "Windows could not load a DLL the framework imports (CUDA/cuDNN or the MSVC "
       "runtime)", also=("cuda-version-mismatch",)),
    # --- a CUDA math library that starts but fails inside: its handle, plan or first call -----------------------
    # Settled in public threads mostly as the framework's CUDA libraries not matching the GPU or each other (a build
    # without the GPU's architecture, pip-installed cuSOLVER/cuBLAS of another CUDA), else as memory the framework
    # reserved up front leaving none for the library's workspace.
    _p("cublas-execution-failed", r"CUBLAS_STATUS_(?:EXECUTION_FAILED|ARCH_MISMATCH|NOT_SUPPORTED|INTERNAL_ERROR)",
       "cuda-version-mismatch", 0.7, "cuBLAS failed inside a call (its kernels do not match this GPU or CUDA)",
       also=("unsupported-compute-capability", "memory-held")),
    _p("math-lib-internal", r"(?:cusolverDnCreate|gpusolverDnCreate|cusparseCreate|gpusparseCreate|cufftPlan\w*|"
       r"cufftMakePlan\w*)\b.*?(?:internal error|INTERNAL_ERROR|failed)|cuSolver internal error|"
       r"CUSOLVER_STATUS_INTERNAL_ERROR|CUFFT_INTERNAL_ERROR", "cuda-version-mismatch", 0.7,
       "a CUDA math library (cuSOLVER, cuSPARSE, cuFFT) could not create its handle or plan",
       also=("memory-held",)),
    # TensorFlow's cuBLAS call failing: settled mostly as memory another process or TensorFlow's own up-front
    # reservation took, else as a GPU the build has no kernels for (Ampere with TensorFlow 1.x).
    _p("tf-blas-launch", r"Blas (?:x|S|D|H|C|Z)?GE(?:MM|MV)(?: launch failed|Batched launch failed)|"
       r"Blas (?:xGEMM|SGEMM|GEMM)\w* launch failed", "memory-held", 0.7,
       "TensorFlow's cuBLAS call failed to launch (no memory left for cuBLAS, or no kernels for this GPU)",
       also=("unsupported-compute-capability", "cuda-version-mismatch")),
    # JAX asked for the GPU backend that a CPU-only jaxlib does not have.
    _p("jax-unknown-backend", r"Unknown backend:? '?(?:gpu|cuda)'?|Backend '(?:gpu|cuda)' (?:is not in the list|"
       r"requested, but no platforms)|no platforms that are instances of (?:gpu|cuda) are present", "cpu-build", 0.8,
       "JAX has no GPU backend (a CPU-only jaxlib, or its CUDA plugin did not load)",
       also=("missing-cuda-libs", "no-driver")),
    # --- no GPU available: what a user prints ---------------------------------------------------------------------
    # every binding's spelling: Python's torch.cuda.is_available, R's cuda_is_available, C++'s and Rust's
    # (tch) cuda::is_available / Cuda::is_available, Julia's CUDA.functional, DJL's CudaUtils.hasCuda
    _p("gpu-unavailable-flag", r"(?:[Cc]uda(?:[._]|::)is_available|is_gpu_available|\bCUDA\.functional|"
       r"CudaUtils\.hasCuda)(?:\(\))?\)*['\"]?\)*;?\s*(?:[:=#>-]+\s*)?"
       r"(False|True)?\s*$|"
       r"list_physical_devices\(['\"]GPU['\"]\)\)?\s*$",
       None, 0, "the framework reports no usable GPU", "unavailable-flag"),
    _p("gpu-unavailable-text", r"\b(?:CUDA|GPU)s? (?:is |are )?not available\b|\bNum(?:ber of)? GPUs?(?: Available)?"
       r"\s*[:=]\s*0\b|\bNo GPUs? (?:found|available|detected|devices? (?:found|available))|\bcuda available\W*"
       r"(?:False|No)\b|\bGPU available\W{1,3}False\b|list_physical_devices\(['\"]GPU['\"]\)\)?\s*\W{0,4}\[\]", None, 0,
       "the framework reports no usable GPU", "unavailable-text", flags=I),
    _p("tf-device-list-cpu", r"device_type: \"CPU\"|device_type='CPU'", None, 0,
       "TensorFlow lists a CPU device (no GPU unless one is listed too)", "device-list"),
    _p("tf-device-list-gpu", r"device_type: \"(?:XLA_)?GPU\"|device_type='(?:XLA_)?GPU'|physical_device:GPU:\d", None,
       0, "TensorFlow lists a GPU device", "device-list"),
)
