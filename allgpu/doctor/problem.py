"""A diagnosed problem: what is wrong, why, and the fix.

Severity, and what it means for ``allgpu doctor``'s exit code:

* ``error``: a GPU on this machine will not be used, or training on it will fail (exit code 1);
* ``warning``: training runs, but slower than it could, or at risk (exit code 0);
* ``info``: worth knowing, nothing to fix (exit code 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Problem:
    """One finding of a doctor rule or of the step monitor.

    Attributes:
        id: stable kebab-case identifier, e.g. ``"cuda-visible-devices-hides"``; tests and tools key on it.
        severity: ``"error"``, ``"warning"`` or ``"info"`` (see the module docstring).
        cause: what is wrong and why, in one or two sentences naming the devices.
        fix: what to do, with the exact command or code where there is one.
        devices: driver indices of the GPUs concerned (empty when not about particular GPUs).
        evidence: where the finding comes from, one short string each: ``"log line 12: Could not load dynamic
            library 'libcudnn.so.8'"``, ``"train.py:8: TF002 ..."``, ``"reading.tensorflow.built_with_cuda=False"``
            (empty for the environment rules, whose evidence is the reading shown beside them).

    Raises:
        ValueError: ``severity`` is not one of ``SEVERITIES`` or ``id``/``cause``/``fix`` is empty.
    """

    id: str
    severity: str
    cause: str
    fix: str
    devices: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(
                f"Problem {self.id!r}: severity {self.severity!r} is not one of {', '.join(SEVERITIES)}."
            )
        for name in ("id", "cause", "fix"):
            if not getattr(self, name):
                raise ValueError(f"Problem {self.id!r}: {name} must not be empty.")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "cause": self.cause, "fix": self.fix,
                "devices": list(self.devices), "evidence": list(self.evidence)}


def exit_code(problems: Iterable[Problem]) -> int:
    """1 when any problem is an error, else 0: the exit code of ``allgpu doctor``."""
    return 1 if any(p.severity == "error" for p in problems) else 0


def by_severity(problems: Iterable[Problem]) -> list[Problem]:
    """Errors first, then warnings, then info; stable within a severity."""
    return sorted(problems, key=lambda p: SEVERITIES.index(p.severity))
