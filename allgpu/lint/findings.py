"""What the checker reports: a :class:`Rule` (the catalogue entry) and a :class:`Finding` (one hit in one file).

:class:`Finding` is :class:`allgpu.findings.Finding`, the one finding type of lint, doctor and the monitor; a lint
finding carries a :class:`~allgpu.findings.Location` and keeps the former attribute names (``rule_id``, ``path``,
``line``, ``col``, ``cell``, ``file_line``, ``location()``) as aliases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from allgpu.findings import SEVERITIES, Finding, Location

__all__ = ["SEVERITIES", "Finding", "Location", "Rule", "lint_finding"]


@dataclass(frozen=True)
class Rule:
    """One check: a stable id (``TF001``), a severity, a one-line message and the long explanation with the fix.

    Attributes:
        id: stable identifier, never reused; ``TF`` = TensorFlow/Keras, ``PT`` = PyTorch, ``AG`` = allgpu,
            ``E999`` = the file could not be parsed.
        severity: ``"error"`` (training is wrong or uses one device), ``"warning"`` (slow or fragile),
            ``"info"`` (worth a look).
        title: short name, used as the SARIF rule name.
        message: the one-line message a finding carries.
        explanation: what goes wrong, why, and the fix (printed by ``allgpu lint --explain ID``).
        fix: the fix in one line; every finding's message ends with it (``... Fix: <fix>``).
    """

    id: str
    severity: str
    title: str
    message: str
    explanation: str = field(repr=False)
    fix: str = ""


def lint_finding(path: str, line: int, col: int, rule_id: str, severity: str, message: str,
                 cell: int | None = None, file_line: int | None = None, fix: str = "") -> Finding:
    """A :class:`~allgpu.findings.Finding` at ``path:line:col`` (the lint checker's former positional spelling).

    ``fix`` is the rule's one-line fix, followed by a pointer to ``allgpu lint --explain ID`` (the fix in full).
    """
    more = f"`allgpu lint --explain {rule_id}` gives the fix in full."
    return Finding(rule_id, severity, message or rule_id, f"{fix} ({more})" if fix else more,
                   location=Location(path, line, col, cell, file_line))
