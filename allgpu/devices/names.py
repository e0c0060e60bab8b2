"""Device names and discovery: TensorFlow and PyTorch names parsed to one :class:`Device` (the accepted forms
are tabled in :mod:`allgpu.devices`), the GPUs this process sees, and the devices a job's replicas use.
``CUDA_VISIBLE_DEVICES`` itself is parsed in :mod:`allgpu.devices.visible`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from allgpu.devices.visible import explain, parse_visible_devices
from allgpu.errors import DeviceError

ACCEPTED_FORMS = (
    '"/gpu:N", "/GPU:N", "GPU:N", "gpu:N", "cuda:N", "cuda", "/cpu:0", "CPU:0", "cpu", '
    '"/job:NAME/replica:R/task:T/device:GPU:N"'
)

_SIMPLE = re.compile(r"^/?(?P<kind>gpu|cpu|cuda)(?::(?P<index>\d+))?$", re.IGNORECASE)
_FULL = re.compile(
    r"^(?:/job:(?P<job>[\w-]+))?(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
    r"/device:(?P<kind>gpu|cpu|cuda):(?P<index>\d+)$",
    re.IGNORECASE,
)


@dataclass(frozen=True, order=True)
class Device:
    """One device of one machine.

    Attributes:
        kind: ``"cuda"`` or ``"cpu"``.
        index: visible index (``cuda:index``); CPU replicas use it to tell replicas apart.
        task: for TensorFlow's full names, ``(job, task)``; None otherwise.
    """

    kind: str
    index: int = 0
    task: tuple[str, int] | None = None

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def torch_device(self):
        """The ``torch.device`` this names. All CPU replicas map to ``torch.device("cpu")``."""
        import torch

        return torch.device("cuda", self.index) if self.is_cuda else torch.device("cpu")

    def __str__(self) -> str:
        return f"/{'gpu' if self.is_cuda else 'cpu'}:{self.index}"


def parse_device(name: "str | Device | object") -> Device:
    """Parse a TensorFlow or PyTorch device name into a :class:`Device`.

    Args:
        name: a string (see the module docstring), a ``torch.device``, or a Device.

    Raises:
        DeviceError: the name matches no accepted form; the message quotes it and lists the forms.
    """
    if isinstance(name, Device):
        return name
    if type(name).__name__ == "device" and hasattr(name, "type"):  # torch.device, without importing torch
        if name.type not in ("cuda", "cpu"):
            raise DeviceError(f"device {str(name)!r}: allgpu supports cuda and cpu devices, not {name.type!r}.")
        return Device(name.type, name.index or 0)
    if not isinstance(name, str):
        raise DeviceError(f"device {name!r} is a {type(name).__name__}; expected a string such as {ACCEPTED_FORMS}.")
    text = name.strip()
    match = _SIMPLE.match(text)
    task = None
    if match is None:
        match = _FULL.match(text)
        if match is not None and match.group("job"):
            task = (match.group("job"), int(match.group("task") or 0))
    if match is None:
        raise DeviceError(f"device name {name!r} is not understood. Accepted forms: {ACCEPTED_FORMS}.")
    kind = match.group("kind").lower()
    kind = "cuda" if kind in ("gpu", "cuda") else "cpu"
    return Device(kind, int(match.group("index") or 0), task)


def parse_devices(names: Iterable) -> list[Device]:
    """Parse several names; duplicates of a GPU and mixed CPU/GPU lists are errors.

    CPU replicas are told apart by index: ``["/cpu:0", "/cpu:1"]`` asks for two CPU replicas.

    Raises:
        DeviceError: a bad name, an empty list, a GPU listed twice, or CPU mixed with GPU.
    """
    if isinstance(names, (str, Device)):
        names = [names]
    devices = [parse_device(n) for n in names]
    if not devices:
        raise DeviceError("devices=[] names no device; pass None to use every visible GPU, or e.g. ['/gpu:0', '/gpu:1'].")
    kinds = {d.kind for d in devices}
    if len(kinds) > 1:
        raise DeviceError(
            f"devices={[str(d) for d in devices]} mixes CPU and GPU; every replica must use the same kind of device. "
            "Fix: list only GPUs, or only CPU replicas."
        )
    seen = [(d.kind, d.index) for d in devices]
    if len(set(seen)) != len(seen):
        raise DeviceError(f"devices={[str(d) for d in devices]} lists a device twice; each replica needs its own.")
    return devices


def parse_cuda_visible_devices(value: str | None):
    """Parse ``CUDA_VISIBLE_DEVICES`` the way the CUDA runtime does (indices, ``GPU-``/``MIG-`` UUIDs, empty,
    ``-1``, repeats, junk); see :mod:`allgpu.devices.visible`, the one implementation, checked against PyTorch's
    own parser. Returns its ``VisibleDevices``; ``.effective`` lists the entries that select a GPU."""
    return parse_visible_devices(value)


def explain_cuda_visible_devices(value: str | None) -> str:
    """One sentence on which GPUs ``CUDA_VISIBLE_DEVICES=value`` leaves visible."""
    return explain(parse_cuda_visible_devices(value))


def cuda_device_count() -> int:
    """GPUs visible to PyTorch (0 on a CPU build or a machine without a driver); never raises."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver install must not break device discovery
        return 0


