"""Ray Train: inside ``TorchTrainer(train_loop_per_worker=...)`` each Ray worker is one replica.

By the time the user's function starts, Ray Train's ``TorchConfig`` backend has called
``torch.distributed.init_process_group`` (Gloo on CPU workers, NCCL on GPU ones) and set torchrun's variables
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``; ``ray/train/torch/config.py``). A strategy adopts that process group: it never initialises a
second one and never re-executes the script. The worker's place is read from ``ray.train.get_context()`` (the
authority; the variables are its copy), only when the function already imported ``ray.train``: allgpu never
imports Ray itself.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.description import Cluster


def context():
    """``ray.train.get_context()`` inside a Ray Train worker; None elsewhere (or when Ray is not imported)."""
    train = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        return train.get_context()
    except Exception:  # Ray raises RuntimeError outside a training function (the driver, a plain task)
        return None


def detect(env: Mapping[str, str] | None = None) -> Cluster | None:
    """This Ray Train worker's place; None outside a Ray Train training function."""
    ctx = context()
    if ctx is None:
        return None
    env = os.environ if env is None else env
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    addr, port = env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT") or 0)
    spec = ClusterSpec(rank, world, ctx.get_local_rank(), ctx.get_local_world_size(), addr, port, "Ray Train")
    return Cluster("Ray Train", ("ray.train.get_context()",), world, rank, addr, port, spec)
