"""Show a :class:`~allgpu.doctor.verdict.Verdict`: rich text for people, a dict for ``--json``."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from allgpu.doctor.report import finding_body
from allgpu.doctor.verdict import Verdict

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


def render_verdict(verdict: Verdict, title: str, console: Console | None = None) -> None:
    """Print the device counts, the findings (most likely first) with evidence and fix, and the notes."""
    console = console or Console()
    console.print(Text(title, style="bold"))
    console.print(f"GPUs present: {_n(verdict.present)}   registered by the framework: {_n(verdict.registered)}   "
                  f"used by the job: {_n(verdict.used)}")
    for rank, p in enumerate(verdict.findings, 1):
        console.print(Text.assemble((f"{rank}. ", "bold"), (f"{p.severity.upper():8}", _STYLE[p.severity]),
                                    (p.id, "bold")))
        console.print(finding_body(p))
    for note in verdict.notes:
        console.print(Text(note, style="dim" if not verdict.nothing_known else ""))


def verdict_exit_code(verdict: Verdict) -> int:
    """1 when a finding is an error, else 0 (``multi-gpu-ok`` and an unexplained log give 0)."""
    return 1 if any(p.severity == "error" for p in verdict.findings) else 0
