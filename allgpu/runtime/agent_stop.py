"""Stopping ``allgpu run``'s replicas: a frozen replica ends at once, and the launcher can say what it was doing.

PyTorch's elastic agent stops a group (a replica failed, a restart, a signal to the launcher) by sending SIGTERM
to each replica's process group, waiting up to 30 s, then SIGKILL
(``torch.distributed.elastic.multiprocessing.api.SubprocessContext._close``). A replica frozen by SIGSTOP
(Ctrl-Z, a debugger, a paused container) holds the SIGTERM pending until it is continued, so a job whose replica
froze ended 30 s after the collective timeout instead of at it. :func:`ending_frozen_replicas` makes each stop
also send SIGCONT, which delivers the pending SIGTERM, and notes each replica's state (frozen, or running: slow
or waiting) at the moment it was stopped, for :func:`stopped_state`. :func:`stopped_words` then says what a
stopped replica had done: one that had raised (its error file, written by ``record`` before Python prints the
traceback and exits) is named with its error and the user's line, never as "still running" though the agent
found it alive while it was only exiting.
"""

from __future__ import annotations

import contextlib
import os
import re
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


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # allgpu/


def raised_at(message) -> tuple[str, str] | None:
    """``("RuntimeError: boom", "train.py:6")`` from a replica's torchelastic error file data (``ProcessFailure.
    message``: a dict with the exception line and ``py_callstack``): the error and the innermost frame of the
    user's code (outside allgpu, torch and runpy; ``"?"`` if none); None when the replica wrote no error."""
    if not isinstance(message, dict) or not message.get("message"):
        return None
    stack = str(message.get("extraInfo", {}).get("py_callstack", ""))
    user = [m for m in _FRAME.finditer(stack) if not m["path"].startswith((_PACKAGE_DIR, "<"))
            and f"{os.sep}torch{os.sep}" not in m["path"]]
    where = f"{os.path.basename(user[-1]['path'])}:{user[-1]['line']}" if user else "?"
    return str(message["message"]).splitlines()[0], where


def stopped_words(rank: int, failure, status: str, first=None) -> str:
    """One replica in the failure summary, ``failure`` a ``ProcessFailure``, ``status`` how it ended and ``first``
    the first failure's ``ProcessFailure``: what it raised and where (it was only exiting if the agent stopped it),
    or what it was doing when the agent stopped it (frozen, or still running: slow, or waiting elsewhere)."""
    raised = raised_at(failure.message)
    state = stopped_state(failure.pid)
    head = f"replica {rank} (pid {failure.pid})"
    if raised is None:
        return head + (f", {state} when the job was stopped" if state else "") + f"; ended by {status}"
    error, where = raised
    same = first is not None and (raised_at(first.message) or ("",))[0] == error
    what = f"the same {error.split(':')[0]}" if same else (error if len(error) <= 160 else error[:157] + "...")
    if error.startswith("RestartError: "):  # allgpu's own error, printed without a traceback
        return f"{head} raised {what}; ended by {status}"
    when = " and was still exiting when the job was stopped" if state else ""
    return f"{head} raised {what} at {where} (its traceback is above){when}; ended by {status}"


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
