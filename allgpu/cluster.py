"""Who is in the job: the torchrun (elastic launcher) environment, or a ``TF_CONFIG`` cluster description.

Glossary (as in ``torch.distributed``): *rank* is a replica's global index, *world size* the number of
replicas in the job, *local rank* a replica's index on its own machine (node).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from allgpu.errors import ClusterConfigError

_TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class ClusterSpec:
    """One replica's place in the job.

    Attributes:
        rank: global replica index, ``0 <= rank < world_size``.
        world_size: number of replicas in the job (``num_replicas_in_sync``).
        local_rank: index on this node; selects the device (``cuda:local_rank``).
        local_world_size: replicas on this node.
        master_addr / master_port: rendezvous address of the ``env://`` process-group init.
        source: where the description came from (``"torchrun"``, ``"TF_CONFIG"``, ``"allgpu"``).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str = "torchrun"


def _int(env: Mapping[str, str], key: str, source: str) -> int:
    raw = env[key]
    try:
        return int(raw)
    except ValueError:
        raise ClusterConfigError(
            f"{key}={raw!r} in the {source} environment is not an integer; "
            f"expected e.g. {key}=0. Fix: launch with torchrun / `allgpu run`, which set it for you."
        ) from None


def from_torchrun_env(env: Mapping[str, str] | None = None) -> ClusterSpec | None:
    """Read the variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``).

    Returns None when the process was not started by a launcher (``RANK`` and ``WORLD_SIZE`` unset).

    Raises:
        ClusterConfigError: some but not all variables are set, or they are inconsistent.
    """
    env = os.environ if env is None else env
    present = [k for k in _TORCHRUN_KEYS if k in env]
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    missing = [k for k in _TORCHRUN_KEYS if k not in env and k != "LOCAL_RANK"]
    if missing:
        raise ClusterConfigError(
            f"the launcher environment is incomplete: {', '.join(present)} set but {', '.join(missing)} "
            "missing. Fix: start the script with `torchrun` or `allgpu run`, or unset RANK/WORLD_SIZE "
            "for a launch-free start."
        )
    rank = _int(env, "RANK", "torchrun")
    world = _int(env, "WORLD_SIZE", "torchrun")
    local_rank = _int(env, "LOCAL_RANK", "torchrun") if "LOCAL_RANK" in env else rank
    local_world = _int(env, "LOCAL_WORLD_SIZE", "torchrun") if "LOCAL_WORLD_SIZE" in env else world
    if world < 1 or not 0 <= rank < world:
        raise ClusterConfigError(
            f"RANK={rank} with WORLD_SIZE={world}: rank must satisfy 0 <= RANK < WORLD_SIZE."
        )
    return ClusterSpec(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=env["MASTER_ADDR"],
        master_port=_int(env, "MASTER_PORT", "torchrun"),
        source=env.get("ALLGPU_CLUSTER_SOURCE", "torchrun"),
    )


def from_env(
    env: Mapping[str, str] | None = None, *, local_world_size: int = 1, local_rank: int = 0
) -> ClusterSpec | None:
    """This replica's place in the job, from the launcher if one started it, else from ``TF_CONFIG``.

    The torchrun environment wins: ``allgpu run --tf-config`` turns ``TF_CONFIG`` into it, and a replica
    started by any launcher is already placed. A bare ``TF_CONFIG`` (one process per machine started by
    hand or by a TensorFlow-style job) uses ``local_world_size`` / ``local_rank`` for the replicas on this
    machine; see :meth:`allgpu.tf_config.TFConfig.to_cluster_spec` for the rank rule.
    Returns None when neither is set (a single-machine, launch-free start).

    Raises:
        ClusterConfigError: either description is malformed or inconsistent.
    """
    env = os.environ if env is None else env
    spec = from_torchrun_env(env)
    if spec is not None:
        return spec
    from allgpu.tf_config import from_tf_config_env  # tf_config imports ClusterSpec from here

    tf = from_tf_config_env(env)
    return None if tf is None else tf.to_cluster_spec(local_world_size, local_rank)
