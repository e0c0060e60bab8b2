"""The rule for a visible device that runs no replica, for callers that know where replicas run
(the step monitor, strategies). Pure: it reads nothing from the machine."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from allgpu.doctor.problem import Problem
from allgpu.errors import DeviceError

IDLE_FIX = ("use MirroredStrategy() with no devices= argument / allgpu run --nproc-per-node auto, "
            "so every visible GPU gets a replica")


def idle_devices(visible_device_count: int, replica_devices: Sequence[int]) -> list[Problem]:
    """Problems for visible GPUs with no replica, and for GPUs that several replicas share.

    Args:
        visible_device_count: ``torch.cuda.device_count()`` (GPUs left visible by ``CUDA_VISIBLE_DEVICES``).
        replica_devices: the torch index (``cuda:i``) each replica runs on, one entry per replica.

    Returns:
        ``[]`` when every visible GPU runs exactly one replica; else an ``"idle-device"`` warning naming the
        idle ``cuda:i`` (``Problem.devices`` holds torch indices) and/or a ``"shared-device"`` warning.

    Raises:
        DeviceError: ``visible_device_count`` is negative or not an int, or a replica device is not an int in
            ``0 .. visible_device_count - 1``.
    """
    if isinstance(visible_device_count, bool) or not isinstance(visible_device_count, int) \
            or visible_device_count < 0:
        raise DeviceError(
            f"idle_devices(visible_device_count={visible_device_count!r}): expected a count >= 0, "
            "e.g. torch.cuda.device_count()."
        )
    for d in replica_devices:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < visible_device_count:
            raise DeviceError(
                f"idle_devices(replica_devices={list(replica_devices)!r}): {d!r} is not a visible device index; "
                f"expected ints in 0..{visible_device_count - 1} (cuda:i with {visible_device_count} visible "
                "GPUs). Fix: pass torch indices, not driver (nvidia-smi) indices."
            )
    problems = []
    used = Counter(replica_devices)
    idle = tuple(i for i in range(visible_device_count) if i not in used)
    if idle:
        names = ", ".join(f"cuda:{i}" for i in idle)
        on = ", ".join(f"cuda:{i}" for i in sorted(used)) or "none"
        problems.append(Problem(
            "idle-device", "warning",
            f"{len(idle)} of {visible_device_count} visible GPUs run no replica: {names} sit idle "
            f"(replicas run on {on}).",
            IDLE_FIX[0].upper() + IDLE_FIX[1:] + ".", idle))
    shared = tuple(sorted(i for i, n in used.items() if n > 1))
    if shared:
        desc = ", ".join(f"cuda:{i} ({used[i]} replicas)" for i in shared)
        problems.append(Problem(
            "shared-device", "warning",
            f"Several replicas share {desc}: they compete for its compute and memory.",
            "Give each replica its own GPU (one replica per visible device).", shared))
    return problems
