"""An environment reading: everything ``allgpu doctor`` reads, as plain frozen data.

A reading is made by :func:`allgpu.doctor.probe.read_environment` (the only code that touches NVML,
``torch.cuda``, ``os.environ`` and ``/proc``) and judged by the pure rules in :mod:`allgpu.doctor.rules`.
Readings round-trip through JSON (:meth:`EnvironmentReading.to_dict` / :meth:`EnvironmentReading.from_dict`),
so a reading recorded on one machine can be diagnosed on another and the rules can be tested without a GPU.

Glossary: a *driver index* is the GPU's index in NVML (``nvidia-smi``) order, PCI bus order; a *torch index*
is ``i`` in ``cuda:i``, counted over the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible. Memory is in MiB.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from allgpu.errors import ReadingFormatError  # noqa: F401  (re-exported: its home was here)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU, as NVML lists it.

    Attributes:
        pid: process id (in the driver's PID namespace; in a container it may not exist locally).
        name: executable name, or None when neither NVML nor ``/proc`` could tell.
        used_mib: device memory the process holds, MiB; None when the driver does not say (e.g. WDDM).
    """

    pid: int
    name: str | None = None
    used_mib: float | None = None


@dataclass(frozen=True)
class GpuReading:
    """One GPU as the NVIDIA driver sees it (NVML), whatever ``CUDA_VISIBLE_DEVICES`` says.

    Attributes:
        index: driver index (``nvidia-smi`` order).
        name: marketing name, e.g. ``"NVIDIA A100-SXM4-80GB"``.
        uuid: ``"GPU-…"`` identifier, the form ``CUDA_VISIBLE_DEVICES`` accepts.
        pci_bus_id: e.g. ``"00000000:07:00.0"``.
        memory_total_mib / memory_used_mib: device memory, MiB.
        utilization_percent: GPU busy time over the driver's last sample period, 0-100.
        compute_capability: ``"8.0"`` style, which must be in torch's architecture list.
        mig_enabled / mig_pending: MIG mode now and after the next GPU reset; None when not supported.
        mig_devices: ``"MIG-…"`` UUIDs of the GPU's MIG instances.
        processes: processes holding memory on this GPU.
    """

    index: int
    name: str
    uuid: str
    pci_bus_id: str | None = None
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    utilization_percent: int | None = None
    compute_capability: str | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    mig_devices: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuLink:
    """What the driver says about a pair of GPUs (driver indices ``a < b``).

    Attributes:
        nvlinks: number of active NVLink links joining them (0: none; None: the driver cannot tell).
        topology: closest common ancestor, ``nvidia-smi topo -m`` style: ``"NV"``/``"PIX"``/``"PXB"``/
            ``"PHB"``/``"NODE"``/``"SYS"``; None when unknown.
        p2p_read: whether the driver reports peer-to-peer reads as supported; None when unknown.
    """

    a: int
    b: int
    nvlinks: int | None = None
    topology: str | None = None
    p2p_read: bool | None = None


@dataclass(frozen=True)
class TorchDevice:
    """One device as PyTorch sees it (``torch.cuda.get_device_properties(index)``)."""

    index: int
    name: str
    uuid: str | None = None
    memory_total_mib: float | None = None
    compute_capability: str | None = None


@dataclass(frozen=True)
class PeerAccess:
    """``torch.cuda.can_device_access_peer(a, b)`` for torch indices ``a != b``."""

    a: int
    b: int
    ok: bool


@dataclass(frozen=True)
class EnvironmentReading:
    """Everything ``allgpu doctor`` read from one machine, one process.

    Attributes:
        python_version / platform: ``platform.python_version()`` and ``platform.platform()``.
        torch_version: ``torch.__version__``, e.g. ``"2.13.0+cpu"``.
        torch_cuda: ``torch.version.cuda`` (the CUDA torch was built with, ``"12.8"``); None for a CPU build.
        torch_arch_list: ``torch.cuda.get_arch_list()``, e.g. ``("sm_80", "sm_90")``.
        torch_cuda_available / torch_device_count: ``torch.cuda.is_available()``, ``torch.cuda.device_count()``.
        torch_devices: per-device properties, torch index order.
        torch_cuda_error: the text CUDA initialisation gave when it failed (warning or exception), else None.
        torch_peer_access: ``can_device_access_peer`` for every ordered pair of torch devices.
        nccl_available / nccl_version: ``torch.distributed.is_nccl_available()``, ``torch.cuda.nccl.version()``.
        nvml_error: why NVML could not be used (``"NVMLError_LibraryNotFound: …"``), else None.
        nvml_library_error: the dynamic loader's own text when ``libnvidia-ml.so.1`` did not load.
        kernel_driver: first line of ``/proc/driver/nvidia/version`` (the kernel module), None when absent.
        driver_version: ``nvmlSystemGetDriverVersion()``, e.g. ``"550.54.15"``.
        driver_cuda_version: newest CUDA the driver supports (``nvmlSystemGetCudaDriverVersion``), ``"12.4"``.
        gpus: GPUs the driver sees, driver order. links: GPU pairs, when the driver tells.
        cuda_visible_devices / cuda_device_order: the variables, None when unset.
        nccl_env: the ``NCCL_*`` variables that were set.
        pid: the reading process, so its own GPU memory is not taken for another user's.
        cpu_affinity: cores this process may run on (``os.sched_getaffinity``).
        cpu_total: ``os.cpu_count()``. cpu_quota: cgroup CPU limit in cores, None when unlimited.
    """

    python_version: str
    platform: str
    torch_version: str
    torch_cuda: str | None = None
    torch_arch_list: tuple[str, ...] = ()
    torch_cuda_available: bool = False
    torch_device_count: int = 0
    torch_devices: tuple[TorchDevice, ...] = ()
    torch_cuda_error: str | None = None
    torch_peer_access: tuple[PeerAccess, ...] = ()
    nccl_available: bool = False
    nccl_version: str | None = None
    nvml_error: str | None = None
    nvml_library_error: str | None = None
    kernel_driver: str | None = None
    driver_version: str | None = None
    driver_cuda_version: str | None = None
    gpus: tuple[GpuReading, ...] = ()
    links: tuple[GpuLink, ...] = ()
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    pid: int = 0
    cpu_affinity: int = 1
    cpu_total: int = 1
    cpu_quota: float | None = None
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EnvironmentReading":
        """Rebuild a reading saved with :meth:`to_dict` (``allgpu doctor --json`` puts it under ``"reading"``).

        Raises:
            ReadingFormatError: a required field is missing, a field is unknown, or a value has the wrong type.
        """
        return _build(cls, data, "reading")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ReadingFormatError(
            f"{where}: expected a JSON object for {cls.__name__}, got {type(data).__name__}. "
            "Fix: pass the output of `allgpu doctor --json` (or its \"reading\" member)."
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ReadingFormatError(
            f"{where}: unknown field(s) {', '.join(unknown)} for {cls.__name__}; "
            f"expected some of {', '.join(fields)}. Fix: record the reading again with this allgpu version."
        )
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ReadingFormatError(
                    f"{where}: required field {name!r} of {cls.__name__} is missing. "
                    "Fix: record the reading again with `allgpu doctor --json`."
                )
            continue
        kwargs[name] = _convert(hints[name], data[name], f"{where}.{name}")
    return cls(**kwargs)


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ReadingFormatError(f"{where}: expected a list, got {value!r}.")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, Mapping):
            raise ReadingFormatError(f"{where}: expected an object of strings, got {value!r}.")
        return {str(k): str(v) for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, str, bool) and isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
        return hint(value)
    raise ReadingFormatError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}.")
