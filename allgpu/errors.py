"""Typed errors. Each says what went wrong, why, and the fix, and names the replica where one is involved."""

from __future__ import annotations


class AllGpuError(Exception):
    """Base class for every error allgpu raises on purpose."""


class DeviceError(AllGpuError, ValueError):
    """A device name or device set that cannot be used (bad name, index out of range, mixed kinds)."""


class NotMirroredError(AllGpuError, RuntimeError):
    """A parameter reached training without being created inside ``strategy.scope()``."""


class ReplicaFailedError(AllGpuError, RuntimeError):
    """A replica process raised or died; carries the rank and its traceback."""

    def __init__(self, message: str, rank: int | None = None, remote_traceback: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


class CollectiveTimeoutError(AllGpuError, RuntimeError):
    """A collective did not complete in time; names the replicas that did not arrive."""

    def __init__(self, message: str, missing_ranks: list[int] | None = None):
        super().__init__(message)
        self.missing_ranks = list(missing_ranks or [])


class StrategyStartError(AllGpuError, RuntimeError):
    """Multi-device start failed and ``fallback="error"`` was asked for."""


class ClusterConfigError(AllGpuError, ValueError):
    """A malformed or inconsistent cluster description (``TF_CONFIG``, torchrun environment)."""


class CheckpointError(AllGpuError, RuntimeError):
    """A checkpoint that is missing, corrupt or does not fit the model."""


class UnsupportedError(AllGpuError, RuntimeError):
    """An operation the chosen strategy does not offer (e.g. a cross-worker reduce under asynchronous training)."""


class ShardingError(AllGpuError, ValueError):
    """A model or optimizer that ``FullyShardedStrategy`` cannot shard as asked (e.g. a unit splitting a tied weight)."""
