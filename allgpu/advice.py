"""Advice the core and the diagnosis tools share, computed in one place so every tool gives one answer.

* DataLoader workers per replica (:func:`suggest_workers`): ``allgpu doctor`` prints it,
  ``distribute_dataset(num_workers="auto")`` uses it, the step monitor's ``input-bound`` fix quotes its rule.
* Which visible GPUs run no replica and which several replicas share (:func:`device_use`): ``allgpu doctor``'s
  :func:`~allgpu.doctor.idle_devices` and the step monitor's ``idle-device`` rule both build on it, with one
  severity (:data:`IDLE_SEVERITY`) and one fix (:data:`IDLE_FIX`).

Pure functions of their arguments, plus two guarded readers of this process's cores (:func:`cpu_affinity`,
:func:`cpu_quota`). Imports neither torch nor anything of allgpu's but :mod:`allgpu.errors`.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from allgpu.errors import ArgumentError, DeviceError

# Past ~8 loader processes per replica decoding rarely gets faster and memory (one dataset copy each) grows.
MAX_WORKERS = 8
WORKERS_RULE = (f"the usable cores (CPU affinity, lowered by a cgroup quota) shared among the machine's replicas, "
                f"minus one for each replica's training loop, at most {MAX_WORKERS}")

IDLE_SEVERITY = "error"  # a device that does no work: the failure allgpu exists to prevent
IDLE_FIX = ("Use every visible GPU: MirroredStrategy() with no devices= argument / allgpu run --nproc-per-node auto, "
            "so every visible GPU gets a replica; if the GPUs are meant for something else, hide them with "
            "CUDA_VISIBLE_DEVICES.")
SHARED_FIX = "Give each replica its own GPU (one replica per visible device)."


@dataclass(frozen=True)
class WorkerAdvice:
    """``num_workers`` for each replica's ``torch.utils.data.DataLoader`` and the reason.

    Attributes:
        usable_cores: cores the job may use: the CPU affinity, lowered by a cgroup quota.
        replicas: replica processes that share those cores (one per visible GPU, at least one).
        workers: suggested ``num_workers`` per replica.
        reason: one sentence saying how the number was reached.
    """

    usable_cores: int
    replicas: int
    workers: int
    reason: str


def cpu_affinity() -> int:
    """Cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where that is missing)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def cpu_quota(cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup CPU quota in cores: v2 ``cpu.max`` or v1 ``cpu/cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` under
    ``cgroup``; None when unlimited or unreadable (never raises)."""
    try:
        text = (cgroup / "cpu.max").read_text().split()
        return _finite(int(text[0]) / int(text[1])) if text[0] != "max" else None
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        pass
    try:
        quota = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _finite(quota / period) if quota > 0 and period > 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def usable_cores(cpu_affinity: int, cpu_quota: float | None) -> int:
    """Cores a process may really use: ``os.sched_getaffinity`` count, capped by a cgroup quota (rounded down,
    at least 1)."""
    cores = max(1, cpu_affinity)
    if cpu_quota is not None and cpu_quota > 0:
        cores = min(cores, max(1, math.floor(cpu_quota)))
    return cores


def suggest_workers(cpu_affinity: int, cpu_quota: float | None, replicas: int) -> WorkerAdvice:
    """Split the usable cores among replicas, keeping one core per replica for its training loop.

    This follows the bound PyTorch's DataLoader warns past (``_check_worker_number_rationality``: more workers
    than cores in the affinity set), counted for all replicas together since each runs its own loader.

    Args:
        cpu_affinity: cores in the process's affinity set. cpu_quota: cgroup quota in cores, None if unlimited.
        replicas: replica processes on this machine.

    Raises:
        ArgumentError: (a ``ValueError``) ``replicas < 1`` or ``cpu_affinity < 1``.
    """
    if replicas < 1:
        raise ArgumentError(f"replicas={replicas}: at least one replica is needed to suggest DataLoader workers.")
    if cpu_affinity < 1:
        raise ArgumentError(f"cpu_affinity={cpu_affinity}: a process runs on at least one core.")
    cores = usable_cores(cpu_affinity, cpu_quota)
    limit = f" (cgroup quota {cpu_quota:g} of {cpu_affinity} cores)" if cores < cpu_affinity else ""
    per_replica = cores // replicas
    workers = min(MAX_WORKERS, max(0, per_replica - 1))
    who = f"{replicas} replica{'s' if replicas > 1 else ''}"
    have = f"{cores} usable core{'s' if cores > 1 else ''}{limit}"
    if workers == 0:
        reason = (f"{have} for {who} leaves no core spare: load in the training process (num_workers=0), or the "
                  "workers fight the training loop.")
    elif workers == MAX_WORKERS and per_replica - 1 > MAX_WORKERS:
        reason = (f"{have} / {who} = {per_replica} each; capped at {MAX_WORKERS}, past which loading rarely gets "
                  "faster and each worker holds its own dataset copy.")
    else:
        reason = f"{have} / {who} = {per_replica} each, minus one for the training loop."
    return WorkerAdvice(cores, replicas, workers, reason)


def workers_here(replicas: int) -> WorkerAdvice:
    """:func:`suggest_workers` for this process's cores (affinity and cgroup quota read now)."""
    return suggest_workers(cpu_affinity(), cpu_quota(), replicas)


@dataclass(frozen=True)
class DeviceUse:
    """How a machine's visible GPUs are used by the replicas on it.

    Attributes:
        visible: GPUs visible (``torch.cuda.device_count()``).
        replicas: torch index (``cuda:i``) of each replica, one entry per replica.
        idle: visible GPUs no replica runs on.
        shared: GPUs that more than one replica runs on.
    """

    visible: int
    replicas: tuple[int, ...]
    idle: tuple[int, ...]
    shared: tuple[int, ...]

    def idle_message(self) -> str:
        """``"3 of 4 visible GPUs run no replica: cuda:1, cuda:2, cuda:3 sit idle (replicas run on cuda:0)."``"""
        names = ", ".join(f"cuda:{i}" for i in self.idle)
        on = ", ".join(f"cuda:{i}" for i in sorted(set(self.replicas))) or "none"
        verb = "sits" if len(self.idle) == 1 else "sit"
        return (f"{len(self.idle)} of {self.visible} visible GPUs run no replica: {names} {verb} idle "
                f"(replicas run on {on}).")

    def shared_message(self) -> str:
        """``"Several replicas share cuda:0 (2 replicas): they compete for its compute and memory."``"""
        count = Counter(self.replicas)
        desc = ", ".join(f"cuda:{i} ({count[i]} replicas)" for i in self.shared)
        return f"Several replicas share {desc}: they compete for its compute and memory."


def device_use(visible_device_count: int, replica_devices: Sequence[int]) -> DeviceUse:
    """Which visible GPUs run no replica and which several replicas share.

    Args:
        visible_device_count: ``torch.cuda.device_count()`` (GPUs left visible by ``CUDA_VISIBLE_DEVICES``).
        replica_devices: the torch index (``cuda:i``) each replica runs on, one entry per replica.

    Raises:
        DeviceError: (a ``ValueError``) ``visible_device_count`` is negative or not an int, or a replica device
            is not an int in ``0 .. visible_device_count - 1``.
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
    used = Counter(replica_devices)
    return DeviceUse(visible_device_count, tuple(replica_devices),
                     tuple(i for i in range(visible_device_count) if i not in used),
                     tuple(sorted(i for i, n in used.items() if n > 1)))
