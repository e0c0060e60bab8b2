"""allgpu: every device you have works on your training; when one sits idle, allgpu tells you why.

Glossary (``tf.distribute``'s, with PyTorch's names beside it):

- *replica*: one process bound to one device; *rank* is its index, ``replica_id_in_sync``.
- *num_replicas_in_sync*: replicas in the job, PyTorch's *world size*.
- *global batch*: examples per step across all replicas; each replica gets ``global_batch_size / N``.
- *mirrored*: a parameter kept identical on every replica, its gradient averaged by all-reduce.

Names are imported on first use, so ``allgpu lint`` and ``allgpu doctor`` start without importing torch.
"""

import importlib.abc
import importlib.util
import sys
from importlib import import_module

# Eager, and torch-free: a submodule named allgpu.launch would otherwise shadow the function.
from allgpu.runtime.launch import launch

__version__ = "0.1.0"

_EXPORTS = {
    "Device": "allgpu.devices",
    "parse_device": "allgpu.devices",
    "visible_devices": "allgpu.devices",
    "InputContext": "allgpu.data",
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
    "compute_average_loss": "allgpu.losses",
    "ReduceOp": "allgpu.reduce_op",
    "TFConfigClusterResolver": "allgpu.runtime.cluster_resolver",
}

# Modules that moved in the 0.2 reshape, still importable under their old names (``import allgpu.tf_config``).
_MOVED = {
    "allgpu.cluster": "allgpu.runtime.cluster",
    "allgpu.tf_config": "allgpu.runtime.cluster",
    "allgpu.elastic": "allgpu.runtime.elastic",
    "allgpu._replica": "allgpu.runtime.replica_main",
    "allgpu.param_server": "allgpu.strategies.ps_server",
    "allgpu.progress": "allgpu.train.progress",
    "allgpu.metrics": "allgpu.train.metrics",
    "allgpu.resume": "allgpu.train.checkpoint_plan",
    # tf.distribute.cluster_resolver's spelling: allgpu.cluster_resolver.TFConfigClusterResolver()
    "allgpu.cluster_resolver": "allgpu.runtime.cluster_resolver",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a moved module under its old name: the same module object, not a copy."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in _MOVED else None

    def create_module(self, spec):
        return import_module(_MOVED[spec.name])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())

# Submodules reachable as attributes after a bare ``import allgpu`` (``allgpu.checkpoint.save(...)``).
_SUBMODULES = ("checkpoint", "monitor", "doctor", "lint", "data", "devices", "strategies", "train", "errors",
               "runtime", "cluster", "tf_config", "elastic", "bench", "demo", "cluster_resolver")

__all__ = sorted([*_EXPORTS, "launch"])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f"allgpu.{name}")
    raise AttributeError(f"module 'allgpu' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
