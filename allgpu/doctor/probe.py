"""Read the machine: the only doctor code that touches NVML (``pynvml``), ``torch.cuda``, ``os.environ``
and ``/proc``. Every reading is guarded: a failed call becomes None or an error text, never an exception,
because the doctor's job is to explain broken machines.
"""

from __future__ import annotations

import ctypes
import math
import os
import platform
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

from allgpu.devices.advice import cpu_affinity, cpu_quota
from allgpu.doctor.reading import EnvironmentReading, GpuLink, GpuProcess, GpuReading, PeerAccess, TorchDevice

T = TypeVar("T")
MIB = 1024 * 1024
# nvmlDeviceGetTopologyCommonAncestor levels, named as `nvidia-smi topo -m` names them.
_TOPOLOGY = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _try(fn: Callable[[], T], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:  # a probe answers "unknown", it never fails the reading
        return default


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _read_torch() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch_version": str(torch.__version__), "torch_cuda": torch.version.cuda}
    if torch.version.cuda is None:
        out["nccl_available"] = False
        return out
    # get_arch_list() answers [] when no GPU is visible (some versions); the build's flags say it regardless.
    flags = _try(lambda: torch._C._cuda_getArchFlags())
    out["torch_arch_list"] = tuple(flags.split()) if flags else tuple(_try(torch.cuda.get_arch_list, []))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = _try(torch.cuda.is_available, False)
        init_error = None
        if not available:
            try:
                torch.cuda.init()
            except Exception as exc:  # its text says why (driver too old, no device, busy or unavailable)
                init_error = _error(exc)
    messages = [str(w.message) for w in caught if "CUDA" in str(w.message)] + ([init_error] if init_error else [])
    out["torch_cuda_available"] = bool(available)
    out["torch_cuda_error"] = " | ".join(dict.fromkeys(messages)) or None
    if available:
        n = torch.cuda.device_count()
        out["torch_device_count"] = n
        devices = []
        for i in range(n):
            props = torch.cuda.get_device_properties(i)
            uuid = _try(lambda: str(props.uuid))
            devices.append(TorchDevice(i, props.name, uuid, props.total_memory / MIB, f"{props.major}.{props.minor}"))
        out["torch_devices"] = tuple(devices)
        out["torch_peer_access"] = tuple(
            PeerAccess(a, b, bool(_try(lambda: torch.cuda.can_device_access_peer(a, b), False)))
            for a in range(n) for b in range(n) if a != b
        )
    import torch.distributed as dist

    out["nccl_available"] = bool(dist.is_available() and dist.is_nccl_available())
    version = _try(torch.cuda.nccl.version)
    if isinstance(version, tuple):
        out["nccl_version"] = ".".join(map(str, version))
    elif version is not None:
        out["nccl_version"] = str(version)
    return out


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    seen: dict[int, GpuProcess] = {}
    for getter in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for p in _try(lambda: getter(handle), []):
            name = _try(lambda: _text(nvml.nvmlSystemGetProcessName(p.pid)))
            if not name:
                name = _try(lambda: Path(f"/proc/{p.pid}/comm").read_text().strip())
            used = None if p.usedGpuMemory is None else p.usedGpuMemory / MIB
            seen.setdefault(p.pid, GpuProcess(p.pid, name or None, used))
    return tuple(seen.values())


def _gpu(nvml: Any, index: int, handle: Any) -> GpuReading:
    memory = _try(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    capability = _try(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    mig = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
    mig_devices: list[str] = []
    if mig and mig[0]:
        for k in range(_try(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle), 0)):
            child = _try(lambda: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, k))
            uuid = child is not None and _try(lambda: _text(nvml.nvmlDeviceGetUUID(child)))
            if uuid:
                mig_devices.append(uuid)
    return GpuReading(
        index=index,
        name=_text(_try(lambda: nvml.nvmlDeviceGetName(handle), "unknown GPU")),
        uuid=_text(_try(lambda: nvml.nvmlDeviceGetUUID(handle), "")),
        pci_bus_id=_try(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        memory_total_mib=None if memory is None else memory.total / MIB,
        memory_used_mib=None if memory is None else memory.used / MIB,
        utilization_percent=_try(lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        compute_capability=None if capability is None else f"{capability[0]}.{capability[1]}",
        mig_enabled=None if mig is None else bool(mig[0]),
        mig_pending=None if mig is None else bool(mig[1]),
        mig_devices=tuple(mig_devices),
        processes=_processes(nvml, handle),
    )


def _links(nvml: Any, handles: list[Any], gpus: list[GpuReading]) -> tuple[GpuLink, ...]:
    by_bus = {(g.pci_bus_id or "").lower(): g.index for g in gpus}
    nvlinks: dict[tuple[int, int], int] = {}
    nvlink_known = set()
    for a, handle in enumerate(handles):
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            state = _try(lambda: nvml.nvmlDeviceGetNvLinkState(handle, link))
            if state is None:
                break  # NotSupported: no NVLink on this GPU, or past its last link
            nvlink_known.add(a)
            if state != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = _try(lambda: _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId), "")
            b = by_bus.get(remote.lower())
            if b is not None and b != a:
                key = (min(a, b), max(a, b))
                nvlinks[key] = nvlinks.get(key, 0) + 1
    out = []
    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            level = _try(lambda: nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
            p2p = _try(lambda: nvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], nvml.NVML_P2P_CAPS_INDEX_READ))
            count = nvlinks.get((a, b), 0) if a in nvlink_known or b in nvlink_known else None
            topology = "NV" if count else _TOPOLOGY.get(level) if level is not None else None
            out.append(GpuLink(a, b, count, topology, None if p2p is None else p2p == nvml.NVML_P2P_STATUS_OK))
    return tuple(out)


def _read_nvml() -> dict[str, Any]:
    try:
        import pynvml as nvml
    except ImportError as exc:
        return {"nvml_error": f"nvidia-ml-py is not installed ({exc}); pip install nvidia-ml-py"}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        out = {"nvml_error": _error(exc)}
        if isinstance(exc, nvml.NVMLError_LibraryNotFound):
            # pynvml hides the loader's reason; ask the loader directly for the exact text.
            try:
                ctypes.CDLL("libnvidia-ml.so.1")
                out["nvml_library_error"] = "the library loads now but NVML reported it missing"
            except OSError as os_exc:
                out["nvml_library_error"] = str(os_exc)
        return out
    try:
        cuda = _try(nvml.nvmlSystemGetCudaDriverVersion)
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        gpus = [_gpu(nvml, i, h) for i, h in enumerate(handles)]
        return {
            "driver_version": _try(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
            "driver_cuda_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpus": tuple(gpus),
            "links": _links(nvml, handles, gpus),
        }
    except Exception as exc:
        return {"nvml_error": _error(exc)}
    finally:
        _try(nvml.nvmlShutdown)


def read_environment() -> EnvironmentReading:
    """Read this machine and process into an :class:`EnvironmentReading`.

    Initialises CUDA in the calling process when torch is a CUDA build (to read device properties and peer
    access), so call it before forking workers. Takes about a second on a multi-GPU machine. Never raises for
    a broken environment: each failure is recorded in the reading.
    """
    affinity = cpu_affinity()
    kernel = _try(lambda: Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip())
    fields: dict[str, Any] = {
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "kernel_driver": kernel or None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "pid": os.getpid(),
        "cpu_affinity": affinity,
        "cpu_total": os.cpu_count() or affinity,
        "cpu_quota": cpu_quota(),
    }
    fields.update(_read_nvml())
    fields.update(_read_torch())
    quota = fields["cpu_quota"]
    if quota is not None and not math.isfinite(quota):
        fields["cpu_quota"] = None
    return EnvironmentReading(**fields)


def nvml_gpu_sampler() -> Callable[[], list]:
    """A sampler for :class:`allgpu.doctor.gpu_samples.GpuWatch`: every GPU's utilisation, memory and processes
    through NVML, or None where NVML cannot be used (no driver, no library). NVML stays initialised for the
    sampler's life (one ``nvmlInit`` per run of ``allgpu doctor --run``)."""
    from allgpu.doctor.gpu_samples import GpuSample

    try:
        import pynvml as nvml

        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:  # no driver or library: --run goes on without GPU samples
        return None
    if not handles:
        return None

    def sample() -> list:
        out = []
        for i, h in enumerate(handles):
            util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
            used = nvml.nvmlDeviceGetMemoryInfo(h).used / MIB
            pids = tuple(p.pid for getter in (nvml.nvmlDeviceGetComputeRunningProcesses,
                                              nvml.nvmlDeviceGetGraphicsRunningProcesses)
                         for p in _try(lambda: getter(h), []))
            out.append(GpuSample(i, float(util), float(used), pids))
        return out

    return sample
