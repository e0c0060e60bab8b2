"""One finding and one severity scale for every diagnosis tool: ``allgpu lint``, ``allgpu doctor`` and the step
monitor all report :class:`Finding` objects.

Severity (:data:`SEVERITIES`, most serious first):

* ``"error"``: a device will not be used, training will fail or is wrong (``allgpu doctor`` exits 1);
* ``"warning"``: training runs, but slower than it could, or at risk;
* ``"info"``: worth knowing, nothing to fix.

A finding says *where* in one of three ways, whichever fits the tool: a :class:`Location` in a file (lint), a
``replica`` (monitor), or driver/torch GPU indices in ``devices`` (doctor). ``evidence`` holds what was read to
reach it (e.g. a line of ``nvidia-smi`` output, a field of the reading), one plain string an item.

Compatibility (documented, kept on purpose): the lint attribute names ``rule_id``, ``path``, ``line``, ``col``,
``cell``, ``file_line`` and the call ``finding.location()`` (``"path:line:col"``), and the doctor name ``cause``,
are read-only aliases of the fields below; :class:`allgpu.doctor.Problem` is a constructor spelling that builds
a :class:`Finding`. Each tool's JSON shape is written by the tool (``allgpu.lint.output``,
``allgpu.doctor.report``, ``allgpu.monitor.report``); :meth:`Finding.to_dict` is the one shared shape.

This module is a leaf: it imports nothing from allgpu but :mod:`allgpu.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from allgpu.errors import FindingError

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Location:
    """A place in a source file.

    Attributes:
        path: the file as given to the tool.
        line: 1-based line; for a notebook, the line inside ``cell``.
        col: 1-based column.
        cell: 1-based index of the notebook cell among all cells, None for a ``.py`` file.
        file_line: for a notebook, the line of the ``.ipynb`` file itself (SARIF points there), when known.
    """

    path: str
    line: int = 1
    col: int = 1
    cell: int | None = None
    file_line: int | None = None

    def __str__(self) -> str:
        """``path:line:col`` or, for a notebook, ``path:cell N:line:col``."""
        if self.cell is not None:
            return f"{self.path}:cell {self.cell}:{self.line}:{self.col}"
        return f"{self.path}:{self.line}:{self.col}"

    def __call__(self) -> str:
        """Compat: lint's ``finding.location()`` returned this text; it still does."""
        return str(self)


class _Alias:
    """A read-only attribute that reads another one, following a path (``location.path``); None past a None."""

    def __init__(self, *path: str, doc: str):
        self.path, self.__doc__ = path, doc

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        for name in self.path:
            obj = getattr(obj, name)
            if obj is None:
                return None
        return obj


@dataclass(frozen=True)
class Finding:
    """One thing a diagnosis tool found, with its fix.

    Attributes:
        id: stable identifier tests and tools key on: a lint rule id (``"PT001"``), a doctor or monitor rule
            name (``"cuda-visible-devices-hides"``, ``"input-bound"``).
        severity: one of :data:`SEVERITIES`.
        message: what is wrong and why, naming the file, replica or devices (doctor calls it ``cause``).
        fix: what to do, with the exact command or code where there is one.
        location: where in a file (lint), else None.
        replica: the replica concerned (monitor), None when it concerns the job or the machine.
        devices: GPU indices concerned (doctor: driver indices, or torch indices where the rule says so).
        evidence: what was read to reach the finding, one plain string an item; empty when nothing to show.

    Raises:
        FindingError: (a ``ValueError``) ``severity`` is not one of :data:`SEVERITIES`, or ``id`` or ``message``
            is empty.
    """

    id: str
    severity: str
    message: str
    fix: str = ""
    location: Location | None = None
    replica: int | None = None
    devices: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise FindingError(f"Finding {self.id!r}: severity {self.severity!r} is not one of "
                               f"{', '.join(SEVERITIES)}.")
        for name in ("id", "message"):
            if not getattr(self, name):
                raise FindingError(f"Finding {self.id!r}: {name} must not be empty.")
        # Lists from JSON or callers become tuples, so findings stay hashable and compare equal.
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "evidence", tuple(self.evidence))

    # Compat aliases, read-only: lint's and doctor's former attribute names.
    rule_id = _Alias("id", doc="Lint's name for :attr:`id`.")
    cause = _Alias("message", doc="Doctor's name for :attr:`message`.")
    path = _Alias("location", "path", doc="Lint: ``location.path``; None without a location.")
    line = _Alias("location", "line", doc="Lint: ``location.line``; None without a location.")
    col = _Alias("location", "col", doc="Lint: ``location.col``; None without a location.")
    cell = _Alias("location", "cell", doc="Lint: ``location.cell``; None without a location or outside a notebook.")
    file_line = _Alias("location", "file_line", doc="Lint: ``location.file_line``; None when unknown.")

    @property
    def rank(self) -> int:
        """0 for ``"error"``, 1 for ``"warning"``, 2 for ``"info"``: the sort key of :func:`by_severity`."""
        return SEVERITIES.index(self.severity)

    def to_dict(self) -> dict[str, Any]:
        """The shared JSON shape: every field, ``location`` as a dict or None, tuples as lists."""
        loc = self.location
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix,
                "location": None if loc is None else {"path": loc.path, "line": loc.line, "col": loc.col,
                                                      "cell": loc.cell, "file_line": loc.file_line},
                "replica": self.replica, "devices": list(self.devices), "evidence": list(self.evidence)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        """The inverse of :meth:`to_dict` (missing optional keys take their defaults).

        Raises:
            FindingError: a key is unknown, or ``id``/``severity``/``message`` is missing or invalid.
        """
        known = {"id", "severity", "message", "fix", "location", "replica", "devices", "evidence"}
        unknown = sorted(set(data) - known)
        missing = sorted({"id", "severity", "message"} - set(data))
        if unknown or missing:
            raise FindingError(f"not a finding: unknown keys {unknown}, missing keys {missing}; expected the "
                               "shape Finding.to_dict() writes.")
        loc = data.get("location")
        return cls(**{**data, "location": Location(**loc) if isinstance(loc, dict) else loc})


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    return sorted(findings, key=lambda f: f.rank)


def exit_code(findings: Iterable[Finding], fail_on: str = "error") -> int:
    """1 when any finding is at least as serious as ``fail_on``, else 0.

    ``allgpu doctor`` uses the default (errors fail); ``allgpu lint`` fails on any finding (``fail_on="info"``).

    Raises:
        FindingError: ``fail_on`` is not one of :data:`SEVERITIES`.
    """
    if fail_on not in SEVERITIES:
        raise FindingError(f"exit_code(fail_on={fail_on!r}): expected one of {', '.join(SEVERITIES)}.")
    limit = SEVERITIES.index(fail_on)
    return 1 if any(f.rank <= limit for f in findings) else 0
