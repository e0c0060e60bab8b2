"""Argument checks the strategies share: gradient-sync options and reduce-op names."""

from __future__ import annotations

from typing import Any

from allgpu.core.replica_group import REDUCE_OPS
from allgpu.core.sync import COMPRESSIONS
from allgpu.errors import ArgumentError


def validate_sync_options(bucket_cap_mb: float, gradient_compression: str | None) -> None:
    """Check gradient-sync arguments before any replica is started.

    Raises:
        ValueError: ``bucket_cap_mb`` not a positive number of MiB, or an unknown ``gradient_compression``.
    """
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
        raise ArgumentError(f"bucket_cap_mb={bucket_cap_mb!r}; expected a positive number of MiB, e.g. 25.")
    if gradient_compression not in COMPRESSIONS:
        raise ArgumentError(f"gradient_compression={gradient_compression!r}; expected one of {tuple(COMPRESSIONS)}.")


def op_name(op: Any) -> str:
    name = getattr(op, "name", op)  # tf.distribute.ReduceOp.SUM has .name == "SUM"
    name = str(name).lower()
    if name not in REDUCE_OPS:
        raise ArgumentError(f"reduce op {op!r} is not supported; expected one of 'sum', 'mean', 'max', 'min'.")
    return name
