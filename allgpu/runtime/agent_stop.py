"""Stopping ``allgpu run``'s replicas: a frozen replica ends at once, and the launcher can say what it was doing.

PyTorch's elastic agent stops a group (a replica failed, a restart, a signal to the launcher) by sending SIGTERM
to each replica's process group, waiting up to 30 s, then SIGKILL
(``torch.distributed.elastic.multiprocessing.api.SubprocessContext._close``). A replica frozen by SIGSTOP
(Ctrl-Z, a debugger, a paused container) holds the SIGTERM pending until it is continued, so a job whose replica
froze ended 30 s after the collective timeout instead of at it. :func:`ending_frozen_replicas` makes each stop
also send SIGCONT, which delivers the pending SIGTERM, and notes each replica's state (frozen, or running: slow
or waiting) at the moment it was stopped, for :func:`stopped_state`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Iterator

from allgpu.runtime.replicas import process_state

_STATES: dict[int, str] = {}  # pid -> what the replica was doing when the agent stopped it
_STOPPED: list[tuple[int, int]] = []  # (local rank, pid) of each replica the agent stopped, in order


def stopped_replicas() -> str:
    """``"local replicas 0 (pid 11), 1 (pid 12)"`` for the replicas the agent stopped, or ``"the replicas"``."""
    if not _STOPPED:
        return "the replicas"
    return "local replicas " + ", ".join(f"{rank} (pid {pid})" for rank, pid in sorted(_STOPPED))


def stopped_state(pid: int) -> str | None:
    """What replica process ``pid`` was doing when the agent stopped it (``"frozen (stopped: ...)"`` or
    ``"still running (slow, or waiting elsewhere)"``), or None if the agent did not stop it (it had exited)."""
    return _STATES.get(pid)


@contextlib.contextmanager
def ending_frozen_replicas() -> Iterator[None]:
    """While the body runs the elastic agent, every replica it stops is continued (SIGCONT) after the stop signal,
    and its state is noted first. Wraps ``SubprocessHandler.close``, the one place the agent signals a replica."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as module

    handler_class = module.SubprocessHandler
    original = handler_class.close

    def close(self, death_sig=None):
        pid = self.proc.pid
        if self.proc.poll() is None and pid not in _STATES:
            _STATES[pid] = process_state(pid).removeprefix("is ")
            _STOPPED.append((self.local_rank_id, pid))
        try:
            original(self, death_sig)
        except ProcessLookupError:  # it exited between the agent's poll and its signal: nothing left to stop
            return
        with contextlib.suppress(OSError):  # the process group is gone already: nothing left to continue
            os.killpg(pid, signal.SIGCONT)  # a stopped process receives the pending signal once continued

    handler_class.close = close
    try:
        yield
    finally:
        handler_class.close = original
