"""Cluster resolvers, TensorFlow's way of handing a cluster to ``MultiWorkerMirroredStrategy``.

``TFConfigClusterResolver`` is here; ``SlurmClusterResolver``, ``KubernetesClusterResolver``,
``SkyPilotClusterResolver`` and ``RayClusterResolver`` live in :mod:`allgpu.runtime.engines.resolvers` and are
reached through this module too (``allgpu.cluster_resolver.SlurmClusterResolver()``).

``TFConfigClusterResolver``: TensorFlow's way of handing a cluster to ``MultiWorkerMirroredStrategy``.

TensorFlow users write ``MultiWorkerMirroredStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())``;
``allgpu.cluster_resolver.TFConfigClusterResolver()`` takes the same place. It reads ``TF_CONFIG`` once, when
built (a malformed one fails there, naming the field), and may override the task as TensorFlow's does
(``task_type=``, ``task_id=``). Follows ``tf.distribute.cluster_resolver.TFConfigClusterResolver``.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import TFConfig, parse_tf_config
from allgpu.runtime.engines import Cluster, from_tf_config
from allgpu.runtime.engines.resolvers import (ClusterSpec, EngineClusterResolver, KubernetesClusterResolver,
                                              RayClusterResolver, SkyPilotClusterResolver, SlurmClusterResolver)

__all__ = ["TFConfigClusterResolver", "ClusterSpec", "SlurmClusterResolver", "KubernetesClusterResolver", "SkyPilotClusterResolver",
           "RayClusterResolver", "EngineClusterResolver", "RESOLVERS"]


class TFConfigClusterResolver:
    """The cluster described by ``TF_CONFIG`` (``{"cluster": {...}, "task": {"type": ..., "index": ...}}``).

    Args:
        task_type, task_id: this task's role and index, overriding ``TF_CONFIG``'s ``task``.
        rpc_layer: accepted for TensorFlow compatibility (``"grpc"``); allgpu's workers meet through
            ``torch.distributed``'s TCP store at worker 0's address, whatever it names.
        environment: accepted for TensorFlow compatibility; ignored.

    Raises:
        ClusterConfigError: ``TF_CONFIG`` is malformed (naming the field), or ``task_type``/``task_id`` are given
            without a ``TF_CONFIG`` cluster to place them in.
    """

    def __init__(self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None,
                 environment: str | None = None, *, env: Mapping[str, str] | None = None):
        text = (os.environ if env is None else env).get("TF_CONFIG", "")
        self.rpc_layer = rpc_layer
        self.environment = environment
        self._raw: dict = {}
        self.tf_config: TFConfig | None = None
        if text.strip():
            self.tf_config = parse_tf_config(text)
            self._raw = json.loads(text)
        if task_type is not None or task_id is not None:
            if self.tf_config is None:
                raise ClusterConfigError(f"TFConfigClusterResolver(task_type={task_type!r}, task_id={task_id!r}): "
                                         "TF_CONFIG is not set, so there is no cluster to place the task in. Fix: "
                                         'set TF_CONFIG=\'{"cluster": {"worker": ["host:port", ...]}}\'.')
            task = dict(self._raw.get("task") or {})
            task.update({k: v for k, v in (("type", task_type), ("index", task_id)) if v is not None})
            self._raw = dict(self._raw, task=task)
            self.tf_config = parse_tf_config(json.dumps(self._raw))

    @property
    def task_type(self) -> str | None:
        """This task's role (``"worker"`` or ``"chief"``); None without ``TF_CONFIG``."""
        return None if self.tf_config is None else self.tf_config.task_type

    @property
    def task_id(self) -> int | None:
        """This task's index within its role; None without ``TF_CONFIG``."""
        return None if self.tf_config is None else self.tf_config.task_index

    def cluster(self) -> Cluster | None:
        """The frozen description ``MultiWorkerMirroredStrategy`` places its replicas by; None without
        ``TF_CONFIG`` (a job of one worker)."""
        return None if self.tf_config is None else from_tf_config(self.tf_config)

    def cluster_spec(self) -> ClusterSpec:
        """``TF_CONFIG``'s ``cluster``: role -> ``host:port`` list (empty without ``TF_CONFIG``), a dict that also
        has ``tf.train.ClusterSpec``'s methods (``as_dict()``, ``num_tasks(role)``, ...)."""
        return ClusterSpec({role: list(addresses) for role, addresses in (self._raw.get("cluster") or {}).items()})

    def num_accelerators(self) -> dict[str, int]:
        """``{"GPU": n}``: the GPUs this process sees (TensorFlow's method of the same name)."""
        import torch

        return {"GPU": torch.cuda.device_count() if torch.cuda.is_available() else 0}

    def __repr__(self) -> str:
        return f"TFConfigClusterResolver(task_type={self.task_type!r}, task_id={self.task_id!r})"


#: every resolver ``MultiWorkerMirroredStrategy(cluster_resolver)`` accepts
RESOLVERS = (TFConfigClusterResolver, EngineClusterResolver)
