"""Initialising the ``torch.distributed`` default process group for a placed replica (NCCL on CUDA, Gloo on CPU)."""

from __future__ import annotations

import atexit
import os
import contextlib
from datetime import timedelta

import torch
import torch.distributed as dist

from allgpu.errors import ClusterConfigError
from allgpu.runtime import job_identity
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.slurm_tasks import ended_task_watch
from allgpu.runtime.gloo_drain import wait_for_gloo_workers
from allgpu.runtime.waiting import reporting_wait


def default_backend(device: torch.device) -> str:
    """``"nccl"`` for a CUDA device, ``"gloo"`` otherwise (``torch.distributed``'s recommendation)."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_process_group(spec: ClusterSpec, device: torch.device, timeout_s: float, *, backend: str | None = None,
                       init_method: str = "env://") -> bool:
    """Initialise the default process group for replica ``spec.rank`` on ``device``; True if this call did.

    ``init_method="env://"`` reads the launcher's ``MASTER_ADDR``/``MASTER_PORT`` (under torchrun it reuses the
    elastic agent's store); ``"tcp://host:port"`` is the launch-free rendezvous, with rank and world size from
    ``spec``. Returns False when a group already exists (it is joined, not re-created).

    Raises:
        RuntimeError: from :func:`torch.distributed.init_process_group` (rendezvous timeout, NCCL missing).
    """
    if dist.is_initialized():
        return False
    backend = backend or default_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs = {"device_id": device} if backend == "nccl" else {}
    if not init_method.startswith("env://"):
        kwargs.update(rank=spec.rank, world_size=spec.world_size)
    watch = ended_task_watch(spec) if spec.source == "Slurm" else contextlib.nullcontext()
    with reporting_wait(spec, timeout_s), watch:  # every 30 s: whom it waits for; under Slurm, a task gone
        try:
            store = _meet(spec, timeout_s)  # noqa: F841  (replica 0: the store it hosts lives until the group has it)
            dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=timeout_s), **kwargs)
        except dist.DistNetworkError as exc:
            if "EADDRINUSE" not in str(exc):
                raise
            raise ClusterConfigError(
                f"replica {spec.rank} of {spec.world_size} hosts the rendezvous but cannot listen on port "
                f"{spec.master_port} of {spec.master_addr}: it is in use (another job or program holds it; a fixed "
                "`export MASTER_PORT=...` in a batch script gives every job on the node the same one). Fix: choose a "
                "free port, or under Slurm drop the MASTER_PORT export (allgpu derives one per job step)."
            ) from exc
    return True


def _meet(spec: ClusterSpec, timeout_s: float):
    """Before joining: replica 0 hosts the store and says which job it is; any other replica checks that the store
    it reaches is its own job's (:mod:`allgpu.runtime.job_identity`). Returns the store replica 0 hosts, or None."""
    if not job_identity.checked(spec):
        return None
    launcher_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # allgpu.launch's store
    if spec.rank == 0 and not launcher_hosts:
        return job_identity.host(spec, timeout_s)
    job_identity.check(spec, timeout_s)
    return None


_SOLO: list = []  # [the default group made for one-replica strategies, how many placed on it, device, timeout_s]


def init_solo_group(device: torch.device, timeout_s: float) -> None:
    """A world-of-one default group for a strategy that runs one replica with no launcher (``python train.py``
    on one device, or the one-device fallback), so what a script ported from DDP still asks of
    ``torch.distributed`` (``DistributedSampler(dataset)``, ``dist.get_rank()``, ``dist.all_reduce``) works as under
    ``torchrun --nproc-per-node 1`` instead of failing with "Default process group has not been initialized".
    Strategies placed on it share it; :func:`release_solo_group` destroys it after the last one closes."""
    if not solo_group():
        if dist.is_initialized():
            return
        dist.init_process_group(default_backend(device), store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timedelta(seconds=timeout_s))
        _SOLO[:] = [dist.group.WORLD, 0, device, timeout_s]
        atexit.register(wait_for_gloo_workers)  # a collective a script ran on it used Gloo's threads
    _SOLO[1] += 1


def solo_group() -> bool:
    """Whether the default group is the world of one :func:`init_solo_group` made (not a job's group)."""
    return bool(_SOLO) and dist.is_initialized() and dist.group.WORLD is _SOLO[0]


@contextlib.contextmanager
def no_group_to_fork():
    """Around forking replicas (``allgpu.launch``): a forked child gets a copy of this process's default group
    without the Gloo worker threads that run its collectives, so its first collective on it waits forever (a
    notebook that made a one-replica ``MirroredStrategy()`` and then called ``launch`` hung). The world of one
    :func:`init_solo_group` made is destroyed before the fork and made again, with the same strategies placed on
    it, once the children exist (nothing keeps the group object: it is looked up as the default group).

    Raises:
        StrategyStartError: the default group is a job's or the user's (``init_process_group``), which cannot be
            set aside; the message names the fix.
    """
    if not dist.is_initialized():
        yield
        return
    if not solo_group():
        from allgpu.errors import StrategyStartError

        raise StrategyStartError(
            f"allgpu.launch() would fork replicas from a process that belongs to a torch.distributed process group "
            f"(rank {dist.get_rank()} of {dist.get_world_size()}): each replica would get an unusable copy of it and "
            "wait forever at its first collective. Fix: dist.destroy_process_group() (or close() the strategy that "
            "joined it) before launch(), or pass start_method='spawn'.")
    _, placed, device, timeout_s = _SOLO
    dist.destroy_process_group()
    _SOLO.clear()
    wait_for_gloo_workers()
    try:
        yield
    finally:
        init_solo_group(device, timeout_s)
        _SOLO[1] = placed


def release_solo_group(*, force: bool = False) -> None:
    """One strategy placed on the world-of-one group left it; the last one (or ``force``: a new job is about to
    start in this process) destroys it."""
    if not solo_group():
        _SOLO.clear()
        return
    _SOLO[1] -= 1
    if _SOLO[1] <= 0 or force:
        dist.destroy_process_group()
        _SOLO.clear()
        wait_for_gloo_workers()
