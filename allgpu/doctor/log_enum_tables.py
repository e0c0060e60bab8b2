"""The status enums of CUDA, HIP, NVML and NCCL as their headers define them, each member mapped to the cause that
public threads settle for it (or to none), for :mod:`allgpu.doctor.log_enums`.

Numbers and names are facts of the headers: the CUDA runtime's ``cudaError`` (``driver_types.h``; the numbering of
CUDA >= 10.1 and the older one, in which e.g. ``cudaErrorUnknown`` was 30 and ``cudaErrorNoDevice`` 38), the driver
API's ``CUresult`` (``cuda.h``, the same numbers as the runtime's newer ones), HIP's ``hipError_t`` (the CUDA
numbers), NVML's ``nvmlReturn_t`` (``nvml.h``) and NCCL's ``ncclResult_t`` (``nccl.h``). Texts are what each
library's error-string function returns (``cudaGetErrorString``, ``nvmlErrorString``, ``ncclGetErrorString``),
which is what most logs print.

A member's ``cause`` is what public threads settled it as (the references in ``refs``, repository#issue; the
settlement is the maintainer's or answerer's reply or the user's confirmed fix there). A member that threads settle
in different ways carries the others in ``also`` and a lower weight (:data:`AMBIGUOUS`); a member no thread settles
as a setup cause (a kernel's illegal access, a launch failure, an assert) has ``cause=None``: the doctor reports
that it read it and names no cause from it. docs/doctor.md keeps the table.
"""

from __future__ import annotations

from dataclasses import dataclass

# Weights, as the family signs' (log_families): a member settled one way names its cause; one settled in several
# ways ranks below it and names its candidates.
SETTLED, AMBIGUOUS = 0.65, 0.6


@dataclass(frozen=True)
class Member:
    """One member of a status enum.

    Attributes:
        names: its names in every API that has it (runtime, driver API, HIP, NVML's C and Python spellings).
        number: its value in CUDA >= 10.1 (driver API and HIP share it), or None.
        legacy: its value in the CUDA runtime up to 10.0, or None.
        texts: the error strings the library prints for it.
        cause: the cause id threads settle it as, or None (read and reported, no cause named).
        also: the other causes threads settled it as, most frequent first.
        weight: :data:`SETTLED` or :data:`AMBIGUOUS`.
        refs: the threads the mapping is taken from.
    """

    names: tuple[str, ...]
    number: int | None
    legacy: int | None
    texts: tuple[str, ...]
    cause: str | None
    also: tuple[str, ...] = ()
    weight: float = SETTLED
    refs: str = ""


def _m(names: str, number: int | None, legacy: int | None, texts: str, cause: str | None = None,
       also: tuple[str, ...] = (), weight: float = SETTLED, refs: str = "") -> Member:
    return Member(tuple(names.split()), number, legacy, tuple(t for t in texts.split("|") if t), cause, also,
                  weight, refs)


OOM, HELD, DRIVER, VERSION, ARCH = "out-of-memory", "memory-held", "no-driver", "cuda-version-mismatch", \
    "unsupported-compute-capability"

