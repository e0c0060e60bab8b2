"""Cluster resolvers for the engines TensorFlow has none for, or reads differently (Slurm, Kubernetes, Ray,
SkyPilot). Each reads its engine's environment once, when built (malformed variables fail there, naming them),
and hands ``MultiWorkerMirroredStrategy(resolver)`` the same frozen :class:`Cluster` that discovery returns.

``SlurmClusterResolver`` follows ``tf.distribute.cluster_resolver.SlurmClusterResolver`` (a task of an ``srun``
step is a worker); ``KubernetesClusterResolver`` takes TensorFlow's name but reads the pod's environment
(PyTorchJob, Trainer v2 / JobSet) instead of listing pods through the Kubernetes API.
"""

from __future__ import annotations

import os
from typing import Mapping

from allgpu.errors import ArgumentError, ClusterConfigError
from allgpu.runtime.engines import kubernetes, ray, skypilot, slurm
from allgpu.runtime.engines.description import Cluster


class ClusterSpec(dict):
    """``tf.train.ClusterSpec`` as resolvers return it: a dict role -> ``["host:port", ...]`` that also answers
    TensorFlow's methods (``as_dict()``, ``jobs``, ``num_tasks``, ``task_indices``, ``task_address``,
    ``job_tasks``), so code written for ``cluster_resolver.cluster_spec().as_dict()`` runs unchanged. Local."""

    def as_dict(self) -> dict[str, list[str]]:
        """A plain dict copy, role -> address list (TensorFlow's ``ClusterSpec.as_dict``)."""
        return {role: list(addresses) for role, addresses in self.items()}

    @property
    def jobs(self) -> list[str]:
        """The roles (``"worker"``, ``"chief"``, ``"ps"``)."""
        return list(self)

    def num_tasks(self, job_name: str) -> int:
        """How many tasks ``job_name`` has. Raises ArgumentError (a ValueError, as TensorFlow) for an unknown role."""
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """``[0, ..., num_tasks - 1]``."""
        return list(range(len(self._job(job_name))))

    def task_address(self, job_name: str, task_index: int) -> str:
        """``host:port`` of one task. Raises ArgumentError (a ValueError) for an unknown role or index."""
        tasks = self._job(job_name)
        if not 0 <= task_index < len(tasks):
            raise ArgumentError(f"no task {task_index} in job {job_name!r} (it has {len(tasks)})")
        return tasks[task_index]

    def job_tasks(self, job_name: str) -> list[str]:
        """The addresses of ``job_name``'s tasks, in index order."""
        return list(self._job(job_name))

    def _job(self, job_name: str) -> list[str]:
        if job_name not in self:
            raise ArgumentError(f"no such job in cluster: {job_name!r} (it has {self.jobs})")
        return self[job_name]


