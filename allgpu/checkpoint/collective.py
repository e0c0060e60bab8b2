"""The few collectives checkpointing needs, each a no-op when ``torch.distributed`` is not initialised.

On the job's default group they go through :meth:`allgpu.core.replica_group.ReplicaGroup.current`, the same
collective layer as the strategies' own, so a replica that hangs or dies inside a checkpoint is named (replica,
collective, line) like one that hangs in training. Background writes pass their own ``group`` (a separate Gloo
group whose collectives never meet training's) and call ``torch.distributed`` directly.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from allgpu.errors import CheckpointError
from allgpu.core.replica_group import ReplicaGroup


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank(group: Any = None) -> int:
    return dist.get_rank(group) if initialized() else 0


def world_size(group: Any = None) -> int:
    return dist.get_world_size(group) if initialized() else 1


def all_gather(obj: Any, group: Any = None) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` without a process group.

    ``all_gather_object`` rather than ``gather_object``: it works on NCCL as well as Gloo.
    """
    if not initialized():
        return [obj]
    if group is None:
        return ReplicaGroup.current().all_gather_object(obj, where="checkpoint")
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def broadcast(obj: Any, group: Any = None) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not initialized():
        return obj
    if group is None:
        return ReplicaGroup.current().broadcast_object(obj, where="checkpoint")
    box = [obj]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return box[0]


def run(op: str, call, group: Any = None):
    """``call()``, a routine of several collectives (``dcp.save``), entered in the job's ledger as ``op`` when it
    runs on the default group, so a replica that hangs or dies in it is named. Returns its result."""
    if group is None and initialized():
        return ReplicaGroup.current().run_collective(op, call, where="checkpoint")
    return call()


def agree(error: BaseException | None, what: str, group: Any = None) -> None:
    """A barrier that also carries failures: every rank raises if any rank failed ``what``.

    Replaces a plain barrier after a write, so that a replica that failed does not leave the others
    waiting in a barrier until the collective timeout.

    Raises:
        the local ``error`` itself; or ``CheckpointError`` naming the replica that failed and why.
    """
    summary = None if error is None else f"{type(error).__name__}: {error}"
    statuses = all_gather(summary, group)
    if error is not None:
        raise error
    failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
    if failed:
        r, s = failed[0]
        raise CheckpointError(f"replica {r} failed while {what}: {s}")
