"""A diagnosed problem: what is wrong, why, and the fix: one :class:`allgpu.findings.Finding`.

Severity, and what it means for ``allgpu doctor``'s exit code (the scale of :mod:`allgpu.findings`):

* ``error``: a GPU on this machine will not be used, or training on it will fail (exit code 1);
* ``warning``: training runs, but slower than it could, or at risk (exit code 0);
* ``info``: worth knowing, nothing to fix (exit code 0).

:class:`Problem` is kept as the doctor's constructor spelling, ``Problem(id, severity, cause, fix, devices)``;
what it builds is a :class:`~allgpu.findings.Finding` (``cause`` is its ``message``, also readable as
``.cause``), and ``isinstance(x, Problem)`` holds for every Finding.
"""

from __future__ import annotations

from typing import Iterable

from allgpu.errors import FindingError
from allgpu.findings import SEVERITIES, Finding, by_severity, exit_code

__all__ = ["SEVERITIES", "Problem", "by_severity", "exit_code"]


class _FindingKind(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Finding)


class Problem(metaclass=_FindingKind):
    """``Problem(id, severity, cause, fix, devices=(), evidence=())`` -> a :class:`~allgpu.findings.Finding`.

    Args:
        id: stable kebab-case identifier, e.g. ``"cuda-visible-devices-hides"``; tests and tools key on it.
        severity: ``"error"``, ``"warning"`` or ``"info"`` (see the module docstring).
        cause: what is wrong and why, in one or two sentences naming the devices (the finding's ``message``).
        fix: what to do, with the exact command or code where there is one; a doctor finding always has one.
        devices: driver indices of the GPUs concerned (empty when not about particular GPUs).
        evidence: what was read to reach the finding, one plain string an item.

    Raises:
        FindingError: (a ``ValueError``) ``severity`` is not one of ``SEVERITIES`` or ``id``/``cause``/``fix``
            is empty.
    """

    def __new__(cls, id: str, severity: str, cause: str, fix: str, devices: Iterable[int] = (),
                evidence: Iterable[str] = ()) -> Finding:
        if not fix:
            raise FindingError(f"Problem {id!r}: fix must not be empty.")
        return Finding(id, severity, cause, fix, devices=tuple(devices), evidence=tuple(evidence))
