"""allgpu: every device you have works on your training; when one sits idle, allgpu tells you why.

Glossary (``tf.distribute``'s, with PyTorch's names beside it):

- *replica*: one process bound to one device; *rank* is its index, ``replica_id_in_sync``.
- *num_replicas_in_sync*: replicas in the job, PyTorch's *world size*.
- *global batch*: examples per step across all replicas; each replica gets ``global_batch_size / N``.
- *mirrored*: a parameter kept identical on every replica, its gradient averaged by all-reduce.

Names are imported on first use, so ``allgpu lint`` and ``allgpu doctor`` start without importing torch.
"""

from importlib import import_module

# Eager, and torch-free: a submodule named allgpu.launch would otherwise shadow the function.
from allgpu.runtime.launch import launch

__version__ = "0.1.0"

_EXPORTS = {
    "Device": "allgpu.devices",
    "parse_device": "allgpu.devices",
    "visible_devices": "allgpu.devices",
    "InputContext": "allgpu.core.data",
    "Strategy": "allgpu.strategies",
    "OneDeviceStrategy": "allgpu.strategies",
    "MirroredStrategy": "allgpu.strategies",
    "MultiWorkerMirroredStrategy": "allgpu.strategies",
    "CentralStorageStrategy": "allgpu.strategies",
    "ParameterServerStrategy": "allgpu.strategies",
    "FullyShardedStrategy": "allgpu.strategies",
    "fit": "allgpu.train",
    "evaluate": "allgpu.train",
    "History": "allgpu.train",
    "Callback": "allgpu.train",
    "Placement": "allgpu.runtime.placement",
    "compute_average_loss": "allgpu.core.losses",
    "scale_regularization_loss": "allgpu.core.losses",
    "ReduceOp": "allgpu.core.reduce_op",
    "TFConfigClusterResolver": "allgpu.runtime.cluster_resolver",
    "get_strategy": "allgpu.strategies.base.context",
    "has_strategy": "allgpu.strategies.base.context",
    "in_cross_replica_context": "allgpu.strategies.base.context",
    "get_replica_context": "allgpu.strategies.base.context",
    "ReplicaContext": "allgpu.strategies.base.context",
    "StrategyExtended": "allgpu.strategies.base.extended",
}

# Submodules reachable as attributes after a bare ``import allgpu`` (``allgpu.checkpoint.save(...)``).
_SUBMODULES = ("checkpoint", "monitor", "doctor", "lint", "devices", "strategies", "train", "errors", "runtime",
               "bench", "keras")
# tf.distribute.cluster_resolver's spelling (``allgpu.cluster_resolver.TFConfigClusterResolver()``): an attribute
# naming the real module, as ``tf.distribute.cluster_resolver`` is reached.
_ATTRIBUTE_MODULES = {"cluster_resolver": "allgpu.runtime.cluster_resolver"}

__all__ = sorted([*_EXPORTS, "launch"])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f"allgpu.{name}")
    if name in _ATTRIBUTE_MODULES:
        return import_module(_ATTRIBUTE_MODULES[name])
    raise AttributeError(f"module 'allgpu' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
