"""Monitoring asked for from outside the user's script: ``allgpu doctor --run script.py``.

The doctor sets a :class:`MonitorSession` in-process before running the script (each replica process runs the
doctor command, so each gets one); ``fit`` then monitors, trains a bounded number of steps, and leaves the
epoch reports here for the doctor to print.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MonitorSession:
    """Overrides for ``fit``: monitor on, one epoch of at most ``max_steps`` steps; reports collected."""

    max_steps: int
    report_dir: str | None = None
    reports: list = field(default_factory=list)
    fit_calls: int = 0


_current: MonitorSession | None = None


def start(max_steps: int, report_dir: str | None = None) -> MonitorSession:
    global _current
    _current = MonitorSession(max_steps, report_dir)
    return _current


def current() -> MonitorSession | None:
    return _current
