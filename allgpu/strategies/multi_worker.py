"""``MultiWorkerMirroredStrategy``: synchronous data parallelism across machines
(``tf.distribute.MultiWorkerMirroredStrategy``), with all of :class:`MirroredStrategy`'s contract.

Who is in the job comes from, in order:

1. the elastic launcher's environment (``allgpu run --nnodes N`` or ``torchrun``): join it;
2. ``TF_CONFIG`` (``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``), so
   TensorFlow users keep their cluster description: this worker starts one replica per local device and all
   workers meet at worker 0's ``host:port``; ranks run worker by worker;
3. neither: a job of one worker, as TensorFlow does, over this machine's devices.
"""

from __future__ import annotations

from allgpu.errors import ArgumentError
from allgpu.runtime.cluster import from_tf_config_env, from_torchrun_env, tf_config_cluster
from allgpu.runtime.cluster_resolver import TFConfigClusterResolver
from allgpu.strategies.mirrored import MirroredStrategy


class MultiWorkerMirroredStrategy(MirroredStrategy):
    """Replicas on several machines, parameters mirrored, gradients all-reduced during backward.

    Args:
        cluster_resolver: None (read ``TF_CONFIG`` or the launcher's environment) or an
            :class:`allgpu.cluster_resolver.TFConfigClusterResolver`, as TensorFlow takes one; a launcher's
            environment (``allgpu run``, torchrun) wins over both.
        devices / num_replicas: this worker's devices, as for :class:`MirroredStrategy`
            (default: every visible GPU, one CPU replica without one). Every worker must run as many.
        fallback: default ``"error"``: a multi-machine job that silently shrinks to one device is worse than
            a clear failure.
        timeout, backend, bucket_cap_mb, gradient_compression: as for :class:`MirroredStrategy`.

    Raises:
        ClusterConfigError: a malformed or inconsistent ``TF_CONFIG`` or launcher environment, naming the field.
        StrategyStartError: the workers could not meet (``fallback="error"``).
    """

    def __init__(self, cluster_resolver=None, *, devices=None, num_replicas: int | None = None,
                 fallback: str = "error", timeout: float | None = None, backend: str | None = None,
                 bucket_cap_mb: float = 25.0, gradient_compression: str | None = None):
        if cluster_resolver is not None and not isinstance(cluster_resolver, TFConfigClusterResolver):
            raise ArgumentError(f"cluster_resolver={type(cluster_resolver).__name__}(...) is not supported; pass "
                                "allgpu.cluster_resolver.TFConfigClusterResolver() (TF_CONFIG), or None to read "
                                "TF_CONFIG or the `allgpu run --nnodes N` / torchrun environment.")
        self._cluster_resolver = cluster_resolver
        if from_torchrun_env() is not None:
            self._tf_config = None
        elif cluster_resolver is not None:
            self._tf_config = cluster_resolver.tf_config
        else:
            self._tf_config = from_tf_config_env()
        super().__init__(devices, num_replicas=num_replicas, fallback=fallback, timeout=timeout, backend=backend,
                         bucket_cap_mb=bucket_cap_mb, gradient_compression=gradient_compression)

    def _cluster(self):
        return None if self._tf_config is None else tf_config_cluster(self._tf_config)

    @property
    def cluster_resolver(self) -> TFConfigClusterResolver | None:
        """The resolver this strategy was given (``tf.distribute.MultiWorkerMirroredStrategy.cluster_resolver``)."""
        return self._cluster_resolver

    @property
    def worker_index(self) -> int:
        """This machine's index in the job (TensorFlow's task index; torchrun's node rank)."""
        return self.replica_id_in_sync // self.replica_group.local_world_size
