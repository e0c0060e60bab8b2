"""Messages of frameworks beyond TensorFlow, JAX and PyTorch (PaddlePaddle, ONNX Runtime, MXNet, Caffe, CuPy, Numba,
XGBoost/LightGBM, llama.cpp), and of runs that hang rather than fail: NCCL watchdog and collective timeouts, Horovod
stalls, a rendezvous that never completes.

Grouped by the cause kind each wording belongs to (no GPU build, a CUDA library not found, out of memory, a version
mismatch, a container started without GPUs, a hang between GPUs) rather than by framework: a new framework's
wording of a known kind goes beside its siblings. Message texts are facts of each framework's source (Paddle's
``gpu_resources.cc`` / ``dynamic_loader.cc`` / allocator messages, ONNX Runtime's provider bridge, MXNet's
``storage`` managers, Caffe's ``device_alternate.hpp``, PyTorch's ``ProcessGroupNCCL.cpp``). ``also`` lists the
other causes the same message is settled as in public threads, most frequent first.
"""

from __future__ import annotations

import re

from allgpu.doctor.log_patterns import Pattern, _p

I = re.IGNORECASE

FRAMEWORK_PATTERNS: tuple[Pattern, ...] = (
    # --- a build without CUDA -----------------------------------------------------------------------------------
    # Paddle's CUDAPlace binding (pybind/place.cc): the CPU build's branch, and the GPU build's when it counts no GPU.
    _p("paddle-cpu-only", r"Cannot use CUDAPlace in CPU only version|PaddlePaddle is not compiled with CUDA|"
       r"The device should not be '?gpu'?, since PaddlePaddle is not compiled with CUDA|Cannot use GPU because you "
       r"have installed CPU version PaddlePaddle", "cpu-build", 1.0,
       "PaddlePaddle is the CPU package (paddlepaddle, not paddlepaddle-gpu)"),
    _p("paddle-no-gpu", r"Cannot use GPU because there is no GPU detected on your machine", None, 0,
       "PaddlePaddle's GPU build counts no GPU", "zero-devices"),
    _p("mxnet-cpu-only", r"Compile with USE_CUDA=1 to enable GPU usage", "cpu-build", 1.0,
       "MXNet is a CPU build (mxnet, not mxnet-cu<version>)"),
    _p("caffe-cpu-only", r"Cannot use GPU in CPU-only Caffe|CPU-only Mode", "cpu-build", 1.0,
       "Caffe was built with CPU_ONLY"),
    # C++/CUDA extension ops (maskrcnn-benchmark, detectron2, Deformable-DETR's make.sh, whose message misspells
    # "availabel") built while no CUDA
    # toolkit was found (CUDA_HOME unset): settled as the toolkit missing at build time.
    _p("extension-without-cuda", r"Not compiled with GPU support|NotImplementedError: Cuda is not availab(?:le|el)",
       "missing-cuda-libs", 0.8, "a CUDA extension was built without the CUDA toolkit (CUDA_HOME unset when it "
       "compiled)", also=("cpu-build",)),
    _p("not-compiled-with-gpu", r"\b(?:not|never) (?:compiled|built) with (?:CUDA|GPU|cuda|gpu)(?: support| enabled)?|"
       r"\b(?:compiled|built) without (?:CUDA|GPU) support|GPU Tree Learner was not enabled in this build|"
       r"not compiled with GPU offload support", "cpu-build", 0.9,
       "the library was built without GPU support (XGBoost, LightGBM, llama.cpp, a source build)"),
    _p("ort-provider-missing", r"Specified provider '?CUDAExecutionProvider'? is not in available provider names",
       "cpu-build", 0.8, "ONNX Runtime is the CPU package (onnxruntime, not onnxruntime-gpu)",
       also=("missing-cuda-libs",)),
    _p("gpu-count-zero", r"(?:num_gpus|device_count|get_device_count|cuda_device_count|gpu_count)"
       r"\(\)\)?\s*(?:[:=#]+\s*|->\s*)?(0)?\s*$|\bGPU count\s*[:=]\s*(0)\b", None, 0,
       "the framework counts no GPU", "count-flag"),
    # "no GPU" said by a library on top of a framework (torch.load, Lightning, Transformers, Ollama) or in words
    _p("no-gpu-said", r"deserialize object on a CUDA device but torch\.cuda\.is_available\(\) is False|"
       r"But your machine only has: \[\]|accelerator is not available|No supported gpu backend found|"
       r"can only be used on CUDA(?: or \w+)? devices|no compatible GPUs were discovered|"
       r"is_available\(\)\)?`?\s+(?:returns?|returned|is|gives|outputs?|shows?|still)\s+`?False|"
       # any tool's own "no GPU" wording (Ollama, llama.cpp/ggml, web UIs, apps that fall back to the CPU)
       r"\bno (?:usable|compatible|supported|nvidia|cuda|gpu) (?:gpus?|devices?|cards?|resources?)\b(?: \w+){0,2}? "
       r"(?:found|detected|discovered|available)|\bfound 0 (?:CUDA |GPU |NVIDIA )?(?:devices?|GPUs?)\b|"
       r"\b0 (?:CUDA |NVIDIA )?(?:GPUs?|CUDA devices?) (?:found|detected|available)\b|"
       r"^(?!.*(?:memory|vram|\bRAM\b)).*fall(?:s|ing)? ?back (?:to|on) (?:the )?CPU|"
       r"\binference compute\b.*\blibrary=cpu\b|"
       r"is not able to use (?:the )?GPU|Device mapping: no known devices|\bGPU (?:was |is )?not (?:found|detected)\b|"
       r"(?:could not|couldn't|cannot|can't|unable to|failed to) (?:find|detect|locate) (?:any |a )?(?:compatible |"
       r"usable |supported |suitable |NVIDIA |CUDA )?(?:GPU|CUDA device)s?\b|Failed to infer device type|"
       r"FP16 is not supported on CPU|\bGPU (?:isn't|is not|wasn't|was not) used\b|"
       r"^\W*(?:using|running on|selected|chosen)? ?(?:the )?device\W{0,3}['\"]?cpu['\"]?\W*$|"
       r"^\W*(?:using|running on)? ?device[_ ]type\s+['\"]?cpu['\"]?\W*$|"  # not TensorFlow's 'device_type: "CPU"'
       r"\b(?:GPU|CUDA)s?(?: devices?)? (?:is |are |was )?(?:not |in|un)accessible\b|"
       r"\b(?:GPU|CUDA)s?(?: devices?| acceleration| support| backend| mode)? (?:is |are |was |were )?(?:not available|"
       r"unavailable|unusable)\b|"
       # an argparse dump of the PyTorch examples' `args.cuda = not args.no_cuda and torch.cuda.is_available()`
       r"\bNamespace\(.*(?:\bcuda=False\b.*\bno_cuda=False\b|\bno_cuda=False\b.*\bcuda=False\b)",
       None, 0,
       "the framework (or a library on it) reports no usable GPU", "unavailable-text", flags=I),
    # --- a CUDA library not found -------------------------------------------------------------------------------
    _p("paddle-dynlib", r"The third-party dynamic library \(([^)\s]+)\) that Paddle depends on is not configured",
       None, 0, "PaddlePaddle could not load a CUDA library", "library"),
    _p("paddle-cannot-load", r"Cannot load (?:cudnn|cublas|curand|cusolver|cufft|nccl|cuda) shared library",
       "missing-cuda-libs", 1.0, "PaddlePaddle (older) could not load a CUDA library", flags=I),
    # a bare import failure naming the library ("ImportError: libcudart.so.10.0", a title cut short)
    _p("import-error-library", r"ImportError: ((?:lib)?[\w+-]+\.so(?:\.[\d.]+)?)\s*$", None, 0,
       "a library could not be imported", "library"),
    # a build that did not find the CUDA toolkit (CMake's own lines), so it was made without CUDA
    _p("cmake-no-cuda", r"Looking for a CUDA compiler - NOTFOUND|Could NOT find CUDA(?:Toolkit)?\b|"
       r"No CMAKE_CUDA_COMPILER could be found", "missing-cuda-libs", 0.8,
       "the build did not find the CUDA toolkit, so it was built without CUDA", also=("cpu-build",)),
    # --- a build without GPU kernels, as its own tool says ---------------------------------------------------------
    # an op library built without its CUDA kernels (mmcv's "nms_impl: implementation for device cuda:0 not found")
    _p("op-no-cuda-impl", r"implementation for device cuda(?::\d+)? not found", "cpu-build", 0.9,
       "the op library was built without its CUDA kernels (mmcv without CUDA ops)", also=("missing-cuda-libs",)),
    # Ollama's runners compiled in, none for a GPU ('msg="Dynamic LLM libraries" runners=[cpu]')
    _p("ollama-cpu-runners", r"Dynamic LLM libraries\W{0,3}(?:runners=)?\W{0,2}\[(?![^\]]*(?:cuda|rocm|metal|vulkan))"
       r"[^\]]*\]",
       "cpu-build", 0.9, "Ollama was packaged with CPU runners only", flags=I),
    _p("ort-provider-failed", r"Failed to create CUDAExecutionProvider|Failed to load library "
       r"(?:lib)?onnxruntime_providers_cuda", "missing-cuda-libs", 0.8,
       "ONNX Runtime could not load its CUDA provider (CUDA/cuDNN of the version it was built for not found)",
       also=("cuda-version-mismatch",)),
    _p("win-loadlibrary-126", r"LoadLibrary failed with error 126 .{0,40}?when trying to load "
       r"\"[^\"]*?([\w.-]+\.dll)\"",
       None, 0, "Windows could not load a DLL or one of its dependencies", "library"),
    _p("win-could-not-find-module", r"Could not find module '[^']*?([\w.-]+\.dll)'", None, 0,
       "Windows could not find a DLL or one of its dependencies", "library"),
    _p("cupy-failed-to-load", r"CuPy failed to load ([\w.+-]+?)(?::|\s|$)", None, 0,
       "CuPy could not load a CUDA library", "library"),
    _p("jax-unable-to-load", r"Unable to load (?:CUDA|cuBLAS|cuFFT|cuSOLVER|cuSPARSE|cuPTI|CUPTI|NCCL|nvJitLink)\. "
       r"Is it installed\?", "missing-cuda-libs", 1.0, "JAX could not load a CUDA library"),
    _p("numba-no-nvvm", r"libNVVM cannot be found|NvvmSupportError", "missing-cuda-libs", 1.0,
       "Numba cannot find the CUDA toolkit's NVVM"),
    _p("numba-no-driver", r"CUDA driver library cannot be found|CudaSupportError: Error at driver init", "no-driver",
       0.8, "Numba cannot find or start the CUDA driver"),
    _p("cuda-home-unset", r"CUDA_HOME environment variable is not set|nvcc (?:was )?not found",
       "missing-cuda-libs", 0.8, "the CUDA toolkit (nvcc, CUDA_HOME) that a CUDA extension builds with is missing"),
    # torch.utils.cpp_extension prints this when it finds a CUDA toolkit but torch.cuda.is_available() is False (its
    # source: `if cuda_home and not torch.cuda.is_available()`): the toolkit is there, the GPU is not reachable.
    # Settled as a container started without the GPU runtime (Thinklab-SJTU/ThinkMatch#51) or a runtime with no GPU
    # attached (googlecolab/colabtools#2449); a CPU build of torch is the other candidate.
    _p("torch-no-cuda-runtime", r"No CUDA runtime is found, using CUDA_HOME", "no-driver", 0.6,
       "a CUDA toolkit is installed but torch.cuda.is_available() is False: no usable driver or GPU here",
       also=("cpu-build", "devices-hidden")),
    _p("bnb-cuda-setup", r"CUDA Setup failed despite GPU being available", "missing-cuda-libs", 0.8,
       "bitsandbytes could not find the CUDA runtime library it needs"),
    # --- out of memory ------------------------------------------------------------------------------------------
    _p("paddle-oom", r"Out of memory error on GPU (?:Virtual Memory )?\d+", "out-of-memory", 1.0,
       "PaddlePaddle ran out of GPU memory", also=("memory-held",)),
    _p("mxnet-oom", r"cudaMalloc(?: retry)? failed: out of memory|CUDA: out of memory", "out-of-memory", 1.0,
       "MXNet ran out of GPU memory", also=("memory-held",)),
    _p("caffe-oom", r"\(2 vs\. 0\)\s*out of memory", "out-of-memory", 1.0, "a CUDA call ran out of memory (Caffe)",
       also=("memory-held",)),
    _p("ort-oom", r"Failed to allocate memory for requested buffer of size|CUDA failure 2: out of memory",
       "out-of-memory", 1.0, "ONNX Runtime ran out of GPU memory", also=("memory-held",)),
    _p("other-oom", r"OutOfMemoryError: (?:Out of memory allocating|CUDA out of memory)|CUDA Error: out of memory|"
       r"GPU out of memory|cudaErrorMemoryAllocation|MPS backend out of memory", "out-of-memory", 1.0,
       "GPU memory ran out (CuPy, darknet, a CUDA runtime call)", also=("memory-held",)),
    # --- versions that do not fit -------------------------------------------------------------------------------
    _p("paddle-compiled-newer", r"The installed Paddle is compiled with (?:CUDA|CUDNN) [\d.]+, but (?:CUDA runtime|"
       r"CUDNN) version in your machine is", "cuda-version-mismatch", 0.7,
       "the CUDA or cuDNN found is older than the one PaddlePaddle was built with"),
    _p("torch-cudnn-mismatch-old", r"cuDNN version mismatch: PyTorch was compiled against \d+ but linked against \d+",
       "cuda-version-mismatch", 1.0, "the cuDNN loaded is not the one PyTorch was built with"),
    _p("kernel-image-invalid", r"device kernel image is invalid|CUDA_ERROR_INVALID_IMAGE|cudaErrorInvalidKernelImage",
       "cuda-version-mismatch", 0.8, "the GPU code in the build cannot be loaded by this driver",
       also=("unsupported-compute-capability",)),
    _p("xla-cubin-failed", r"Failed to load in-memory CUBIN|Failed to load PTX text as a module",
       "cuda-version-mismatch", 0.8, "XLA's compiled kernels do not load (driver older than the CUDA that built them)",
       also=("unsupported-compute-capability",)),
    _p("xla-driver-older-ptxas", r"driver's CUDA version is [\d.]+ which is older than the ptxas CUDA version",
       "cuda-version-mismatch", 0.8, "the driver is older than the CUDA toolkit XLA compiles with"),
    _p("jax-dnn-init-failed", r"DNN library initialization failed", "cuda-version-mismatch", 0.7,
       "XLA could not start cuDNN (a cuDNN that does not fit the build, or no memory left for it)",
       also=("memory-held",)),
    _p("tf-jit-from-ptx", r"not built with CUDA kernel binaries compatible with compute capability",
       "unsupported-compute-capability", 0.6, "TensorFlow has no kernels for this GPU and compiles them from PTX",
       also=("cuda-version-mismatch",)),
    _p("cudnn-no-engine", r"GET was unable to find an engine to execute this computation|"
       r"FIND was unable to find an engine to execute this computation", "cuda-version-mismatch", 0.6,
       "cuDNN has no engine for the call (a cuDNN that does not fit the build, or no memory left for a workspace)",
       also=("out-of-memory",)),
    # MATLAB's Parallel Computing Toolbox (gpuDevice, gpuArray, trainNetwork) when nvcuda.dll / libcuda.so.1 is absent.
    _p("matlab-no-driver", r"The CUDA driver could not be loaded|There is a problem with the CUDA driver or with this "
       r"GPU device", "no-driver", 0.9, "MATLAB could not load the NVIDIA driver's CUDA library"),
    # --- containers and machines without a GPU ----------------------------------------------------------------
    _p("smi-not-found", r"nvidia-smi: (?:command )?not found|'nvidia-smi' is not recognized as an internal or "
       r"external command", "no-driver", 0.8, "nvidia-smi is missing: no driver here (or a container without GPUs)"),
    _p("docker-no-nvidia-runtime", r"unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia",
       "no-driver", 1.0, "Docker has no NVIDIA runtime (the NVIDIA Container Toolkit is not installed)"),
    _p("no-dev-nvidia", r"/dev/nvidia(?:ctl|\d+|-uvm)\b.{0,40}(?:No such file or directory|not found)", "no-driver",
       0.8, "the NVIDIA device files are missing (driver not loaded, or not passed to the container)"),
    _p("no-pci-access", r"pcilib: Cannot open /proc/bus/pci|lspci: Cannot find any working access method", "no-driver",
       0.6, "the system shows no PCI bus (WSL1, some containers and VMs): no GPU is passed to it"),
    _p("smi-device-handle", r"Unable to determine the device handle for GPU|GPU has fallen off the bus",
       "no-driver", 0.7, "the driver lost the GPU (hardware, power or PCIe fault; a reboot brings it back)"),
    # --- a script asking for GPUs or processes it does not have ----------------------------------------------------
    _p("deserialize-device", r"Attempting to deserialize object on CUDA device \d+ but torch\.cuda\.device_count\(\) "
       r"is \d+|But your machine only has: \[\d", "invalid-device-index", 0.9,
       "the script asks for a GPU index the machine does not have"),
    # A GPU list the environment names but the machine does not have: dorado checks CUDA_VISIBLE_DEVICES against the
    # GPUs present, logs the first line and throws the second (its maintainer in nanoporetech/dorado#1469: the only
    # place dorado prints "Invalid device ids"; dorado#1405: it reads CUDA_VISIBLE_DEVICES, full UUIDs only).
    _p("cvd-more-than-present", r"CUDA_VISIBLE_DEVICES\S* specifies more device ids than the number of GPUs",
       "devices-hidden", 1.0, "CUDA_VISIBLE_DEVICES names GPUs that are not there (a scheduler's or a stale value)"),
    _p("dorado-invalid-ids", r"what\(\):\s+Invalid device ids\s*$", "devices-hidden", 0.8,
       "dorado found CUDA_VISIBLE_DEVICES naming more GPUs than are present", also=("invalid-device-index",)),
    _p("single-gpu-wrapper", r"only supports single GPU training, if you need to train with multiple GPUs",
       "process-group-missing", 0.8, "a single-process wrapper (mmcv's MMDataParallel) asked for several GPUs: start "
       "the script with the distributed launcher (dist_train.sh, torchrun)"),
    _p("env-rendezvous-unset", r"environment variable (?:MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE) expected, but "
       r"not set",
       "process-group-missing", 0.8, "init_process_group(env://) in a process started without a launcher"),
    _p("shm-no-space", r"unable to write to file </torch_\w+>|unable to open shared memory object </torch_\w+>",
       "dataloader-shm", 0.8, "DataLoader workers could not pass batches through /dev/shm"),
    # --- hangs and timeouts between GPUs ------------------------------------------------------------------------
    _p("nccl-watchdog-stuck", r"ProcessGroupNCCL's watchdog got stuck for|Some NCCL operations have failed or timed "
       r"out|WorkNCCL\(.*ran for \d+ milliseconds before timing out", "nccl-error", 1.0,
       "a NCCL collective hung until PyTorch's watchdog stopped it"),
    _p("nccl-timeout", r"\bNCCL\b.{0,80}\btim(?:ed|e) ?out\b|\btim(?:ed|e) ?out\b.{0,80}\bNCCL\b", "nccl-error", 0.8,
       "a NCCL operation timed out", flags=I),
    _p("store-barrier-timeout", r"Timed out initializing process group in store based barrier|"
       r"is setting up NCCL communicator and retrieving ncclUniqueId from \[\d+\]", "nccl-error", 0.7,
       "the ranks never all joined the NCCL setup (a rank hung, or hosts cannot reach each other)",
       also=("port-in-use",)),
    _p("horovod-stall", r"Stalled ranks:|One or more tensors were submitted to be reduced, gathered or broadcasted "
       r"by subset of ranks", "nccl-error", 0.6, "Horovod ranks wait for each other in a collective"),
    _p("tf-collective-aborted", r"Collective ops is aborted by", "nccl-error", 0.6,
       "TensorFlow aborted its collectives after one failed or timed out"),
)
