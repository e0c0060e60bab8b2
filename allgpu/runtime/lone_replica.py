"""A one-replica strategy in a process that a launcher started as one of several: each process trains alone.

``allgpu run --nproc-per-node 8 train.py`` (or torchrun, Slurm, MPI, ``allgpu.launch``) starts N processes. A
``MirroredStrategy()`` joins them into one job of N replicas; ``OneDeviceStrategy("/gpu:0")`` and the default
strategy (``allgpu.get_strategy()`` outside any scope: Kaggle's "TPU, else ``tf.distribute.get_strategy()``"
block) do not: each process is a job of one, every one its own chief, training its own copy of the model on its
own data, printing and saving as if alone. Nothing fails, so it is said once per process, by process 0.
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import AllGpuError, warn_user
from allgpu.runtime import live

_SAID: set[str] = set()


def _job_of_several(env: Mapping[str, str]):
    from allgpu.runtime.engines import discover

    try:
        cluster = discover(env, tf_config=False)
    except AllGpuError:
        return None  # malformed variables: the strategy that reads them reports it
    return cluster if cluster is not None and cluster.units > 1 else None


def warn_if_one_of_several(what: str, device: str, env: Mapping[str, str] | None = None) -> bool:
    """Warn (``RuntimeWarning``, once per ``what``) when this process is one of several a launcher started and no
    strategy of more than one replica is alive in it. Returns whether it warned. Local: reads the environment."""
    if what in _SAID:
        return False
    if any(getattr(s, "num_replicas_in_sync", 1) > 1 for s, _ in live.live()):
        return False  # a real job exists: a OneDeviceStrategy beside it (an evaluation) is the user's choice
    cluster = _job_of_several(os.environ if env is None else env)
    if cluster is None:
        return False
    _SAID.add(what)
    if cluster.index != 0:
        return False
    warn_user(
        f"{what} is one replica on {device}, but {cluster.engine} started {cluster.units} processes for this job: "
        f"each of the {cluster.units} trains its own copy of the model alone (each is its own chief: it prints, "
        f"saves and reports num_replicas_in_sync == 1). Fix: allgpu.MirroredStrategy() joins them into one job of "
        f"{cluster.units} replicas (one device each); or start a single process (`python script.py`).",
        RuntimeWarning)
    return True
