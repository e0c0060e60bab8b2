"""The monitor's output: a per-replica table (rich), the findings, and the run report (JSON and a PNG plot)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from allgpu.errors import ArgumentError
from allgpu.findings import Finding
from allgpu.monitor.figures import PHASES, ReplicaFigures

UTIL_NOTE = "util %: NVML GPU utilisation (gpu) where sampled, else (compute + optimizer) / step time (busy)."
PHASE_COLOURS = {"input": "#d62728", "compute": "#2ca02c", "comm": "#1f77b4", "optimizer": "#9467bd",
                 "other": "#7f7f7f"}


@dataclass
class EpochReport:
    """One epoch of the job as every replica measured it.

    Attributes:
        epoch: the epoch number given to ``start_epoch``.
        replicas: one :class:`ReplicaFigures` per replica, in rank order.
        diagnosis: the findings, most fundamental first; empty for a healthy epoch.
    """

    epoch: int
    replicas: list[ReplicaFigures]
    diagnosis: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.diagnosis

    def table(self):
        """A ``rich.table.Table``: per replica, utilisation %, samples/s, ms a step and the time split in %.

        Utilisation is NVML's GPU utilisation where it was sampled (marked "gpu"), else busy % = (compute +
        optimizer) / step time (marked "busy").
        """
        from rich import box
        from rich.table import Table

        with_memory = any(f.gpu_mem_mib is not None for f in self.replicas)
        table = Table(title=f"allgpu step monitor, epoch {self.epoch + 1}: time split in % of step", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), show_edge=False)
        short = {"optimizer": "optim"}
        names = ["rep", "device", "util%", "samples/s", "ms/step", *(short.get(p, p) for p in PHASES)]
        for name in names + (["GPU MiB"] if with_memory else []):
            table.add_column(name, justify="left" if name == "device" else "right")
        for f in self.replicas:
            source = "gpu" if f.gpu_util_pct is not None else "busy"
            row = [str(f.replica), f.device, f"{f.utilisation_pct:.0f} {source}", f"{f.samples_per_s:,.0f}",
                   f"{1000 * f.step_s / f.steps:.1f}" if f.steps else "-", *(f"{100 * f.fraction(p):.0f}" for p in PHASES)]
            if with_memory:
                row.append(f"{f.gpu_mem_mib:,.0f}" if f.gpu_mem_mib is not None else "-")
            table.add_row(*row)
        return table

    def findings_text(self) -> str:
        """The diagnosis as plain text, one paragraph a finding (``"no problem found"`` when healthy)."""
        if not self.diagnosis:
            return "Diagnosis: no problem found; every replica spends its step computing."
        lines = ["Diagnosis:"]
        for f in self.diagnosis:
            lines.append(f"- [{f.severity}] {f.id}: {f.message}\n  Fix: {f.fix}")
        return "\n".join(lines)

    def findings_lines(self) -> list[str]:
        """The diagnosis, one line a finding, each pointing at ``allgpu doctor --explain ID`` for the fix."""
        return [f"allgpu: [{f.severity}] {f.id}: {_first_sentence(f.message)} "
                f"(fix: allgpu doctor --explain {f.id})" for f in self.diagnosis]

    def print(self, console=None, *, detailed: bool = True) -> None:
        """Print the table and the diagnosis (to ``console``, a ``rich.console.Console``, or stdout):
        ``detailed`` with each finding's message and fix in full, else one line a finding."""
        from rich.console import Console

        console = console or Console()
        console.print(self.table())
        if detailed:
            console.print(UTIL_NOTE, markup=False, highlight=False)
            console.print(self.findings_text(), markup=False, highlight=False)
            return
        for line in self.findings_lines() or ["allgpu: diagnosis: no problem found."]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    def to_dict(self) -> dict:
        """``{epoch, replicas: [...], diagnosis: [{id, severity, replica, message, fix}, ...]}`` (monitor.json)."""
        return {"epoch": self.epoch, "replicas": [f.to_dict() for f in self.replicas],
                "diagnosis": [finding_dict(f) for f in self.diagnosis]}

    @classmethod
    def from_dict(cls, data: dict) -> "EpochReport":
        return cls(data["epoch"], [ReplicaFigures.from_dict(r) for r in data["replicas"]],
                   [Finding(**f) for f in data["diagnosis"]])


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def finding_dict(f: Finding) -> dict:
    """One monitor finding in ``monitor.json``'s shape: ``{id, severity, replica, message, fix}``."""
    return {"id": f.id, "severity": f.severity, "replica": f.replica, "message": f.message, "fix": f.fix}


def write_run_report(reports: list[EpochReport], directory) -> list[Path]:
    """Write ``monitor.json`` and ``monitor.png`` into ``directory`` (created if missing); returns both paths.

    The JSON holds every epoch's per-replica figures (seconds per phase, samples, GPU readings) and findings.
    The PNG has one panel per replica: stacked bars of the time split (% of step time) per epoch.

    Raises:
        ArgumentError: (a ``ValueError``) no epoch has been reported yet (``end_epoch`` was never called).
    """
    if not reports:
        raise ArgumentError("write_report(): no epoch to report. Fix: call monitor.end_epoch() at the end of each "
                            "epoch first.")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "monitor.json"
    json_path.write_text(json.dumps({"phases": list(PHASES), "epochs": [r.to_dict() for r in reports]}, indent=2))
    png_path = out / "monitor.png"
    plot_time_split(reports, png_path)
    return [json_path, png_path]


def plot_time_split(reports: list[EpochReport], path) -> None:
    """Stacked bars of each replica's time split (% of step time) per epoch, one panel per replica, to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window; safe on machines without a display
    import matplotlib.pyplot as plt

    replicas = sorted({f.replica for r in reports for f in r.replicas})
    cols = min(4, len(replicas))
    rows = (len(replicas) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols + 1, 2.8 * rows + 0.6), squeeze=False, sharey=True)
    epochs = [r.epoch for r in reports]
    for i, replica in enumerate(replicas):
        ax = axes[i // cols][i % cols]
        bottom = [0.0] * len(reports)
        for phase in PHASES:
            share = []
            for r in reports:
                f = next((x for x in r.replicas if x.replica == replica), None)
                share.append(100 * f.fraction(phase) if f else 0.0)
            ax.bar(range(len(reports)), share, bottom=bottom, color=PHASE_COLOURS[phase], label=phase, width=0.8)
            bottom = [b + s for b, s in zip(bottom, share)]
        ax.set_title(f"replica {replica}")
        ax.set_xticks(range(len(reports)), [str(e) for e in epochs])
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 100)
        if i % cols == 0:
            ax.set_ylabel("% of step time")
    for j in range(len(replicas), rows * cols):
        axes[j // cols][j % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(PHASES), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=100)
    plt.close(fig)