CUDA: tuple[Member, ...] = (
    _m("cudaErrorMemoryAllocation CUDA_ERROR_OUT_OF_MEMORY hipErrorOutOfMemory hipErrorMemoryAllocation", 2, 2,
       "out of memory", OOM, (HELD,), AMBIGUOUS, "eps696/aphantasia#22 (out of memory); LeelaChessZero/lc0#927 "
       "(memory held by another process)"),
    _m("cudaErrorInitializationError CUDA_ERROR_NOT_INITIALIZED hipErrorNotInitialized hipErrorInitializationError",
       3, 3, "initialization error", DRIVER, (VERSION,), AMBIGUOUS,
       "round 9's thread settled as a driver that does not fit the toolkit; the exact reader cuda-not-initialized"),
    _m("cudaErrorStubLibrary CUDA_ERROR_STUB_LIBRARY", 34, None, "CUDA driver is a stub library", DRIVER,
       refs="numba/numba#8985 (the toolkit's stubs/libcuda.so on LD_LIBRARY_PATH, user confirmed); NVIDIA/warp#219"),
    _m("cudaErrorInsufficientDriver hipErrorInsufficientDriver", 35, 35,
       "CUDA driver version is insufficient for CUDA runtime version", VERSION, (DRIVER,), AMBIGUOUS,
       "BobLiu20/YOLOv3_PyTorch#12 and torch/cutorch#318 (update the driver); NVIDIA/nvidia-docker#400 (container "
       "started without --gpus all)"),
    _m("cudaErrorDevicesUnavailable CUDA_ERROR_DEVICE_UNAVAILABLE", 46, 46,
       "all CUDA-capable devices are busy or unavailable|CUDA-capable device(s) is/are busy or unavailable", HELD,
       refs="NVIDIA/DIGITS#2005 (GPU in exclusive-process mode held by another process); pytorch/pytorch#3871"),
    _m("cudaErrorInvalidDeviceFunction hipErrorInvalidDeviceFunction", 98, 8, "invalid device function", ARCH,
       (VERSION,), refs="pytorch/pytorch#1557, NVIDIA/nv-wavenet#12 (round 5's labels); ROCm/rocALUTION#197 and "
       "pytorch/pytorch#164346 (HIP: gfx target not in the build)"),
    _m("cudaErrorNoDevice CUDA_ERROR_NO_DEVICE hipErrorNoDevice", 100, 38,
       "no CUDA-capable device is detected|no ROCm-capable device is detected", "devices-hidden", (DRIVER,),
       AMBIGUOUS, "threads split: CUDA_VISIBLE_DEVICES or a container hiding the GPUs, or no driver "
       "(rapidsai/cuml#6218, WSL without the driver)"),
    _m("cudaErrorInvalidDevice CUDA_ERROR_INVALID_DEVICE hipErrorInvalidDevice", 101, 10, "invalid device ordinal",
       "invalid-device-index", ("devices-hidden",),
       refs="dg1kjd/dualmind-plus-one#3 (cuda:1 asked on a one-GPU machine); mjkwon2021/CAT-Net#49"),
    _m("cudaErrorInvalidKernelImage CUDA_ERROR_INVALID_IMAGE hipErrorInvalidImage", 200, 47,
       "device kernel image is invalid", VERSION, (ARCH,), AMBIGUOUS, "the exact reader kernel-image-invalid"),
    _m("cudaErrorNoKernelImageForDevice CUDA_ERROR_NO_BINARY_FOR_GPU hipErrorNoBinaryForGpu", 209, 48,
       "no kernel image is available for execution on the device|Unable to find code object for all current "
       "devices", ARCH, refs="oobabooga/textgen#5 and ROCm/legacy-rocm-build#2061 (HSA_OVERRIDE_GFX_VERSION: the "
       "GPU's target not in the build); the exact reader no-kernel-image"),
    _m("cudaErrorDeviceAlreadyInUse CUDA_ERROR_CONTEXT_ALREADY_IN_USE", 216, 54,
       "exclusive-thread device already in use by a different thread", HELD, weight=AMBIGUOUS,
       refs="kaldi-asr/kaldi#1487 (exclusive compute mode, device taken)"),
    _m("cudaErrorUnsupportedPtxVersion CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 222, None,
       "the provided PTX was compiled with an unsupported toolchain", VERSION,
       refs="pytorch/pytorch#48298 (driver not up to date); chelsea0x3b/llama-dfdx#6 (driver 525 -> 530); "
       "NVIDIA/gvdb-voxels#120"),
    _m("cudaErrorSystemNotReady CUDA_ERROR_SYSTEM_NOT_READY", 802, 83, "system not yet initialized", DRIVER,
       refs="pytorch/pytorch#35710 and ollama/ollama#12136 (NVSwitch systems: Fabric Manager not running)"),
    _m("cudaErrorSystemDriverMismatch CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 803, None,
       "system has unsupported display driver / cuda driver combination", VERSION, (DRIVER,), AMBIGUOUS,
       "easydiffusion/easydiffusion#134 (fixed by the latest driver) and #379; CompVis/stable-diffusion#438 "
       "(fixed by reinstalling torch)"),
    _m("cudaErrorCompatNotSupportedOnDevice CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 804, None,
       "forward compatibility was attempted on non supported HW", DRIVER, (VERSION,), AMBIGUOUS,
       "rapidsai/cusignal#398 (a reboot fixed it); SYSTRAN/faster-whisper#653 (reset the driver)"),
    _m("cudaErrorUnknown CUDA_ERROR_UNKNOWN hipErrorUnknown", 999, 30, "unknown error", DRIVER, (VERSION,),
       AMBIGUOUS, "rounds 8 and 11's labels (pytorch/pytorch#631, diku-dk/futhark#1117: a driver left unusable); "
       "gpufetch (a CUDA too old for the GPU)"),
    # Read and reported, no cause: threads settle these as bugs in a kernel, the hardware, or the code's own launch
    # configuration (ikawrakow/ik_llama.cpp#425, SPECFEM/specfem2d#1097, VITA-Group/TEGNAS#19: illegal access).
    _m("cudaErrorInvalidValue CUDA_ERROR_INVALID_VALUE hipErrorInvalidValue", 1, 11, "invalid argument"),
    _m("cudaErrorLaunchFailure CUDA_ERROR_LAUNCH_FAILED hipErrorLaunchFailure", 719, 4, "unspecified launch failure"),
    _m("cudaErrorLaunchTimeout CUDA_ERROR_LAUNCH_TIMEOUT", 702, 6, "the launch timed out and was terminated"),
    _m("cudaErrorLaunchOutOfResources CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES hipErrorLaunchOutOfResources", 701, 7,
       "too many resources requested for launch"),
    _m("cudaErrorInvalidConfiguration", 9, 9, "invalid configuration argument"),
    _m("cudaErrorECCUncorrectable CUDA_ERROR_ECC_UNCORRECTABLE", 214, 39, "uncorrectable ECC error encountered"),
    _m("cudaErrorSharedObjectInitFailed CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", 303, 41,
       "shared object initialization failed"),
    _m("cudaErrorOperatingSystem CUDA_ERROR_OPERATING_SYSTEM", 304, 63,
       "OS call failed or operation not supported on this OS"),
    _m("cudaErrorAssert CUDA_ERROR_ASSERT", 710, 59, "device-side assert triggered"),
    _m("cudaErrorIllegalAddress CUDA_ERROR_ILLEGAL_ADDRESS hipErrorIllegalAddress", 700, 77,
       "an illegal memory access was encountered"),
    _m("cudaErrorHardwareStackError CUDA_ERROR_HARDWARE_STACK_ERROR", 714, 72, "hardware stack error"),
    _m("cudaErrorIllegalInstruction CUDA_ERROR_ILLEGAL_INSTRUCTION", 715, 73, "an illegal instruction was "
       "encountered"),
    _m("cudaErrorMisalignedAddress CUDA_ERROR_MISALIGNED_ADDRESS", 716, 74, "misaligned address"),
    _m("cudaErrorInvalidPc CUDA_ERROR_INVALID_PC", 718, 76, "invalid program counter"),
    _m("cudaErrorNotPermitted CUDA_ERROR_NOT_PERMITTED", 800, 70, "operation not permitted"),
    _m("cudaErrorNotSupported CUDA_ERROR_NOT_SUPPORTED", 801, 71, "operation not supported"),
    _m("cudaErrorNvlinkUncorrectable CUDA_ERROR_NVLINK_UNCORRECTABLE", 220, 80, "uncorrectable NVLink error"),
    _m("cudaErrorInvalidPtx CUDA_ERROR_INVALID_PTX", 218, 78, "a PTX JIT compilation failed"),
    _m("cudaErrorJitCompilerNotFound CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 221, 81, "PTX JIT compiler library not "
       "found"),
    _m("cudaErrorCallRequiresNewerDriver", 36, None, "API call is not supported in the installed CUDA driver"),
)

