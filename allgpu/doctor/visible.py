"""``CUDA_VISIBLE_DEVICES`` parsing, mapping and explanation moved to :mod:`allgpu.devices.visible` (the core
owns device names; the doctor imports from it, never the reverse). These names stay for existing imports."""

from allgpu.devices.visible import (
    FORMS,
    VisibleDevices,
    VisibleMapping,
    explain,
    map_to_driver,
    parse_visible_devices,
)
from allgpu.doctor.reading import GpuReading

__all__ = ["FORMS", "GpuReading", "VisibleDevices", "VisibleMapping", "explain", "map_to_driver",
           "parse_visible_devices"]
