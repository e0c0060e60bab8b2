"""Distribution strategies, one per file: where parameters live and how they are kept in sync.

Each strategy is imported on first use: ``allgpu.MirroredStrategy`` does not import FSDP2 and DTensor
(``torch.distributed.tensor``, about 0.3 s of every replica's start-up) unless the script asks for
``FullyShardedStrategy``.
"""

from importlib import import_module

_MODULES = {
    "Strategy": "allgpu.strategies.base.strategy",
    "OneDeviceStrategy": "allgpu.strategies.one_device",
    "MirroredStrategy": "allgpu.strategies.mirrored",
    "MultiWorkerMirroredStrategy": "allgpu.strategies.multi_worker",
    "CentralStorageStrategy": "allgpu.strategies.central_storage",
    "ParameterServerStrategy": "allgpu.strategies.parameter_server",
    "FullyShardedStrategy": "allgpu.strategies.fully_sharded",
}

__all__ = list(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
