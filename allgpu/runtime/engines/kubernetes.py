"""Kubernetes: Kubeflow's PyTorchJob (training-operator v1), Kubeflow Trainer v2 and JobSet pods.

What each sets in the pod (checked against the training-operator's ``pkg/controller.v1/pytorch/envvar.go`` and
Kubeflow Trainer's torch runtime):

- **PyTorchJob** (legacy, v1): ``MASTER_ADDR`` (the master pod's service), ``MASTER_PORT``, ``WORLD_SIZE``
  (pods x ``nprocPerNode``), ``RANK`` (the pod's index, master 0) and, from v1.7, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK``, ``PET_NNODES``; never ``LOCAL_RANK``. A pod running ``python train.py`` is one replica
  (local rank 0 of 1) when ``WORLD_SIZE`` is the number of pods, or starts ``nprocPerNode`` replicas when
  ``WORLD_SIZE`` counts processes.
- **Kubeflow Trainer v2 (TrainJob) and JobSet**: the ``PET_*`` variables torchrun reads as its arguments
  (``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``). Under
  torchrun the replicas carry torchrun's variables (a launcher, joined as such); a pod running ``python
  train.py`` directly starts one replica per local device and meets the other pods at the master's address.
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import ClusterSpec
from allgpu.runtime.engines.description import Cluster

PET = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
DEFAULT_PORT = 29500  # torchrun's default --master-port


def _int(env: Mapping[str, str], key: str, engine: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ClusterConfigError(f"{key}={env[key]!r} in this {engine} pod is not an integer. Fix: let the operator "
                                 f"set it (a fixed node count; an elastic range like '1:4' needs torchrun).") from None


def in_pod(env: Mapping[str, str]) -> bool:
    """True inside a Kubernetes pod (the kubelet sets ``KUBERNETES_SERVICE_HOST`` in every container)."""
    return "KUBERNETES_SERVICE_HOST" in env


def detect_pytorchjob(env: Mapping[str, str] | None = None) -> Cluster | None:
    """A legacy PyTorchJob pod running the script without a launcher: ``RANK`` and ``WORLD_SIZE`` with no
    ``LOCAL_RANK``, in a pod (or with the operator's ``PET_NODE_RANK``). None otherwise.

    Raises:
        ClusterConfigError: a variable missing or not an integer, naming it.
    """
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env or "LOCAL_RANK" in env:
        return None
    if not (in_pod(env) or "PET_NODE_RANK" in env):
        return None
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise ClusterConfigError(f"this PyTorchJob pod has RANK and WORLD_SIZE but no {', '.join(missing)}. "
                                 "Fix: give the job a Master replica (the operator then sets MASTER_ADDR/PORT).")
    rank, world = _int(env, "RANK", "PyTorchJob"), _int(env, "WORLD_SIZE", "PyTorchJob")
    addr, port = env["MASTER_ADDR"], _int(env, "MASTER_PORT", "PyTorchJob")
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    nnodes = _int(env, "PET_NNODES", "PyTorchJob") if env.get("PET_NNODES", "").isdigit() else world
    if nnodes != world:  # WORLD_SIZE counts processes (nprocPerNode > 1): this pod starts its share
        return Cluster("PyTorchJob", names + ("PET_NNODES",), nnodes, rank, addr, port)
    return Cluster("PyTorchJob", names, world, rank, addr, port, ClusterSpec(rank, world, 0, 1, addr, port,
                                                                              "PyTorchJob"))


def detect_trainer(env: Mapping[str, str] | None = None) -> Cluster | None:
    """A Kubeflow Trainer v2 / JobSet pod running the script without torchrun (``PET_NNODES`` and
    ``PET_NODE_RANK`` set, torchrun's variables not). None otherwise.

    Raises:
        ClusterConfigError: a ``PET_*`` variable missing or not an integer, naming it.
    """
    env = os.environ if env is None else env
    if "PET_NNODES" not in env or "PET_NODE_RANK" not in env or "RANK" in env:
        return None
    missing = [k for k in PET if k not in env and k != "PET_MASTER_PORT"]
    if missing:
        raise ClusterConfigError(f"this pod has PET_NNODES and PET_NODE_RANK but no {', '.join(missing)}. Fix: "
                                 "set PET_MASTER_ADDR to the first pod's host name (Trainer v2 sets it for you).")
    port = _int(env, "PET_MASTER_PORT", "Kubeflow Trainer") if "PET_MASTER_PORT" in env else DEFAULT_PORT
    return Cluster("Kubeflow Trainer", PET, _int(env, "PET_NNODES", "Kubeflow Trainer"),
                   _int(env, "PET_NODE_RANK", "Kubeflow Trainer"), env["PET_MASTER_ADDR"], port)
