"""Checks a checkpoint directory before any training is spent on a run that could not save."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from allgpu.errors import CheckpointError, warn_user
from allgpu.runtime.live import live


def directory_error(directory, exc: OSError) -> CheckpointError:
    """A CheckpointError for an OSError met while creating or writing ``directory``, naming it and the fix."""
    why = exc.strerror or str(exc)
    return CheckpointError(
        f"checkpoint directory {str(directory)!r} cannot be written: {why} ({type(exc).__name__}, errno "
        f"{exc.errno}). Fix: pass a folder you can write to (it is created if missing), or fix its permissions.")


def check_directory(directory) -> Path:
    """Create ``directory`` if needed and prove it writable by creating and removing a temporary file there.

    Returns:
        The directory as a Path.

    Raises:
        CheckpointError: it is an existing file, or it cannot be created or written (naming why and the fix).
            Not a collective.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise CheckpointError(
            f"checkpoint directory {str(path)!r} is a file, not a folder. Fix: pass a folder path "
            f"(e.g. {str(path.with_suffix(''))!r}_ckpts); checkpoints are written into it as ckpt-<step>.pt.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".allgpu-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise directory_error(path, exc) from exc
    return path


def warn_open_accumulation(call: str, rank: int) -> None:
    """Warn (on replica 0) when ``call`` saves in the middle of a ``strategy.accumulate(k)`` cycle.

    The gradients of the micro-batches since the last optimizer step are in ``.grad`` (per replica, not yet
    all-reduced) and are not saved, so a run resumed from this checkpoint trains differently from one never
    stopped; ``fit`` saves only at step boundaries, so this concerns custom loops. Not a collective.
    """
    for strategy, _site in live():
        opened = strategy.open_accumulation() if hasattr(strategy, "open_accumulation") else None
        if opened and rank == 0:
            pending, k = opened
            warn_user(
                f"{call} ran after micro-batch {pending} of {k} of strategy.accumulate({k}): the gradients of the "
                f"{pending} micro-batch{'es' if pending > 1 else ''} since the last optimizer step are not in the "
                "checkpoint, so a run resumed from it trains differently from one never stopped. Fix: save when "
                f"acc.sync_step is True (after optimizer.step()), e.g. every N micro-batches with N a multiple of {k}.",
                RuntimeWarning)
            return
