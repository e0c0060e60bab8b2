"""Typed errors. Each says what went wrong, why, and the fix, and names the replica where one is involved."""

from __future__ import annotations

import os
import sys
import warnings


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


class RestartError(AllGpuError, RuntimeError):
    """A restart under ``allgpu run`` with fixed node ranks that cannot gather the job again: another node's replicas
    had all finished cleanly (their launcher does not restart them), or node 0's launcher has ended."""


class ClusterConfigError(AllGpuError, ValueError):
    """A malformed or inconsistent cluster description (``TF_CONFIG``, torchrun environment)."""


class CheckpointError(AllGpuError, RuntimeError):
    """A checkpoint that is missing, corrupt or does not fit the model."""


class UnsupportedError(AllGpuError, RuntimeError):
    """An operation the chosen strategy does not offer (e.g. a cross-worker reduce under asynchronous training)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file or folder that fails verification (truncated, bit-flipped, incomplete)."""


# Diagnosis tools (lint, doctor, monitor) and the findings they share.


class FindingError(AllGpuError, ValueError):
    """A :class:`allgpu.findings.Finding` built with an unknown severity or an empty id or message."""


class ReadingFormatError(AllGpuError, ValueError):
    """A saved ``allgpu doctor`` reading (JSON) that is missing a field or holds a value of the wrong type."""


class LintUsageError(AllGpuError, ValueError):
    """Bad arguments to the linter: an unknown rule id in select/ignore, a path that does not exist."""


class UnknownRuleError(LintUsageError, KeyError):
    """``allgpu lint --explain ID`` (or :func:`allgpu.lint.explain`) with an ID no rule has; a ``KeyError`` too."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class NotebookError(AllGpuError, ValueError):
    """A file that is not a readable Jupyter notebook (not JSON, or no ``cells`` list)."""


class ArgumentError(AllGpuError, ValueError):
    """An argument to an allgpu function that cannot be used (wrong type, out of range, nothing to work on);
    the message names the argument, what was expected, and the fix."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (a module where a function is expected, a list where a tuple is): both a
    ``ValueError`` and a ``TypeError``, so either ``except`` catches it."""


class ScriptNotFoundError(AllGpuError, FileNotFoundError):
    """``allgpu run`` / ``allgpu doctor --run`` of a script that does not exist."""


class MonitorUsageError(AllGpuError, RuntimeError):
    """The step monitor called out of order (a phase outside a step, ``end_step`` without ``start_step``, a
    hang dump installed off the main thread)."""


class ShardingError(AllGpuError, ValueError):
    """A model or optimizer that ``FullyShardedStrategy`` cannot shard as asked (e.g. a unit splitting a tied weight)."""


class InputError(AllGpuError, ValueError):
    """A dataset or batch size that cannot be distributed (batch 0 or not divisible, an empty dataset, batches that
    are not ``(inputs, targets)``); the message names the numbers and the fix."""


class OutOfRangeError(AllGpuError, StopIteration):
    """``iterator.get_next()`` past the end of a distributed dataset (TensorFlow's ``tf.errors.OutOfRangeError``);
    also a ``StopIteration``. Fix: stop at the epoch's end, or use ``get_next_as_optional()``."""


class DatasetTypeError(AllGpuError, TypeError):
    """A dataset of a kind that cannot be sharded by index (an ``IterableDataset``); the message names the fix."""


class MigrateInputError(AllGpuError, ValueError):
    """A script ``allgpu migrate`` cannot read or parse (missing, not UTF-8, not valid Python); nothing was changed."""


class DataMismatchError(InputError):
    """Replicas built different data (a different length, or different examples at the same index): data prepared
    with unseeded randomness before the strategy started, where each replica runs the script with its own random
    state. The message names the difference and the fix (seed it, or build it after the strategy starts)."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARIES = (f"{os.sep}torch{os.sep}", f"{os.sep}keras{os.sep}", f"{os.sep}contextlib.py", "<frozen ")


def _not_users(path: str) -> bool:
    return path.startswith(_PACKAGE) or any(part in path for part in _LIBRARIES)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the user's line: the innermost caller outside allgpu, torch and Keras
    (``stacklevel`` computed, not guessed, so the location stays right however deep the call came from)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _not_users(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1 if frame is not None else 2)


class ShardedForwardError(AllGpuError, RuntimeError):
    """Under ``FullyShardedStrategy`` replicas ran the sharded model's forward from different places (a forward on
    some replicas only, as evaluation under ``if strategy.is_chief:``): a forward all-gathers parameters from every
    replica, so it is a collective. The message names each replica's line and the fix."""
