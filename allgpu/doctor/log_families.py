"""The fallback reader of ``allgpu doctor --log``: each cause's *family* of wordings, for logs in which no known
message (:mod:`allgpu.doctor.log_patterns`, ``log_patterns_setup``, ``log_patterns_frameworks``) names a cause.

The exact readers know messages one by one, and every new library or version words the same cause anew (MXNet's
"GPU is not enabled", ggml's "was compiled for: 520", a bare "CUSOLVER Error 7"). A family is what every wording of one
cause has in common, as the field words it: a build "not compiled with CUDA", "CPU-only", "+cpu"; a ``lib*.so*`` or
``*.dll`` that "cannot open" / "not found" / "could not load"; an arch "compiled for: NNN", "sm_NN is not compatible",
"no kernel image", "invalid device function"; memory "out of memory", "OOM", "failed to allocate", a math library's
``ALLOC_FAILED`` (or its status number). Status numbers are the enums of NVIDIA's headers (``cublas_api.h``,
``cusolver_common.h``, ``cusparse.h``, ``cufft.h``, ``cudnn.h``).

A family sign is weaker evidence than a known message: the verdict uses it only when no known message names a
cause, marks the finding as read from the wording's family, and names no cause when no family sign appears.

Pure: reads only the lines given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from allgpu.doctor.log_enums import read_enums
from allgpu.doctor.log_patterns import I, Pattern

# The weight of a family sign: enough to name a cause alone (the verdict's threshold is 0.6), less than a known
# message. Generic signs (any "out of memory", a driver "not found") rank below specific ones when both appear.
SPECIFIC, GENERIC = 0.65, 0.6

# Libraries whose absence is not a reason for an idle GPU (TensorRT is optional), or means no driver.
_OPTIONAL_LIBS = ("libnvinfer", "nvinfer", "libtpu")
# The driver's own libraries: libcuda and NVML, and every libnvidia-* (libnvidia-encode, libnvidia-ptxjitcompiler,
# libnvidia-opticalflow...), the video codec's libnvcuvid/nvcuvid.dll and nvEncodeAPI: a container started without
# the driver capability that carries them (NVIDIA_DRIVER_CAPABILITIES), or no driver, not a CUDA toolkit library.
_DRIVER_LIBS = ("libcuda.so", "nvcuda.dll", "libnvidia-", "nvml.dll", "libnvcuvid", "nvcuvid.dll", "nvencodeapi")
# Parts of a library name that make it a CUDA library (PyTorch's torch_cuda.dll, caffe2_nvrtc.dll, libc10_cuda.so).
_CUDA_PARTS = re.compile(r"cuda|cudnn|cublas|cufft|curand|cusolver|cusparse|nvrtc|nvjitlink|nccl|cupti|nvvm", re.I)


def library_cause(lib: str) -> tuple[str | None, float]:
    """The cause a library that failed to load points at: ``no-driver`` for the driver's own libraries,
    ``missing-cuda-libs`` for CUDA's, none for optional or unrelated ones (``libGL.so.1``)."""
    low = lib.lower().lstrip("'\"`")
    if low.startswith(_OPTIONAL_LIBS):
        return None, 0.0
    if low.startswith(_DRIVER_LIBS):
        return "no-driver", 1.0
    if re.match(r"(lib)?(cu|nv|nccl)", low) or _CUDA_PARTS.search(low):
        return "missing-cuda-libs", 1.0
    return None, 0.0


def _s(sid: str, cause: str, regex: str, weight: float, what: str, kind: str = "", also: tuple[str, ...] = (),
       flags: int = I) -> Pattern:
    """A family sign, as a :class:`~allgpu.doctor.log_patterns.Pattern`: ``kind`` ``""`` (the match names ``cause``),
    ``"library"`` (group 1 is a library name, judged by :func:`library_cause`) or ``"status"`` (groups 1-4: a math
    library and its status, by number or by name)."""
    return Pattern(sid, re.compile(regex, flags), cause, weight, kind, what, also)


# NVIDIA's architecture names, as tools say which GPUs they support.
_ARCHS = r"(?:Kepler|Maxwell|Pascal|Volta|Turing|Ampere|Ada(?: Lovelace)?|Hopper|Blackwell)"
_LIB = r"((?:lib)?[\w+.-]*?(?:\.so(?:\.[\d.]+)?|\.dll))\b"
_FAILS = (r"(?:cannot open|can't open|could not (?:be )?(?:open|load|find|found|locate|loaded)|couldn't (?:open|load|"
          r"find)|cannot (?:find|load|locate)|not found|no such file|failed to (?:load|open|find|locate|dlopen)|"
          r"unable to (?:load|open|find|locate)|is missing|missing)")

