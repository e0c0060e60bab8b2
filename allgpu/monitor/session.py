"""Monitoring asked for from outside the user's script: ``allgpu doctor --run script.py``.

The doctor runs the script inside ``with started(max_steps, report_dir) as session:`` (each replica process runs
the doctor command, so each gets one); ``fit`` reads :func:`current`, monitors, trains a bounded number of steps,
and leaves the epoch reports on the session for the doctor to print. The session lives in a
:class:`contextvars.ContextVar` set for the ``with`` block only: nothing outside it sees one, and it is reset
when the block ends, even on an exception.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class MonitorSession:
    """Overrides for ``fit``: monitor on, one epoch of at most ``max_steps`` steps; reports collected.
    ``device_memory`` (bytes) is the device size to plan against (``allgpu doctor --run --device-memory``), None
    for the device's own."""

    max_steps: int
    report_dir: str | None = None
    device_memory: int | None = None
    reports: list = field(default_factory=list)
    fit_calls: int = 0

    def bound(self, max_steps_per_epoch: int | None, report_dir) -> tuple[int, int, object]:
        """What this session makes of one ``fit`` call: ``(epochs, max_steps_per_epoch, report_dir)`` (one epoch of
        at most ``max_steps`` steps, reports here unless the call names a folder); the monitor is on."""
        self.fit_calls += 1
        steps = min(max_steps_per_epoch or self.max_steps, self.max_steps)
        return 1, steps, report_dir or self.report_dir


_current: contextvars.ContextVar[MonitorSession | None] = contextvars.ContextVar("allgpu_monitor_session",
                                                                                 default=None)


@contextlib.contextmanager
def started(max_steps: int, report_dir: str | None = None,
            device_memory: int | None = None) -> Iterator[MonitorSession]:
    """A :class:`MonitorSession` that ``fit`` calls inside the block see through :func:`current`."""
    session = MonitorSession(max_steps, report_dir, device_memory)
    token = _current.set(session)
    try:
        yield session
    finally:
        _current.reset(token)


def current() -> MonitorSession | None:
    """The session of the enclosing :func:`started` block, None outside one."""
    return _current.get()
