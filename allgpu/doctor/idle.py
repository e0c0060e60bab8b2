"""The rule for a visible device that runs no replica, for callers that know where replicas run
(the step monitor, strategies). Pure: it reads nothing from the machine. The computation, severity and fix
are :mod:`allgpu.devices.advice`'s, shared with the step monitor's ``idle-device`` rule."""

from __future__ import annotations

from typing import Sequence

from allgpu.devices.advice import IDLE_FIX, IDLE_SEVERITY, SHARED_FIX, device_use
from allgpu.findings import Finding

__all__ = ["IDLE_FIX", "idle_devices"]


def idle_devices(visible_device_count: int, replica_devices: Sequence[int]) -> list[Finding]:
    """Problems for visible GPUs with no replica, and for GPUs that several replicas share.

    Args:
        visible_device_count: ``torch.cuda.device_count()`` (GPUs left visible by ``CUDA_VISIBLE_DEVICES``).
        replica_devices: the torch index (``cuda:i``) each replica runs on, one entry per replica.

    Returns:
        ``[]`` when every visible GPU runs exactly one replica; else an ``"idle-device"`` error naming the idle
        ``cuda:i`` (``devices`` holds torch indices) and/or a ``"shared-device"`` warning.

    Raises:
        DeviceError: ``visible_device_count`` is negative or not an int, or a replica device is not an int in
            ``0 .. visible_device_count - 1``.
    """
    use = device_use(visible_device_count, replica_devices)
    problems = []
    if use.idle:
        problems.append(Finding("idle-device", IDLE_SEVERITY, use.idle_message(), IDLE_FIX, devices=use.idle))
    if use.shared:
        problems.append(Finding("shared-device", "warning", use.shared_message(), SHARED_FIX, devices=use.shared))
    return problems
