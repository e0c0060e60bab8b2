"""What the checker reports: a :class:`Rule` (the catalogue entry) and a :class:`Finding` (one hit in one file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("error", "warning", "info")


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
    """

    id: str
    severity: str
    title: str
    message: str
    explanation: str = field(repr=False)


@dataclass(frozen=True)
class Finding:
    """One pitfall found at one place.

    Attributes:
        path: the file as given to the checker.
        line: 1-based line; for a notebook, the line inside ``cell``.
        col: 1-based column.
        rule_id: the :class:`Rule` id.
        severity: copied from the rule.
        message: the rule's message, sometimes made concrete (names the model, the device).
        cell: 1-based index of the notebook cell among all cells, ``None`` for a ``.py`` file.
        file_line: for a notebook, the line of the ``.ipynb`` file itself (used by SARIF), when known.
    """

    path: str
    line: int
    col: int
    rule_id: str
    severity: str
    message: str
    cell: int | None = None
    file_line: int | None = None

    def location(self) -> str:
        """``path:line:col`` or, for a notebook, ``path:cell N:line:col``."""
        if self.cell is not None:
            return f"{self.path}:cell {self.cell}:{self.line}:{self.col}"
        return f"{self.path}:{self.line}:{self.col}"

    def to_dict(self) -> dict:
        """A plain dict for JSON output (keys as the attribute names)."""
        return asdict(self)
