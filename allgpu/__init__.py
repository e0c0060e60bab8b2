"""allgpu: every device you have works on your training; when one sits idle, allgpu tells you why.

Glossary (``tf.distribute``'s, with PyTorch's names beside it):

- *replica*: one process bound to one device; *rank* is its index, ``replica_id_in_sync``.
- *num_replicas_in_sync*: replicas in the job, PyTorch's *world size*.
- *global batch*: examples per step across all replicas; each replica gets ``global_batch_size / N``.
- *mirrored*: a parameter kept identical on every replica, its gradient averaged by all-reduce.

Names are imported on first use, so ``allgpu lint`` and ``allgpu doctor`` start without importing torch.
"""

from importlib import import_module

# Eager, and torch-free: importing the submodule allgpu.launch later would otherwise shadow the function.
from allgpu.launch import launch

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
    "Callback": "allgpu.progress",
}

# Submodules reachable as attributes after a bare ``import allgpu`` (``allgpu.checkpoint.save(...)``).
_SUBMODULES = ("checkpoint", "monitor", "doctor", "lint", "data", "devices", "strategies", "train", "errors",
               "cluster", "tf_config", "elastic", "bench", "demo")

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
