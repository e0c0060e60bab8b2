"""Device names, discovery and ``CUDA_VISIBLE_DEVICES``: the core's one home for both.

Devices can be named the TensorFlow way or the PyTorch way; all parse to one :class:`Device`:

=========================================  ====================
name                                       Device
=========================================  ====================
``"/gpu:1"``, ``"/GPU:1"``, ``"GPU:1"``    ``Device("cuda", 1)``
``"cuda:1"``, ``"cuda"``                   ``Device("cuda", 1)``, ``Device("cuda", 0)``
``"/cpu:0"``, ``"CPU:0"``, ``"cpu"``       ``Device("cpu", 0)``
``"/job:worker/replica:0/task:1/device:GPU:0"``  ``Device("cuda", 0)`` (job/task kept in ``.task``)
=========================================  ====================

Indices are *visible* indices, as in both frameworks: with ``CUDA_VISIBLE_DEVICES=2,3`` the name ``"/gpu:0"``
means physical GPU 2. :func:`explain_cuda_visible_devices` says what the variable does.

Modules: :mod:`.names` (names, discovery, the replicas' devices), :mod:`.visible` (``CUDA_VISIBLE_DEVICES``
parsed as CUDA does, mapped onto the driver's GPUs, explained). ``allgpu doctor`` and the step monitor import
from here; nothing here imports a diagnosis tool.
"""

from allgpu.devices.names import (
    ACCEPTED_FORMS,
    Device,
    cuda_device_count,
    explain_cuda_visible_devices,
    parse_cuda_visible_devices,
    parse_device,
    parse_devices,
    resolve_replica_devices,
    visible_devices,
    why_no_gpu,
    why_visible,
)
from allgpu.devices.visible import (
    VisibleDevices,
    VisibleMapping,
    map_to_driver,
    nvml_selector,
    parse_visible_devices,
)
from allgpu.errors import DeviceError

__all__ = [
    "ACCEPTED_FORMS",
    "Device",
    "DeviceError",
    "VisibleDevices",
    "VisibleMapping",
    "cuda_device_count",
    "explain_cuda_visible_devices",
    "map_to_driver",
    "nvml_selector",
    "parse_cuda_visible_devices",
    "parse_device",
    "parse_devices",
    "parse_visible_devices",
    "resolve_replica_devices",
    "visible_devices",
    "why_no_gpu",
    "why_visible",
]