FAMILIES: tuple[Pattern, ...] = (
    # --- the GPU's architecture is not in the build ---------------------------------------------------------------
    _s("arch-words", "unsupported-compute-capability",
       r"\bcompiled for: ?\d{2,3}\b|no device code compatible with CUDA arch|not compiled with any CUDA arch|"
       r"\bsm_\d{2,3}a? is not compatible|no kernel image|invalid device function|cudaErrorInvalidDeviceFunction|"
       r"cudaErrorNoKernelImageForDevice|unsupported gpu architecture|(?:compute|CUDA) capability (?:of )?"
       r"(?:sm_)?[\d.]+ (?:is )?(?:not supported|too (?:low|old)|below|less than|lower than|smaller than)|"
       r"(?:minimum|min\.?) (?:required )?(?:CUDA )?compute capability|\bGPU (?:is )?too old\b|compute capability "
       r"(?:of )?at least \d|compute capability [\d.]+ ?< ?[\d.]+|\bGPU (?:device )?(?:is )?not supported\b|"
       r"\barch(?:itecture)? mismatch\b|Value '(?:sm|compute)_\d+a?' is not defined for option 'gpu-name'|"
       # a tool's own "this GPU is too old": Triton's "which is too old to be supported by the triton GPU compiler",
       # "supports devices of CUDA Capability >= 7.0", FlashAttention's "only supports Ampere GPUs or newer"
       r"\btoo old to be supported\b|\b(?:CUDA|compute) capability (?:>=|\u2265|>) ?\d|"
       r"\b(?:only )?supports? (?:only )?(?:\w+ )?" + _ARCHS + r"(?: \w+)? (?:or|and) (?:newer|later|above|up)\b|"
       r"\b(?:requires?|needs?) (?:an? )?" + _ARCHS + r"(?: \w+)? (?:GPU|card|or (?:newer|later))",
       SPECIFIC, "the build has no kernels for this GPU's architecture", also=("cuda-version-mismatch",)),
    # The PTX assembler failing (Triton's "ptxas failed with error code ..."): in threads, most often a ptxas that
    # does not know the GPU's architecture (an RTX 50xx with an older Triton), else a toolkit that does not fit.
    _s("ptxas-fails", "unsupported-compute-capability", r"\bptxas\b.{0,40}?\b(?:failed|fatal)\b", GENERIC,
       "the PTX assembler failed (most often: it does not know this GPU's architecture)",
       also=("cuda-version-mismatch",)),
    # --- driver, CUDA and cuDNN versions that do not fit ----------------------------------------------------------
    _s("version-words", "cuda-version-mismatch",
       r"\bdriver (?:version )?(?:is )?(?:too old|insufficient|outdated|older than)|(?:update|upgrade) (?:your |the )?"
       r"(?:NVIDIA |GPU |graphics )?driver|requires? (?:a )?(?:newer|NVIDIA) driver|\b(?:CUDA|cuDNN|cudnn|NCCL|driver)"
       r" version mismatch|version mismatch.{0,40}\b(?:CUDA|cuDNN)|mismatches the version that was used to compile|"
       r"compiled (?:with|against|for) (?:CUDA|cuDNN|cudnn) [\d.]+,? but|incompatible with (?:the )?(?:installed |"
       r"current )?(?:CUDA|driver|cuDNN)|undefined symbol: \w*(?:cuda|cudnn|cublas|cusparse|cusolver|cufft|nccl|"
       r"nvrtc|nvJitLink)\w*|version [`'](?:lib)?(?:cu\w*|nccl\w*|CUDNN_\w*|libcudnn[\w.]*)' not found|"
       r"\b(?:cu|nccl)\w+ symbol not found|symbol not found\W{1,3}(?:cu|nccl)\w+|"
       r"\bcuda\S* does not export expected C (?:variable|function)|"
       # the subject before the verb: CatBoost's "CUDA version/driver  is incompatible with package"
       r"\b(?:CUDA|cuDNN|driver)(?: version)?(?:/[\w ]{1,20}?)?\s+(?:is|are) (?:incompatible|not compatible)\b",
       SPECIFIC, "the driver, CUDA or cuDNN does not fit the build", also=("missing-cuda-libs",)),
    # A tool that picks its native build by the CUDA it finds and has none for it (DJL's "No matching cuda flavor
    # for win found: cu112mkl"): the installed CUDA is one the tool has no build for; some then fall back to CPU.
    _s("no-cuda-flavour", "cuda-version-mismatch", r"\bno matching (?:CUDA|GPU) (?:flavou?r|version|build|variant|"
       r"binary|library)", SPECIFIC, "the tool has no build for the CUDA version it found", also=("cpu-build",)),
    # --- a build without CUDA -------------------------------------------------------------------------------------
    _s("cpu-build-words", "cpu-build",
       r"\b(?:not|n't|never) (?:be(?:en)? )?(?:compil(?:e|ed|ing)|buil[dt]|enabled?|install(?:ed)?|configured?) "
       r"(?:with|for) (?:the )?(?:CUDA|GPU|cuDNN|NVIDIA|MPS|ROCm|HIP)|"
       # the tool's own "not enabled" ("GPU is not enabled", DGL's "Device API cuda is not enabled") and its hint
       # to install the GPU flavour ("Please install the cuda version of dgl", "installed CPU version PaddlePaddle")
       r"\b(?:GPU|CUDA)(?: support| API| backend| acceleration)? (?:is |was )?(?:not|n't) enabled\b|"
       r"\b(?:installed|is|are using) (?:the |a )?CPU (?:version|build|package|variant)\b|\binstall (?:the |a )?"
       r"(?:CUDA|GPU)(?:[- ]enabled)? (?:version|build|package|variant)\b|"
       r"\bGPU support (?:is )?(?:disabled|off)\b|"
       r"(?<!back to )(?<!back on )\bCPU[- ]only\b|\b\d+\.\d+(?:\.\d+)?\+cpu\b|(?:[\w-]+[-_]cpu)(?:==|\s+)\d|"
       r"without (?:CUDA|GPU) support|"
       r"\b(?:USE|WITH|GGML|LLAMA)_(?:CUDA|GPU|CUBLAS)\s*[=:]\s*(?:0|OFF|False)\b|\bno CUDA support\b|"
       r"(?:^|\|)\s*(?:CU)?BLAS\s*=\s*0\s*(?:\||$)",
       SPECIFIC, "the library was built or installed without GPU support", also=("no-driver",)),
    # A GPU backend a tool could not set up, in the tool's words (Chainer's "CUDA environment is not correctly set
    # up", raised when CuPy does not import): the GPU package beside the tool is missing, else its libraries.
    _s("gpu-env-not-set-up", "cpu-build",
       r"\b(?:CUDA|GPU)(?: environment| support| backend)? (?:is |was )?(?:not|n't) (?:correctly |properly )?(?:set ?up|"
       r"configured)\b", SPECIFIC, "the tool's GPU backend package is not installed or does not import",
       also=("missing-cuda-libs", "no-driver")),
    # A package's compiled ops module missing (mmcv's `mmcv._ext`, `<pkg>._C`, `<pkg>_cuda`): the package installed
    # without its compiled CUDA part (mmcv rather than mmcv-full, a source install that built no extension).
    _s("compiled-ops-missing", "cpu-build",
       r"No module named '(?!torch\.)(?:[\w.]+\.(?:_ext|_C|_cuda\w*|\w+_cuda)|\w+_cuda(?:_ext)?)'", SPECIFIC,
       "the package was installed without its compiled GPU ops", also=("cuda-version-mismatch", "missing-cuda-libs")),
    # A device or provider option whose choices hold no GPU (FaceFusion's "invalid choice: 'cuda' (choose from
    # 'cpu')"): the tool's GPU back end is not installed (the CPU onnxruntime package instead of onnxruntime-gpu).
    _s("gpu-choice-missing", "cpu-build",
       r"\binvalid choice: '?(?:cuda|gpu|tensorrt)\w*'? \(choose from (?![^)]*(?:cuda|gpu|tensorrt|rocm|directml|"
       r"coreml|mps|openvino|dml))[^)]*\)", SPECIFIC, "the tool offers no GPU choice: its GPU back end is not "
       "installed", also=("missing-cuda-libs",)),
    # An op of an extension library (torchvision::nms, torchaudio::, mmcv::) with no CUDA kernel: the library was
    # built for another torch or CUDA (or without CUDA); aten's own ops are the exact readers'.
    _s("ext-op-no-cuda", "cuda-version-mismatch",
       r"Could not run '(?!aten::|prims::)\w+::\w+' with arguments from the '?(?:CUDA|QuantizedCUDA)'? backend",
       SPECIFIC, "an extension library's op has no CUDA kernel: built for another torch or CUDA",
       also=("cpu-build",)),
    # A tool's compiled CUDA part not there (AutoGPTQ's "CUDA extension not installed", "CUDA kernels not built"):
    # settled as the extension built against another CUDA or torch, else as no toolkit to build it with.
    _s("gpu-ext-missing", "cuda-version-mismatch",
       r"\b(?:CUDA|GPU|C\+\+/CUDA|native) (?:extension|kernel|op)s? (?:is |are |was |were )?(?:not|n't) (?:installed|"
       r"built|compiled|found|available|loaded)\b", GENERIC, "the tool's compiled CUDA extension is not there",
       also=("missing-cuda-libs", "cpu-build")),
    # A build that found no CUDA toolkit: PyTorch's cpp_extension "CUDA_HOME environment variable is not set", and
    # the same variable said missing or wrong in other words.
    _s("cuda-home-unset", "missing-cuda-libs",
       r"\bCUDA_HOME\b\W{0,3}(?:environment )?(?:variable )?(?:is )?(?:not set|unset|undefined|missing|None\b|"
       r"(?:environment )?(?:issue|error|problem))", SPECIFIC, "no CUDA toolkit was found to build with (CUDA_HOME)",
       also=("cuda-version-mismatch",)),
    # A tool asking for "the correct version" of CUDA or cuDNN (ONNX Runtime's "CUDA_PATH is set but CUDA wasn't
    # able to be loaded. Please install the correct version of CUDA and cuDNN"): a CUDA other than the build's.
    _s("install-right-version", "cuda-version-mismatch",
       r"\binstall (?:the )?(?:correct|right|matching|compatible|supported|required) versions? of (?:the )?(?:CUDA|"
       r"cuDNN|NVIDIA driver)", SPECIFIC, "the tool asks for another CUDA or cuDNN version than the one it found",
       also=("missing-cuda-libs",)),
    # OpenCL finding no platform or device (LightGBM's "No OpenCL device found", CL_PLATFORM_NOT_FOUND_KHR, -1001):
    # the driver's OpenCL ICD is not registered (a container without /etc/OpenCL/vendors/nvidia.icd), or no driver.
    _s("opencl-none", "no-driver",
       r"\bno OpenCL (?:GPU )?(?:device|platform)s? (?:was |were )?(?:found|available|detected)|"
       r"CL_PLATFORM_NOT_FOUND_KHR|CL_DEVICE_NOT_FOUND|clGetPlatformIDs\b.{0,40}-1001\b", SPECIFIC,
       "OpenCL finds no GPU: the driver's OpenCL ICD is not registered, or no driver", also=("cpu-build",)),
    # A CUDA entry point missing from a module or op namespace (torch's CPU build has no torch._C._cuda_setDevice;
    # DGL's CPU wheel no graphbolt.set_max_uva_threads): the installed build has no CUDA part. Names with "gpu"
    # are left out: Keras's `_get_available_gpus` and TensorFlow's `gpu_options` are API versions, not builds.
    _s("cuda-attribute", "cpu-build",
       r"(?:module '[\w.]+'|'?_OpNamespace'? '?\w+'? object) has no attribute '(?:\w*_(?:cuda|cudnn|nccl|uva)"
       r"\w*|(?:cuda|cudnn|nccl)_\w+)'", SPECIFIC,
       "the installed build has no CUDA entry points (a CPU build)", also=("cuda-version-mismatch",)),
    # CUTLASS's status strings (cutlassGetStatusString): "Error Internal" from tiny-cuda-nn's GEMMs is settled as a GPU
    # below the architecture the kernels were built for (NVlabs/instant-ngp#1219: compute capability 6.x, works on
    # 7.0+; #1101: a GTX 1060) or a CUDA toolkit other than the build's (#1101: conda's CUDA beside the system's).
    _s("cutlass-arch", "unsupported-compute-capability",
       r"\bcutlass\w*\b.{0,120}?(?:\bError (?:Arch Mismatch|Internal|Not Supported)\b|kError(?:ArchMismatch|"
       r"Internal|NotSupported)\b)", GENERIC, "CUTLASS could not run its kernel on this GPU",
       also=("cuda-version-mismatch",)),
    _s("cutlass-driver", "cuda-version-mismatch", r"\bcutlass\w*\b.{0,120}?(?:\bError Insufficient Driver\b|"
       r"kErrorInsufficientDriver\b)", SPECIFIC, "CUTLASS found the driver older than its kernels need"),
    _s("cutlass-memory", "out-of-memory", r"\bcutlass\w*\b.{0,120}?(?:\bError Memory Allocation\b|"
       r"kErrorMemoryAllocation\b)", GENERIC, "CUTLASS could not allocate GPU memory", also=("memory-held",)),
    # --- a CUDA library not found ---------------------------------------------------------------------------------
    _s("library-fails", "missing-cuda-libs", _LIB + r"\W{0,4}.{0,40}?" + _FAILS, SPECIFIC,
       "a CUDA library could not be loaded", "library"),
    _s("fails-library", "missing-cuda-libs", _FAILS + r"\W{1,4}(?:the )?(?:library |module |file )?(?:any of |one of )?"
       r"[{\[(]?['\"`]?[^\s'\"`]*?" + _LIB, SPECIFIC, "a CUDA library could not be loaded", "library"),
    # A library's entry point that could not be loaded: the library itself did not load (ctranslate2's "Invalid
    # handle. Cannot load symbol cudnnCreateTensorDescriptor"), or it is another version without that symbol.
    _s("symbol-fails", "missing-cuda-libs", r"(?:cannot|can't|could not|couldn't|unable to|failed to) (?:load|find|"
       r"resolve|locate|get) (?:the )?(?:symbol|function|entry point|procedure)\W{0,3}(?:cu|nv|nccl)\w+",
       SPECIFIC, "a CUDA library's function could not be loaded", also=("cuda-version-mismatch",)),
    _s("toolkit-words", "missing-cuda-libs",
       r"\b(?:cuDNN|CUDA toolkit|CUDA runtime|cudart|cuBLAS|NCCL|nvcc)\b(?: library)? (?:is )?(?:not found|missing|"
       r"not installed|could not be (?:found|loaded))|DLL load failed|\b(?:not|didn't|did not|cannot|can't|could "
       r"not|couldn't|unable to|failed to) (?:detect|find|locate) (?:the )?(?:CUDA|cuDNN)(?: toolkit| installation)?\b",
       SPECIFIC, "the CUDA toolkit or one of its libraries is missing", also=("cuda-version-mismatch",)),
    # --- a math library's status: by name or by its number --------------------------------------------------------
    _s("math-status", "status", r"\b(cu(?:BLAS|SOLVER|SPARSE|FFT|DNN))[ _:]*(?:status|error|failure|failed)\W{0,4}"
       r"(?:code\W{0,3})?(\d{1,2})\b|\b(CU(?:BLAS|SOLVER|SPARSE|FFT|DNN))_(?:STATUS_)?([A-Z_]+)\b",
       SPECIFIC, "a CUDA math library returned an error status", "status"),
    # --- no driver ------------------------------------------------------------------------------------------------
    _s("driver-words", "no-driver",
       r"\b(?:NVIDIA |GPU |CUDA |graphics )driver (?:is )?(?:not (?:installed|loaded|found|detected|running|present)|"
       r"missing)|\bno (?:NVIDIA |CUDA |GPU )?driver (?:found|installed|detected|present)|(?:failed to|could not|"
       r"couldn't|unable to) (?:initialize|load|insert|find) (?:the )?NVIDIA kernel module|kernel module.{0,30}"
       r"\bnvidia\b.{0,30}not (?:loaded|found)|nvidia-smi.{0,40}(?:not found|failed|not recognized|No such file)|"
       r"\bcuInit\b.{0,40}(?:fail|error|returned\W{0,3}[1-9])|"
       r"(?:could not|couldn't|unable to|failed to|cannot) (?:initialize|init|load|"
       r"find) (?:the )?(?:CUDA|NVIDIA) driver|"
       r"cudaErrorInitializationError|CUDA_ERROR_NOT_INITIALIZED|cudaErrorNoDevice\b",
       GENERIC, "no usable NVIDIA driver", also=("devices-hidden",)),
    # CUDA's "unknown error" (driver API CUDA_ERROR_UNKNOWN and runtime cudaErrorUnknown, both 999 since CUDA 10.1):
    # settled in threads as a driver left unusable (libraries upgraded under a loaded kernel module, a suspend, a
    # driver that failed to load), else as a CUDA that does not fit the GPU.
    _s("unknown-999", "no-driver",
       r"cudaErrorUnknown|CUDA_ERROR_UNKNOWN|\bCUDA\b.{0,30}\b(?:error|code|failed)\W{0,3}(?:code\W{0,3})?999\b",
       GENERIC, "CUDA failed with its 'unknown error' (999): the driver is not usable as loaded",
       also=("cuda-version-mismatch",)),
    # --- a GPU index that is not there ----------------------------------------------------------------------------
    _s("index-words", "invalid-device-index",
       r"invalid device (?:ordinal|id|index|number)|\b(?:device|gpu|cuda)(?: id| index| ordinal)?[ :]\d+ (?:is )?"
       r"(?:out of range|does not exist|not (?:found|available|exist))|\bonly \d+ (?:GPU|device|CUDA device)s? "
       r"(?:is |are )?(?:available|found|detected|visible)|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE\b",
       SPECIFIC, "the script asks for a GPU index that is not there"),
    # --- launch: ports, process groups, shared memory, NCCL --------------------------------------------------------
    _s("port-words", "port-in-use",
       r"address already in use|EADDRINUSE|WinError 10048|Only one usage of each socket address|\bport \d+ (?:is )?"
       r"(?:already )?(?:in use|taken|occupied)|errno:? 98\b|\bport\W{0,2}\d{2,5}\W{0,2}.{0,30}another process is "
       r"(?:using|utilizing|holding|listening on) it",
       SPECIFIC, "the rendezvous port is taken"),
    _s("group-words", "process-group-missing",
       r"process group.{0,30}not (?:been )?initiali[sz]ed|init_process_group.{0,40}(?:not|never) (?:been )?called|"
       r"must (?:call|be initiali[sz]ed with) .{0,20}init_process_group|torch\.distributed is not initiali[sz]ed|"
       r"distributed (?:package|environment|backend) (?:is |has )?not (?:been )?initiali[sz]ed",
       SPECIFIC, "a distributed call ran outside a process group"),
    _s("shm-words", "dataloader-shm",
       r"(?:/dev/shm|shared memory).{0,60}(?:No space|insufficient|out of|too small|full|exhausted)|(?:unable|could "
       r"not|failed) to (?:allocate|create|open|write|map).{0,40}shared memory|Bus error.{0,60}(?:worker|DataLoader)|"
       r"DataLoader.{0,60}Bus error",
       SPECIFIC, "DataLoader workers ran out of shared memory"),
    _s("nccl-words", "nccl-error",
       r"\bNCCL\b.{0,60}\b(?:error|fail(?:ed|ure)?|abort(?:ed)?|invalid|unhandled|timed? ?out)\b|\bnccl\w*Error\b",
       SPECIFIC, "NCCL failed between GPUs"),
    # --- memory ---------------------------------------------------------------------------------------------------
    _s("held-words", "memory-held",
       r"(?:in use|held|occupied|used|taken) by (?:another|other|a different) (?:process|program|application|user)|"
       r"\b(?:GPU|device)s? (?:is |are )?(?:busy|occupied)\b|exclusive[_ -](?:process|thread) mode",
       SPECIFIC, "another process holds the GPU or its memory", also=("out-of-memory",)),
    _s("oom-words", "out-of-memory",
       r"\bout of (?:GPU |device |CUDA |video )?memory\b|\bOOM\b|\bOutOfMemory|(?:failed|unable|could not|couldn't|"
       r"cannot) (?:to )?allocate\b|memory allocation (?:failed|error)|insufficient (?:GPU |device |video |CUDA )?"
       r"(?:memory|VRAM)|not enough (?:GPU |device |video |CUDA )?(?:memory|VRAM)|exceeds? (?:the )?(?:available |"
       r"total )?(?:GPU |device )?memory|RESOURCE_EXHAUSTED|resource exhausted|cudaErrorMemoryAllocation",
       GENERIC, "GPU memory ran out", also=("memory-held",)),
)