# nvmlReturn_t (nvml.h) with nvmlErrorString's texts and pynvml's NVMLError_* class names.
NVML: tuple[Member, ...] = (
    _m("NVML_ERROR_DRIVER_NOT_LOADED NVMLError_DriverNotLoaded", 9, None, "Driver Not Loaded", DRIVER,
       refs="NVML's definition (the NVIDIA driver is not running); the exact reader nvml-init-failed"),
    _m("NVML_ERROR_LIBRARY_NOT_FOUND NVMLError_LibraryNotFound", 12, None, "NVML Shared Library Not Found", DRIVER,
       refs="NVML's definition (libnvidia-ml, a part of the driver, is missing); the exact reader smi-no-nvml"),
    _m("NVML_ERROR_LIB_RM_VERSION_MISMATCH NVMLError_LibRmVersionMismatch", 18, None,
       "Driver/library version mismatch|RM has detected an NVML/RM version mismatch", DRIVER,
       refs="illinois-scicomp/machine-shop-maintenance#60, yahoo/TensorFlowOnSpark#51, "
       "NVIDIA/nvidia-container-toolkit#394 (driver upgraded under the loaded module: a reboot fixed it)"),
    # NVML is a part of the driver: NVML that cannot initialise, or fails with its "Unknown Error", is the driver not
    # usable as loaded (CUDA's 999 likewise).
    _m("NVML_ERROR_UNINITIALIZED NVMLError_Uninitialized", 1, None, "Uninitialized", DRIVER,
       refs="deepfakes/faceswap#1101 (pynvml 'Uninitialized', no GPU detected: reinstalling the driver fixed it)"),
    _m("NVML_ERROR_UNKNOWN NVMLError_Unknown", 999, None, "Unknown Error", DRIVER, (VERSION,), AMBIGUOUS,
       refs="iperov/DeepFaceLab#191 (NVMLError_Unknown: 'reinstall video drivers', confirmed); as CUDA's 999"),
    _m("NVML_ERROR_GPU_IS_LOST NVMLError_GpuIsLost", 15, None, "GPU is lost"),
    _m("NVML_ERROR_NO_PERMISSION NVMLError_NoPermission", 4, None, "Insufficient Permissions"),
)

# ncclResult_t (nccl.h) with ncclGetErrorString's texts: every member is an NCCL failure between GPUs.
NCCL: tuple[Member, ...] = tuple(
    _m(name, number, None, text, "nccl-error", refs="the exact reader nccl-error (NCCL's own result)")
    for name, number, text in (
        ("ncclUnhandledCudaError", 1, "unhandled cuda error"), ("ncclSystemError", 2, "unhandled system error"),
        ("ncclInternalError", 3, "internal error"), ("ncclInvalidArgument", 4, "invalid argument"),
        ("ncclInvalidUsage", 5, "invalid usage"),
        ("ncclRemoteError", 6, "remote process exited or there was a network error")))
