"""Argument checks the strategies share: gradient-sync options and reduce-op names."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from allgpu.core.replica_group import REDUCE_OPS
from allgpu.core.sync import COMPRESSIONS
from allgpu.errors import ArgumentError, ArgumentTypeError


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


def is_nest(value: Any) -> bool:
    """A structure ``reduce``/``gather`` map over, one collective per tensor (``tf.distribute``'s nests,
    Accelerate's ``gather((predictions, labels))``): a dict, or a list/tuple holding a tensor. A list of plain
    numbers stays one tensor, as before."""
    if isinstance(value, dict):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(leaf, torch.Tensor) for leaf in tree_leaves(value))


def as_tensor(value: Any, device: Any, what: str) -> torch.Tensor:
    """``value`` as a tensor on ``device``; a typed error naming ``what`` (the call) for anything else."""
    try:
        return torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ArgumentTypeError(f"{what} takes a tensor, a number, or a list/tuple/dict of tensors; got "
                                f"{type(value).__name__} ({exc}).") from exc