# Status enums of NVIDIA's math libraries (cublas_api.h; cusolver_common.h and cusparse.h share one numbering;
# cufft.h; cudnn.h), the values a log prints as "CUSOLVER Error 7".
_STATUS = {
    "cublas": {1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH", 11: "MAPPING_ERROR",
               13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED", 16: "LICENSE_ERROR"},
    "cusolver": {1: "NOT_INITIALIZED", 2: "ALLOC_FAILED", 3: "INVALID_VALUE", 4: "ARCH_MISMATCH", 5: "MAPPING_ERROR",
                 6: "EXECUTION_FAILED", 7: "INTERNAL_ERROR", 8: "MATRIX_TYPE_NOT_SUPPORTED", 9: "NOT_SUPPORTED"},
    "cufft": {1: "INVALID_PLAN", 2: "ALLOC_FAILED", 3: "INVALID_TYPE", 4: "INVALID_VALUE", 5: "INTERNAL_ERROR",
              6: "EXEC_FAILED", 7: "SETUP_FAILED", 8: "INVALID_SIZE"},
    "cudnn": {1: "NOT_INITIALIZED", 2: "ALLOC_FAILED", 3: "BAD_PARAM", 4: "INTERNAL_ERROR", 5: "INVALID_VALUE",
              6: "ARCH_MISMATCH", 7: "MAPPING_ERROR", 8: "EXECUTION_FAILED", 9: "NOT_SUPPORTED"},
}
_STATUS["cusparse"] = _STATUS["cusolver"]
# What each status is settled as in threads, most often first (the exact readers' cuBLAS/cuDNN/cuSOLVER messages).
_STATUS_CAUSES = {
    "ALLOC_FAILED": ("out-of-memory", "memory-held"),
    "ARCH_MISMATCH": ("unsupported-compute-capability", "cuda-version-mismatch"),
    "NOT_INITIALIZED": ("memory-held", "cuda-version-mismatch", "out-of-memory"),
    "EXECUTION_FAILED": ("cuda-version-mismatch", "unsupported-compute-capability", "memory-held"),
    "EXEC_FAILED": ("cuda-version-mismatch", "unsupported-compute-capability", "memory-held"),
    "INTERNAL_ERROR": ("cuda-version-mismatch", "unsupported-compute-capability", "memory-held"),
    "NOT_SUPPORTED": ("cuda-version-mismatch", "unsupported-compute-capability"),
    "SETUP_FAILED": ("cuda-version-mismatch", "memory-held"),
    # cuDNN 9's sublibraries: one missing from the install (JuliaGPU/CUDA.jl#3205 fixed by shipping it,
    # flatironinstitute/nemos#317), or loaded from another cuDNN than the core (pytorch/pytorch#188892,
    # koharu-rs/koharu#694, arrayfire/arrayfire#3700); ARCH_MISMATCH's cuDNN 9 name.
    "SUBLIBRARY_LOADING_FAILED": ("missing-cuda-libs", "cuda-version-mismatch"),
    "SUBLIBRARY_VERSION_MISMATCH": ("cuda-version-mismatch", "missing-cuda-libs"),
    "VERSION_MISMATCH": ("cuda-version-mismatch",),
    "NOT_SUPPORTED_ARCH_MISMATCH": ("unsupported-compute-capability", "cuda-version-mismatch"),
    # cuDNN rejecting a descriptor its version does not know (Caffe, MatConvNet, Paddle threads: cuDNN 5 -> 6, 7.4 ->
    # 7.6); a framework's own bug is the other kind, and is not a cause of an idle GPU.
    "BAD_PARAM": ("cuda-version-mismatch",),
}


@dataclass(frozen=True)
class FamilyHit:
    """One family sign at one line (1-based): the cause it points at, its weight and the other candidates."""

    line: int
    sign: str
    cause: str
    weight: float
    text: str
    also: tuple[str, ...] = ()


# cuDNN's INTERNAL_ERROR on its own is TensorFlow's "could not create cudnn handle" family: settled as the
# framework reserving the GPU's memory up front (allow_growth), as the exact readers of that message say.
_LIB_STATUS_CAUSES = {("cudnn", "INTERNAL_ERROR"): ("memory-held", "cuda-version-mismatch",
                                                   "unsupported-compute-capability")}


def _status_cause(m: re.Match[str]) -> tuple[str, tuple[str, ...], str] | None:
    lib, number, lib_named, name = m.groups()
    if number is not None:
        name = _STATUS.get(lib.lower(), {}).get(int(number))
        lib = lib.lower()
    else:
        lib = lib_named.lower()
    causes = _LIB_STATUS_CAUSES.get((lib, name or "")) or _STATUS_CAUSES.get(name or "")
    if not causes:
        return None
    return causes[0], causes[1:], f"{lib} status {name}"


# A CUDA library's name written in two words ("cudnn ops64_9.dll is not found"): the word before the file name.
_SPLIT_NAME = re.compile(r"\b((?:lib)?(?:cudnn|cublas|cufft|curand|cusolver|cusparse|cudart|nvrtc|nccl))[ _-]$", I)


def _library(m: re.Match[str]) -> str:
    """The library name a ``library`` sign matched, with a CUDA library word written apart from it put back."""
    lib = m.group(1)
    before = _SPLIT_NAME.search(m.string[max(0, m.start(1) - 16):m.start(1)])
    return f"{before.group(1)}_{lib}" if before and not _CUDA_PARTS.search(lib) else lib


def _judge(sign: Pattern, m: re.Match[str]) -> tuple[str, tuple[str, ...], str] | None:
    """``(cause, also, detail)`` for a match, or None when the match names no cause (a library unrelated to CUDA)."""
    if sign.kind == "library":
        lib = _library(m)
        cause, _ = library_cause(lib)
        return (cause, (), f"{lib} not loaded") if cause else None
    if sign.kind == "status":
        return _status_cause(m)
    return sign.cause, sign.also, sign.what


# Lines that say of themselves that they are harmless (TensorFlow's BFC "this is not a failure", its "Ignore above
# cudart dlerror if you do not have a GPU set up").
_HARMLESS = re.compile(r"not a failure|can (?:safely )?be ignored|\bignore above\b", I)


# A lookup reported over two lines (numba -s: "Finding cublas" then "ERROR: can't locate lib"): a failure that names
# no file, after a line naming the CUDA library looked for.
_LOOKING_FOR = re.compile(r"\b(?:Finding|Looking for|Searching for|Locating|Checking(?: for)?|Loading)\s+(?:lib)?"
                          r"(cu\w+|nvvm|nvrtc|nccl|libdevice)\b", I)
_NAMELESS_FAIL = re.compile(r"^\W*(?:ERROR\W*)?(?:can't|cannot|could not|couldn't|unable to|failed to) (?:locate|find|"
                            r"load|open)(?: the)? lib(?:rary)?\b\W*$|^\W*(?:ERROR\W*)?(?:not found|missing)\W*$", I)


def _lookups(lines: list[str], known: frozenset[int]) -> list[FamilyHit]:
    hits = []
    for i, raw in enumerate(lines):
        if i + 1 in known or not _NAMELESS_FAIL.search(raw):
            continue
        looked = next((m for m in (_LOOKING_FOR.search(lines[j]) for j in range(i - 1, max(-1, i - 3), -1)) if m),
                      None)
        if looked and (_CUDA_PARTS.search(looked.group(1)) or looked.group(1).lower() == "libdevice"):
            hits.append(FamilyHit(i + 1, "lookup-fails", "missing-cuda-libs", SPECIFIC,
                                  f"{raw.strip()[:80]} ({looked.group(1)} not found)", ("cuda-version-mismatch",)))
    return hits


def read_families(lines: list[str], known: frozenset[int] = frozenset()) -> list[FamilyHit]:
    """Every family sign in ``lines`` (without colour codes), in line order, at most one per sign and line.

    ``known``: 1-based numbers of the lines an exact reader already matched (a known message, even one that names no
    cause, such as an optional library); families read only the other lines.
    """
    hits = [FamilyHit(r.line, "enum:" + r.name, r.cause, r.member.weight, f"{r.text} ({r.api} status {r.name})",
                      r.member.also)
            for r in read_enums(lines) if r.cause and r.line not in known and not _HARMLESS.search(r.text)]
    enum_lines = {h.line for h in hits}  # a status read whole is the line's reading: no family sign besides it
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line or i + 1 in known or i + 1 in enum_lines or _HARMLESS.search(line):
            continue
        for sign in FAMILIES:
            m = sign.regex.search(line)
            judged = _judge(sign, m) if m else None
            if judged:
                cause, also, detail = judged
                hits.append(FamilyHit(i + 1, sign.id, cause, sign.weight, f"{line[:160]} ({detail})", also))
    return sorted(hits + _lookups(lines, known), key=lambda h: h.line)
