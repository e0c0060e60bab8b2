"""Background checkpoint writes: the training thread pays only for the copy to CPU memory.

One write is in flight per process at a time (``save`` waits for the previous one first), so writes land
in step order and their collectives never interleave. The thread is not a daemon: a script that ends
right after ``save(blocking=False)`` still finishes the file before the interpreter exits.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from allgpu.errors import CheckpointError


class PendingCheckpoint:
    """Handle of a checkpoint being written in the background (``save(..., blocking=False)``).

    Attributes:
        path: where the checkpoint will be once complete.
        pause_s: seconds the caller was blocked (copying state to CPU memory), for monitoring.
    """

    def __init__(self, path: Path, job: Callable[[], None] | None, pause_s: float):
        self.path = Path(path)
        self.pause_s = pause_s
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if job is not None:
            self._thread = threading.Thread(target=self._run, args=(job,), name=f"allgpu-ckpt-{self.path.name}")
            self._thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # kept for wait(); a thread cannot raise into its caller
            self._error = exc

    def done(self) -> bool:
        """True once the write finished (successfully or not)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Path:
        """Block until the checkpoint is complete; return its path.

        Raises:
            CheckpointError: the background write failed (its exception is chained), or ``timeout``
                seconds passed first.
        """
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise CheckpointError(f"checkpoint {self.path} still being written after {timeout} s")
        if self._error is not None:
            raise CheckpointError(f"background write of checkpoint {self.path} failed: {self._error}") from self._error
        return self.path

    def __repr__(self) -> str:
        state = "done" if self.done() else "writing"
        return f"PendingCheckpoint({str(self.path)!r}, {state}, pause={self.pause_s * 1e3:.1f} ms)"


_IN_FLIGHT: list[PendingCheckpoint] = []


def track(handle: PendingCheckpoint) -> PendingCheckpoint:
    _IN_FLIGHT.append(handle)
    return handle


def wait_pending(timeout: float | None = None) -> list[Path]:
    """Wait for every background checkpoint write of this process; return their paths in order.

    Call it before ``torch.distributed.destroy_process_group()``: sharded background writes use
    collectives.

    Raises:
        CheckpointError: a background write failed (the first failure; all are waited for).
    """
    paths, first_error = [], None
    while _IN_FLIGHT:
        handle = _IN_FLIGHT.pop(0)
        try:
            paths.append(handle.wait(timeout))
        except CheckpointError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return paths
