"""Advice the core and the diagnosis tools share, computed in one place so every tool gives one answer.

* DataLoader workers per replica (:func:`suggest_workers`): ``allgpu doctor`` prints it,
  ``distribute_dataset(num_workers="auto")`` uses it, the step monitor's ``input-bound`` fix quotes its rule.
* Which visible GPUs run no replica and which several replicas share (:func:`device_use`): ``allgpu doctor``'s
  :func:`~allgpu.doctor.idle_devices` and the step monitor's ``idle-device`` rule both build on it, with one
  severity (:data:`IDLE_SEVERITY`) and one fix (:data:`IDLE_FIX`).
* Whether a model's training state fits one device mirrored, or only sharded (:class:`MemoryFit`,
  :func:`memory_finding`): ``fit``'s warning on CUDA, the step monitor, ``allgpu doctor --run`` and the lint rule
  AG003 all give this one answer.

Pure functions of their arguments, plus two guarded readers of this process's cores (:func:`cpu_affinity`,
:func:`cpu_quota`). Imports neither torch nor anything of allgpu's but :mod:`allgpu.errors` and :mod:`allgpu.findings`.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from allgpu.errors import ArgumentError, DeviceError
from allgpu.findings import Finding

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


# ---- Will the training state fit one device? ------------------------------------------------------------------
# The accounting of Rajbhandari et al., "ZeRO" (SC 2020), section 3.1: per parameter a mirrored replica holds the
# parameter, its gradient (trainable ones only) and the optimizer's per-parameter state, each the parameter's size
# and dtype; fully sharded, each replica holds 1/N of all three. Activations and temporary buffers are not counted,
# so "does not fit" is certain and "fits" optimistic: only MEMORY_HEADROOM of a device counts as usable for state.
MEMORY_HEADROOM = 0.9
MEMORY_FINDING = "needs-sharding"
SHARD_FIX = ("allgpu.FullyShardedStrategy() in place of {strategy}: the same API and launch, with parameters, "
             "gradients and optimizer state sharded across the {replicas} replicas ({sharded} each).")
MORE_DEVICES_FIX = ("allgpu.FullyShardedStrategy() on at least {needed} devices, or "
                    "allgpu.FullyShardedStrategy(offload_to_cpu=True) to keep shards and optimizer state in host memory.")
META_FIX = (" The parameters alone exceed a device: build the model under `with strategy.scope(), "
            "torch.device('meta'):` so that only the shards are ever allocated.")


def optimizer_slots(name: str | None, momentum: bool = False) -> int:
    """Per-parameter state tensors an optimizer class keeps, each the parameter's size.

    ``name`` is the class name (``"AdamW"``), None for no optimizer (0). Adam-likes keep two moments, SGD one
    momentum buffer when ``momentum`` (else none), RMSprop / Adagrad / ASGD one; an unknown class counts as Adam-like
    (2), the common case, so an unknown optimizer never makes a model look smaller than it is.
    """
    if name is None:
        return 0
    if name == "SGD":
        return 1 if momentum else 0
    if name in ("RMSprop", "Adagrad", "ASGD"):
        return 1
    return 2


def human_bytes(n: float) -> str:
    """``1536 -> "1.50 KiB"``, ``3 * 2**30 -> "3.00 GiB"``: binary units, two decimals."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class MemoryFit:
    """One replica's training state (parameters, gradients, optimizer state) against one device's memory.

    Attributes:
        params: parameter elements, each counted once (a tied weight once).
        param_bytes: bytes of all those parameters. trainable_bytes: bytes of those that require grad.
        optimizer: the optimizer's class name, None without one. slots: its per-parameter state tensors.
        replicas: devices the state could be sharded across (the replicas, or more devices visible).
        device_bytes: one device's total memory in bytes, None where there is no such limit (CPU).
        strategy: the strategy's class name (``"MirroredStrategy"``).
        capacity_source: where ``device_bytes`` came from (``"torch.cuda.get_device_properties(cuda:0)"``).
    """

    params: int
    param_bytes: int
    trainable_bytes: int
    optimizer: str | None
    slots: int
    replicas: int
    device_bytes: int | None
    strategy: str = "MirroredStrategy"
    capacity_source: str = ""

    @property
    def mirrored_bytes(self) -> int:
        """Bytes every replica holds without sharding: parameters, plus gradient and optimizer state per trainable."""
        return self.param_bytes + self.trainable_bytes * (1 + self.slots)

    @property
    def sharded_bytes(self) -> int:
        """Bytes one replica holds under full sharding across :attr:`replicas`: 1/N of :attr:`mirrored_bytes`."""
        return -(-self.mirrored_bytes // max(1, self.replicas))

    @property
    def budget(self) -> float | None:
        """Bytes of a device usable for the state: ``MEMORY_HEADROOM`` of it; None without a device limit."""
        return None if self.device_bytes is None else self.device_bytes * MEMORY_HEADROOM

    @property
    def fits_mirrored(self) -> bool:
        return self.budget is None or self.mirrored_bytes <= self.budget

    @property
    def fits_sharded(self) -> bool:
        return self.budget is None or self.sharded_bytes <= self.budget

    @property
    def devices_needed(self) -> int:
        """Devices the state must be sharded across to fit each one's budget (1 when there is no limit)."""
        return 1 if self.budget is None else max(1, math.ceil(self.mirrored_bytes / self.budget))

    def to_dict(self) -> dict:
        """The fields plus ``mirrored_bytes`` and ``sharded_bytes`` (plain JSON values)."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__},
                "mirrored_bytes": self.mirrored_bytes, "sharded_bytes": self.sharded_bytes}

    @classmethod
    def from_dict(cls, data: dict) -> "MemoryFit":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _sharded_sentence(fit: MemoryFit, sharded: str) -> str:
    if fit.fits_sharded:
        return f" Sharded across the {fit.replicas} replicas it is {sharded} each, which fits."
    if fit.replicas > 1:
        return f" Sharded across {fit.replicas} replicas it is {sharded} each, still too much."
    return f" Sharded, it would need at least {fit.devices_needed} devices."


def memory_finding(fit: MemoryFit, replica: int | None = None) -> Finding | None:
    """A ``needs-sharding`` finding when the state does not fit one device's budget under ``fit.strategy``; None
    when it fits, or when there is no device limit.

    Severity ``"error"`` when the state exceeds the whole device (training cannot run mirrored), ``"warning"``
    when it fits the device but not its :data:`MEMORY_HEADROOM` (activations will not). The fix names
    ``allgpu.FullyShardedStrategy()`` when the sharded share fits, else the devices needed or CPU offload. With
    ``fit.strategy == "FullyShardedStrategy"`` (already sharded, not offloaded) the share is judged instead.
    """
    if fit.strategy == "FullyShardedStrategy":
        return _sharded_finding(fit, replica)
    if fit.fits_mirrored:
        return None
    over = fit.mirrored_bytes > fit.device_bytes
    opt = f"{fit.optimizer} state ({fit.slots} tensor{'s' if fit.slots != 1 else ''} a parameter)" if fit.optimizer \
        else "no optimizer state on the device"
    sharded = human_bytes(fit.sharded_bytes)
    message = (f"{fit.strategy} keeps a full copy of the training state on every replica: {fit.params:,} parameters "
               f"({human_bytes(fit.param_bytes)}), their gradients and {opt} need {human_bytes(fit.mirrored_bytes)} "
               f"per replica, " + (f"more than one device's {human_bytes(fit.device_bytes)}." if over else
                                   f"over {MEMORY_HEADROOM:.0%} of one device's {human_bytes(fit.device_bytes)}, "
                                   "leaving too little for activations.") + _sharded_sentence(fit, sharded))
    fix = (SHARD_FIX.format(strategy=fit.strategy, replicas=fit.replicas, sharded=sharded) if fit.fits_sharded
           else MORE_DEVICES_FIX.format(needed=fit.devices_needed))
    if fit.param_bytes > fit.budget:  # the parameters alone: building the model in full would fail first
        fix += META_FIX
    evidence = (f"parameters: {fit.params} elements, {fit.param_bytes} bytes ({fit.trainable_bytes} trainable)",
                f"per replica under {fit.strategy}: {fit.mirrored_bytes} bytes",
                f"per replica fully sharded across {fit.replicas}: {fit.sharded_bytes} bytes",
                f"device memory: {fit.device_bytes} bytes" + (f" ({fit.capacity_source})" if fit.capacity_source
                                                               else ""))
    return Finding(MEMORY_FINDING, "error" if over else "warning", message, fix, replica=replica, evidence=evidence)


def _sharded_finding(fit: MemoryFit, replica: int | None) -> Finding | None:
    """Under FullyShardedStrategy: a finding when even each replica's 1/N share exceeds the budget."""
    if fit.fits_sharded:
        return None
    over = fit.sharded_bytes > fit.device_bytes
    message = (f"FullyShardedStrategy holds 1/{fit.replicas} of the training state on each replica: {fit.params:,} "
               f"parameters ({human_bytes(fit.param_bytes)}), their gradients and optimizer state come to "
               f"{human_bytes(fit.sharded_bytes)} per replica, " + (
                   f"more than one device's {human_bytes(fit.device_bytes)}." if over else
                   f"over {MEMORY_HEADROOM:.0%} of one device's {human_bytes(fit.device_bytes)}, leaving too little "
                   "for activations."))
    evidence = (f"parameters: {fit.params} elements, {fit.param_bytes} bytes ({fit.trainable_bytes} trainable)",
                f"per replica fully sharded across {fit.replicas}: {fit.sharded_bytes} bytes",
                f"device memory: {fit.device_bytes} bytes" + (f" ({fit.capacity_source})" if fit.capacity_source
                                                               else ""))
    return Finding(MEMORY_FINDING, "error" if over else "warning", message,
                   MORE_DEVICES_FIX.format(needed=fit.devices_needed), replica=replica, evidence=evidence)
