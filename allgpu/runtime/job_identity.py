"""Which job a rendezvous belongs to: two jobs (or a stale replica of an earlier run) on one address never meet.

The process hosting a job's rendezvous store (replica 0, or ``allgpu.launch``'s launcher) sets ``KEY`` to the job's
identity as soon as the store exists: its job id where the engine gives one (``allgpu``'s own, Slurm's job and
step, Open MPI's job) and its number of replicas. Every other replica reads it before it joins: another value is a
:class:`~allgpu.errors.ClusterConfigError` naming both jobs, raised before the replica enters the other job's
process group (where two replicas of one rank corrupt it, or wait until the timeout). torchrun's and
``allgpu run``'s replicas are not checked: the elastic agent's rendezvous already keys the job by its run id.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec

KEY = "allgpu/job_identity"
# Seconds a replica that reached the store waits for its host to say which job it is. The host sets it right after
# the store starts, so only a store that allgpu's replica 0 did not start (or an older allgpu) leaves it unset.
HOST_KEY_S = 60.0


def identity(spec: ClusterSpec) -> str:
    """The job's identity as every one of its replicas computes it: ``{"job": ..., "replicas": N}`` (JSON)."""
    return json.dumps({"job": spec.job, "replicas": spec.world_size}, sort_keys=True)


def describe(text: str) -> str:
    """An identity in words: ``"Slurm job 42 step 0, 2 replicas"``."""
    try:
        value = json.loads(text)
        job, replicas = value.get("job"), value.get("replicas")
    except (ValueError, AttributeError):
        return repr(text)
    return f"{job or 'a job without an id'}, {replicas} replicas"


def checked(spec: ClusterSpec, env: Mapping[str, str] | None = None) -> bool:
    """Whether this replica's rendezvous is checked: every job of several replicas but torchrun's agents' (which
    ``allgpu.launch``'s store is not: it sets the identity itself)."""
    env = os.environ if env is None else env
    return spec.world_size > 1 and spec.source != "torchrun" and "TORCHELASTIC_RUN_ID" not in env


def host(spec: ClusterSpec, timeout_s: float):
    """Replica 0: start the job's store on ``master_port`` (or take the one this process already holds there:
    multi-tenant, as ``init_process_group`` then does) and set the identity. Keep the returned store until
    ``init_process_group`` returns.

    Raises:
        torch.distributed.DistNetworkError: the port is in use (the caller names the fix).
    """
    from torch.distributed import TCPStore

    store = TCPStore(spec.master_addr, spec.master_port, is_master=True, multi_tenant=True, wait_for_workers=False,
                     timeout=timedelta(seconds=timeout_s))
    store.set(KEY, identity(spec))
    return store


def check(spec: ClusterSpec, timeout_s: float) -> None:
    """Any other replica: reach the store (waiting for it up to ``timeout_s``, as ``init_process_group`` would) and
    compare its host's identity with this job's.

    Raises:
        ClusterConfigError: the store belongs to another job (or to a host that does not say which), naming both.
        torch.distributed.DistStoreError: the store never came up within ``timeout_s``.
    """
    from torch.distributed import DistStoreError, TCPStore

    store = TCPStore(spec.master_addr, spec.master_port, is_master=False, timeout=timedelta(seconds=timeout_s))
    try:
        store.wait([KEY], timedelta(seconds=HOST_KEY_S))
        theirs = store.get(KEY).decode()
    except DistStoreError:
        theirs = None
    mine = identity(spec)
    if theirs == mine:
        return
    where = f"{spec.master_addr}:{spec.master_port}"
    found = (f"belongs to another job ({describe(theirs)})" if theirs is not None else
             f"is hosted by a process that did not say which job it is within {HOST_KEY_S:g} s (not this job's "
             "replica 0, or an older allgpu)")
    raise ClusterConfigError(
        f"replica {spec.rank} ({describe(mine)}) found that the rendezvous at {where} {found}: two jobs were given "
        "the same MASTER_ADDR:MASTER_PORT (a fixed `export MASTER_PORT=...` in a batch script, a port shared by two "
        "runs), or a replica of an earlier run is still running. It did not join. Fix: give each job its own port "
        "(leave MASTER_PORT unset under Slurm and mpirun: allgpu derives one per job), or end the earlier run.")
