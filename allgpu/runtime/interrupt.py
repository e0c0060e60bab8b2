"""Seeing Ctrl-C (SIGINT) while the main thread is stuck inside a collective or a rendezvous.

Python runs its SIGINT handler (``KeyboardInterrupt``) only when the main thread returns to the interpreter; a
thread blocked in a Gloo/NCCL wait or a ``TCPStore`` rendezvous does not, so a job scheduler's or an IDE's SIGINT
to replica 0 alone used to leave every process alive until the collective timeout. The C-level handler does
write the signal number to the fd given to :func:`signal.set_wakeup_fd`, whatever the main thread is doing;
:class:`SigintWatch` reads it from another thread.
"""

from __future__ import annotations

import signal
import socket
from typing import Callable

_NEWEST: list[Callable[[], object]] = []  # gives the newest complete checkpoint of this job's folder, or None

# What a SIGINT is, in the words a user recognises (the sender is not known to the receiving process).
SIGINT_WORDS = "SIGINT: Ctrl-C, or a stop sent by a job scheduler or an IDE"


def note_checkpoints(newest: Callable[[], object]) -> None:
    """Register ``newest()``, which gives the newest complete checkpoint in the folder this process saves to (or
    ``fit`` resumes from), or None; an interrupt names what it returns then. ``allgpu.checkpoint.save`` and
    ``fit(checkpoint_dir=...)`` call it. Read at interrupt time, so a save that completed just before counts."""
    _NEWEST[:] = [newest]


def checkpoint_note() -> str:
    """`` The newest checkpoint is PATH (...)`` when there is one, else ``""``."""
    try:
        path = _NEWEST[0]() if _NEWEST else None
    except Exception:  # the folder vanished or cannot be read: say nothing rather than fail the report
        path = None
    if path is None:
        return ""
    return (f" The newest checkpoint is {path} (fit(checkpoint_dir=...) resumes from it when the script runs "
            "again; allgpu.checkpoint.restore loads it).")


class SigintWatch:
    """Reports SIGINTs received by this process since it was created (main thread only; otherwise inert)."""

    def __init__(self):
        self.enabled = False
        self._reader = self._writer = None
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # the program handles SIGINT itself (or ignores it): leave it alone
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            reader.close()
            writer.close()
            return
        if previous != -1:  # someone else (asyncio) owns the wakeup fd: give it back
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return
        self._reader, self._writer, self.enabled = reader, writer, True

    def fired(self) -> bool:
        """True once a SIGINT arrived (reads what is pending; never blocks)."""
        if not self.enabled:
            return False
        try:
            data = self._reader.recv(512)
        except (BlockingIOError, OSError):
            return False
        return int(signal.SIGINT) in data
