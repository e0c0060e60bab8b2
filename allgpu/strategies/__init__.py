"""Distribution strategies, one per file: where parameters live and how they are kept in sync."""

from allgpu.strategies.base.strategy import Strategy
from allgpu.strategies.central_storage import CentralStorageStrategy
from allgpu.strategies.fully_sharded import FullyShardedStrategy
from allgpu.strategies.mirrored import MirroredStrategy
from allgpu.strategies.multi_worker import MultiWorkerMirroredStrategy
from allgpu.strategies.one_device import OneDeviceStrategy
from allgpu.strategies.parameter_server import ParameterServerStrategy

__all__ = ["Strategy", "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy", "CentralStorageStrategy",
           "ParameterServerStrategy", "FullyShardedStrategy"]
