"""``MultiWorkerMirroredStrategy``: synchronous data parallelism across machines
(``tf.distribute.MultiWorkerMirroredStrategy``), with all of :class:`MirroredStrategy`'s contract.

Who is in the job comes from (:mod:`allgpu.runtime.engines` documents the order and the engines' variables):

1. a launcher's environment (``allgpu run --nnodes N``, ``torchrun``, Ray Train's workers): join it;
2. the cluster resolver given (``TFConfigClusterResolver()``, ``SlurmClusterResolver()``,
   ``KubernetesClusterResolver()``, ``SkyPilotClusterResolver()``, ``RayClusterResolver()``), else the engine
   discovered: Slurm's ``srun`` tasks (one replica each), a PyTorchJob pod, ``TF_CONFIG``
   (``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``: this worker starts one
   replica per local device and all workers meet at worker 0's ``host:port``; ranks run worker by worker),
   Kubeflow Trainer / JobSet, SkyPilot;
3. none: a job of one worker, as TensorFlow does, over this machine's devices.
"""

from __future__ import annotations

from allgpu.errors import ArgumentError
from allgpu.runtime.cluster_resolver import RESOLVERS, TFConfigClusterResolver
from allgpu.strategies.mirrored import MirroredStrategy


class MultiWorkerMirroredStrategy(MirroredStrategy):
    """Replicas on several machines, parameters mirrored, gradients all-reduced during backward.

    Args:
        cluster_resolver: None (discover the engine: launcher, Slurm, Kubernetes, ``TF_CONFIG``, SkyPilot) or one
            of ``allgpu.cluster_resolver``'s resolvers, as TensorFlow takes one; a launcher's environment
            (``allgpu run``, torchrun, Ray Train) wins over it.
        devices / num_replicas: this worker's devices, as for :class:`MirroredStrategy`
            (default: every visible GPU, one CPU replica without one). Every worker must run as many.
        fallback: default ``"error"``: a multi-machine job that silently shrinks to one device is worse than
            a clear failure.
        timeout, backend, bucket_cap_mb, gradient_compression: as for :class:`MirroredStrategy`.

    Raises:
        ArgumentError: a ``cluster_resolver`` of another kind.
        ClusterConfigError: a malformed or inconsistent ``TF_CONFIG``, engine or launcher environment, naming the
            field; two engines that disagree, naming both.
        StrategyStartError: the workers could not meet (``fallback="error"``).
    """

    multi_worker = True

    def __init__(self, cluster_resolver=None, *, devices=None, num_replicas: int | None = None,
                 fallback: str = "error", timeout: float | None = None, backend: str | None = None,
                 bucket_cap_mb: float = 25.0, gradient_compression: str | None = None):
        if cluster_resolver is not None and not isinstance(cluster_resolver, RESOLVERS):
            raise ArgumentError(f"cluster_resolver={type(cluster_resolver).__name__}(...) is not supported; pass one "
                                "of allgpu.cluster_resolver's resolvers (TFConfigClusterResolver, SlurmClusterResolver, "
                                "KubernetesClusterResolver, SkyPilotClusterResolver, RayClusterResolver), or None to "
                                "discover the cluster engine.")
        self._cluster_resolver = cluster_resolver
        # What `strategy.cluster_resolver` answers: the one given, else TF_CONFIG's, as TensorFlow's strategy
        # makes a TFConfigClusterResolver() when given none (task_type/task_id None without TF_CONFIG).
        self._reported_resolver = cluster_resolver
        super().__init__(devices, num_replicas=num_replicas, fallback=fallback, timeout=timeout, backend=backend,
                         bucket_cap_mb=bucket_cap_mb, gradient_compression=gradient_compression)

    def _cluster(self):
        return None if self._cluster_resolver is None else self._cluster_resolver.cluster()

    @property
    def cluster_resolver(self):
        """The resolver this strategy was given, else a ``TFConfigClusterResolver()`` over this process's
        ``TF_CONFIG`` (``tf.distribute.MultiWorkerMirroredStrategy.cluster_resolver``: never None; without
        ``TF_CONFIG`` its ``task_type``/``task_id`` are None and its ``cluster_spec()`` is empty, as in TensorFlow).
        ``task_id`` is the worker's (machine's) index: the replicas a worker starts share it. Local."""
        if self._reported_resolver is None:
            self._reported_resolver = TFConfigClusterResolver()
        return self._reported_resolver

    @property
    def worker_index(self) -> int:
        """This machine's index in the job (TensorFlow's task index; torchrun's node rank)."""
        return self.replica_id_in_sync // self.replica_group.local_world_size
