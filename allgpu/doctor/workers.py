"""How many DataLoader workers a replica should start: moved to :mod:`allgpu.devices.advice` (one answer for
``allgpu doctor``, ``distribute_dataset(num_workers="auto")`` and the step monitor); these names stay."""

from allgpu.devices.advice import MAX_WORKERS, WorkerAdvice, suggest_workers, usable_cores

__all__ = ["MAX_WORKERS", "WorkerAdvice", "suggest_workers", "usable_cores"]