def visible_devices() -> list[Device]:
    """Every GPU this process can use, as Devices; ``[Device("cpu", 0)]`` when there is none.

    Honours ``CUDA_VISIBLE_DEVICES`` (through PyTorch's own count, which applies it).
    """
    count = cuda_device_count()
    if count == 0:
        return [Device("cpu", 0)]
    return [Device("cuda", i) for i in range(count)]


def why_no_gpu(env: Mapping[str, str] | None = None) -> str:
    """The most specific reason this process sees no GPU, in one sentence."""
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None and not parse_cuda_visible_devices(raw).effective:
        return explain_cuda_visible_devices(raw)
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed."
    if torch.version.cuda is None:
        return f"PyTorch {torch.__version__} is a CPU build (no CUDA support compiled in)."
    return f"PyTorch {torch.__version__} is built for CUDA {torch.version.cuda}, but no CUDA device is available " \
        "(no NVIDIA driver, or it is too old); run `allgpu doctor`."


def resolve_replica_devices(
    num_replicas: int | None, devices: Iterable | None, *, cpu_replicas_by_default: int = 1
) -> list[Device]:
    """The devices a job's replicas use: named ones, the first ``num_replicas`` GPUs, or every visible GPU.

    Without a GPU, ``num_replicas=N`` gives N CPU replicas and no argument gives ``cpu_replicas_by_default``.

    Raises:
        DeviceError: both arguments disagree, ``num_replicas < 1``, or more GPUs are asked for than are visible.
    """
    if devices is not None:
        parsed = parse_devices(devices)
        if num_replicas is not None and num_replicas != len(parsed):
            raise DeviceError(
                f"num_replicas={num_replicas} but devices= lists {len(parsed)} devices; give only one of them."
            )
        return parsed
    gpus = [d for d in visible_devices() if d.is_cuda]
    if num_replicas is None:
        return gpus or [Device("cpu", i) for i in range(cpu_replicas_by_default)]
    if num_replicas < 1:
        raise DeviceError(f"num_replicas={num_replicas}; expected a positive number of replicas.")
    if gpus and num_replicas > len(gpus):
        raise DeviceError(
            f"num_replicas={num_replicas} but only {len(gpus)} GPUs are visible ({why_visible()}). "
            "Fix: ask for at most that many, or make more visible."
        )
    return gpus[:num_replicas] if gpus else [Device("cpu", i) for i in range(num_replicas)]


def why_visible() -> str:
    return explain_cuda_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