class EngineClusterResolver:
    """What every resolver here answers (TensorFlow's ``ClusterResolver`` methods), from a :class:`Cluster`."""

    engine = "an engine"
    task_type = "worker"

    def __init__(self, cluster: Cluster | None, rpc_layer: str | None = None):
        if cluster is None:
            raise ClusterConfigError(f"{type(self).__name__}(): this process was not started by {self.engine} "
                                     f"(its variables are not set). Fix: {self._fix}")
        self._description = cluster
        self.rpc_layer = rpc_layer

    _fix = "start the script through the engine."

    def cluster(self) -> Cluster:
        """The frozen description ``MultiWorkerMirroredStrategy`` places its replicas by."""
        return self._description

    @property
    def task_id(self) -> int:
        """This process's index among the engine's processes (tasks, pods, nodes or workers)."""
        return self._description.index

    def cluster_spec(self) -> ClusterSpec:
        """``{"worker": ["host:port", ...]}`` (a :class:`ClusterSpec`): one entry per process the engine started, where hosts are known
        (Slurm, SkyPilot); the rendezvous address alone for the first otherwise."""
        c = self._description
        hosts = c.hosts or (c.master_addr,)
        per_host = max(1, c.units // len(hosts))
        return ClusterSpec({"worker": [f"{hosts[min(i // per_host, len(hosts) - 1)]}:{c.master_port}" for i in range(c.units)]})

    def master(self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None) -> str:
        """The rendezvous address, ``host:port`` (with ``rpc_layer://`` in front when one is given)."""
        layer = rpc_layer or self.rpc_layer
        address = f"{self._description.master_addr}:{self._description.master_port}"
        return f"{layer}://{address}" if layer else address

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        """``{"GPU": n}``: the GPUs this process sees."""
        import torch

        return {"GPU": torch.cuda.device_count() if torch.cuda.is_available() else 0}

    def __repr__(self) -> str:
        c = self._description
        return f"{type(self).__name__}(task_id={c.index}, of={c.units}, master={c.master_addr}:{c.master_port})"


class SlurmClusterResolver(EngineClusterResolver):
    """The ``srun`` job step this task belongs to: each task is one replica (``tf.distribute.cluster_resolver.
    SlurmClusterResolver``). Only TensorFlow's defaults are taken for ``jobs`` / ``tasks_per_node`` (Slurm's
    own counts); ``port_base`` is unused (the port comes from the job id, :func:`allgpu.runtime.engines.slurm.
    rendezvous_port`).

    Raises:
        ClusterConfigError: not inside an ``srun`` step, or its variables are malformed.
        ArgumentError: ``jobs`` or ``tasks_per_node`` given (TensorFlow's way to split tasks into roles).
    """

    engine = "Slurm's srun"
    _fix = "run it as `srun -n N python train.py` (in an sbatch script or an salloc shell)."

    def __init__(self, jobs=None, port_base: int = 8888, gpus_per_node=None, gpus_per_task=None,
                 tasks_per_node=None, auto_set_gpu: bool = True, rpc_layer: str | None = "grpc", *,
                 env: Mapping[str, str] | None = None):
        if jobs is not None or tasks_per_node is not None:
            raise ArgumentError(f"SlurmClusterResolver(jobs={jobs!r}, tasks_per_node={tasks_per_node!r}): allgpu's "
                                "synchronous strategies make every srun task a worker. Fix: leave both out.")
        super().__init__(slurm.detect(os.environ if env is None else env), rpc_layer)


class KubernetesClusterResolver(EngineClusterResolver):
    """This pod's place in a Kubeflow PyTorchJob (legacy), Trainer v2 TrainJob or JobSet, from the variables
    the operator set (``tf.distribute.cluster_resolver.KubernetesClusterResolver``'s name; it lists pods
    through the API, which this reads from the pod instead).

    Raises:
        ClusterConfigError: not in such a pod, or its variables are malformed.
        ArgumentError: ``job_to_label_mapping`` or ``override_client`` given.
    """

    engine = "a Kubeflow PyTorchJob, Trainer v2 or JobSet"
    _fix = "run it in the job's pods (the operator sets RANK/WORLD_SIZE/MASTER_ADDR or PET_*)."

    def __init__(self, job_to_label_mapping=None, tf_server_port: int = 8470, rpc_layer: str | None = "grpc",
                 override_client=None, *, env: Mapping[str, str] | None = None):
        if job_to_label_mapping is not None or override_client is not None:
            raise ArgumentError("KubernetesClusterResolver: job_to_label_mapping / override_client select pods "
                                "through the Kubernetes API; allgpu reads the pod's own environment. Fix: leave "
                                "them out.")
        env = os.environ if env is None else env
        super().__init__(kubernetes.detect_pytorchjob(env) or kubernetes.detect_trainer(env), rpc_layer)


class SkyPilotClusterResolver(EngineClusterResolver):
    """This node's place in a SkyPilot task (``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS``, ...).

    Raises:
        ClusterConfigError: not in a SkyPilot task's ``run:`` section, or its variables are malformed.
    """

    engine = "SkyPilot"
    _fix = "run it from the task's run: section."

    def __init__(self, rpc_layer: str | None = None, *, env: Mapping[str, str] | None = None):
        super().__init__(skypilot.detect(os.environ if env is None else env), rpc_layer)


class RayClusterResolver(EngineClusterResolver):
    """This Ray Train worker's place (``ray.train.get_context()``), inside ``train_loop_per_worker``.

    Raises:
        ClusterConfigError: called outside a Ray Train training function.
    """

    engine = "Ray Train"
    _fix = "build it inside TorchTrainer(train_loop_per_worker=...)."

    def __init__(self, rpc_layer: str | None = None, *, env: Mapping[str, str] | None = None):
        super().__init__(ray.detect(env), rpc_layer)
