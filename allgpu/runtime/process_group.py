"""Initialising the ``torch.distributed`` default process group for a placed replica (NCCL on CUDA, Gloo on CPU)."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from allgpu.runtime.cluster import ClusterSpec
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
    with reporting_wait(spec, timeout_s):  # every 30 s: whom it waits for, since when, until when
        dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=timeout_s), **kwargs)
    return True
