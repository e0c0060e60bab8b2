"""The one CPU-thread policy for replicas: how many intra-op threads each replica's torch uses.

N CPU replicas on one machine, each with a pool of every core, oversubscribe the cores and run slower than one
replica. So each replica gets the machine's cores divided among its local replicas (at least one), unless the
user set ``OMP_NUM_THREADS``, which always wins. torchrun sets 1 when it starts several replicas; allgpu gives
the cores a replica can use without contention instead. One exception, for a different reason: a replica
*forked* by :func:`allgpu.launch` uses one thread, since OpenMP is not fork-safe (a forked child's first
parallel region can hang), as PyTorch's DataLoader workers do.
"""

from __future__ import annotations

import os
from typing import Mapping


def threads_per_replica(local_replicas: int, env: Mapping[str, str] | None = None) -> int:
    """Intra-op threads for each of ``local_replicas`` replicas on this machine: ``OMP_NUM_THREADS`` when set
    (a positive whole number), else ``os.cpu_count() // local_replicas``, at least 1."""
    env = os.environ if env is None else env
    chosen = env.get("OMP_NUM_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    return max(1, (os.cpu_count() or 1) // max(1, local_replicas))
