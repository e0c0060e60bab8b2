"""How many DataLoader workers a replica should start, given the cores this machine lends the job."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Past ~8 loader processes per replica decoding rarely gets faster and memory (one dataset copy each) grows.
MAX_WORKERS = 8


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

    Raises:
        ValueError: ``replicas < 1`` or ``cpu_affinity < 1``.
    """
    if replicas < 1:
        raise ValueError(f"replicas={replicas}: at least one replica is needed to suggest DataLoader workers.")
    if cpu_affinity < 1:
        raise ValueError(f"cpu_affinity={cpu_affinity}: a process runs on at least one core.")
    cores = usable_cores(cpu_affinity, cpu_quota)
    limit = f" (cgroup quota {cpu_quota:g} of {cpu_affinity} cores)" if cores < cpu_affinity else ""
    per_replica = cores // replicas
    workers = min(MAX_WORKERS, max(0, per_replica - 1))
    who = f"{replicas} replica{'s' if replicas > 1 else ''}"
    if workers == 0:
        reason = (f"{cores} usable core{'s' if cores > 1 else ''}{limit} for {who} leaves no core spare: "
                  "load in the training process (num_workers=0), or the workers fight the training loop.")
    elif workers == MAX_WORKERS and per_replica - 1 > MAX_WORKERS:
        reason = (f"{cores} usable cores{limit} / {who} = {per_replica} each; capped at {MAX_WORKERS}, "
                  "past which loading rarely gets faster and each worker holds its own dataset copy.")
    else:
        reason = (f"{cores} usable core{'s' if cores > 1 else ''}{limit} / {who} = {per_replica} each, "
                  "minus one for the training loop.")
    return WorkerAdvice(cores, replicas, workers, reason)
