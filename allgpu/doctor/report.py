"""Show a reading and its problems: rich text for people, JSON for machines."""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from allgpu.devices.advice import WorkerAdvice, suggest_workers
from allgpu.doctor.reading import EnvironmentReading
from allgpu.doctor.rules import torch_gpus, visibility
from allgpu.devices.visible import explain
from allgpu.findings import Finding, exit_code

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def worker_advice(reading: EnvironmentReading) -> WorkerAdvice:
    """DataLoader workers per replica: one replica per GPU PyTorch sees, one replica on a CPU-only machine."""
    return suggest_workers(reading.cpu_affinity, reading.cpu_quota, max(1, torch_gpus(reading)))


def problem_dict(p: Finding) -> dict[str, Any]:
    """One problem in ``allgpu doctor --json``'s shape: ``{id, severity, cause, fix, devices}``, plus
    ``evidence`` when the finding has any."""
    out: dict[str, Any] = {"id": p.id, "severity": p.severity, "cause": p.message, "fix": p.fix,
                           "devices": list(p.devices)}
    if p.evidence:
        out["evidence"] = list(p.evidence)
    return out


def to_json(reading: EnvironmentReading, problems: Sequence[Finding], frameworks: Any = None) -> dict[str, Any]:
    """``{"reading": …, "frameworks": …, "visible_devices": …, "dataloader": …, "problems": […], "exit_code": 0|1}``.

    ``"reading"`` feeds back into :meth:`EnvironmentReading.from_dict` (``allgpu doctor --reading FILE``), and
    ``"frameworks"`` (a :class:`~allgpu.doctor.frameworks.FrameworksReading`, when read) into its ``from_dict``.
    """
    visible, mapping = visibility(reading)
    advice = worker_advice(reading)
    return {
        "reading": reading.to_dict(),
        **({"frameworks": frameworks.to_dict()} if frameworks is not None else {}),
        "visible_devices": {
            "explanation": explain(visible, mapping if reading.gpus else None),
            "form": visible.form,
            "torch_to_driver": list(mapping.torch_to_driver),
            "hidden": list(mapping.hidden),
        },
        "dataloader": {"num_workers": advice.workers, "usable_cores": advice.usable_cores,
                       "replicas": advice.replicas, "reason": advice.reason},
        "problems": [problem_dict(p) for p in problems],
        "exit_code": exit_code(problems),
    }


def _versions(r: EnvironmentReading) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("Python", f"{r.python_version} ({r.platform})")
    t.add_row("PyTorch", f"{r.torch_version}, " + (f"built for CUDA {r.torch_cuda}" if r.torch_cuda else "CPU build"))
    if r.torch_cuda:
        t.add_row("CUDA in torch", "available" if r.torch_cuda_available else
                  f"not available: {r.torch_cuda_error or 'no reason given'}")
        t.add_row("Architectures", " ".join(r.torch_arch_list) or "unknown")
    if r.driver_version:
        t.add_row("NVIDIA driver", f"{r.driver_version}, supports CUDA {r.driver_cuda_version or '?'}")
    else:
        t.add_row("NVIDIA driver", r.kernel_driver or "none found")
    if r.nvml_error:
        t.add_row("NVML", r.nvml_error + (f" ({r.nvml_library_error})" if r.nvml_library_error else ""))
    t.add_row("NCCL", (f"available, {r.nccl_version}" if r.nccl_version else "available") if r.nccl_available
              else "not available")
    if r.nccl_env:
        t.add_row("NCCL_* set", ", ".join(f"{k}={v}" for k, v in r.nccl_env.items()))
    return t


def _gpus(r: EnvironmentReading) -> Table | Text:
    if not r.gpus:
        n = torch_gpus(r)
        return Text(f"The driver lists no GPU; PyTorch sees {n}.")
    _, mapping = visibility(r)
    t = Table(title="GPUs the driver sees", title_justify="left")
    for col in ("GPU", "name", "torch", "memory used / total", "busy", "processes", "MIG", "cc"):
        t.add_column(col)
    for g in r.gpus:
        torch_ix = [f"cuda:{i}" for i, d in enumerate(mapping.torch_to_driver) if d == g.index]
        mem = (f"{g.memory_used_mib:.0f} / {g.memory_total_mib:.0f} MiB"
               if g.memory_used_mib is not None and g.memory_total_mib is not None else "?")
        procs = ", ".join(f"{p.name or '?'}:{p.pid}" + (f" {p.used_mib:.0f} MiB" if p.used_mib is not None else "")
                          for p in g.processes) or "-"
        mig = "-" if g.mig_enabled is None else ("on" if g.mig_enabled else "off")
        if g.mig_enabled:
            mig += f" ({len(g.mig_devices)})"
        busy = f"{g.utilization_percent}%" if g.utilization_percent is not None else "?"
        t.add_row(str(g.index), g.name, ", ".join(torch_ix) or "[red]hidden[/red]", mem, busy, procs, mig,
                  g.compute_capability or "?")
    return t


def _links(r: EnvironmentReading) -> Table | None:
    if not r.links and not r.torch_peer_access:
        return None
    t = Table(title="GPU pairs", title_justify="left")
    for col in ("pair (driver)", "NVLink", "topology", "P2P (driver)"):
        t.add_column(col)
    for k in r.links:
        p2p = "?" if k.p2p_read is None else ("yes" if k.p2p_read else "no")
        t.add_row(f"{k.a}-{k.b}", "?" if k.nvlinks is None else str(k.nvlinks), k.topology or "?", p2p)
    denied = [f"cuda:{p.a}->cuda:{p.b}" for p in r.torch_peer_access if not p.ok]
    if r.torch_peer_access:
        t.caption = "torch peer access: " + ("all pairs" if not denied else "denied for " + ", ".join(denied))
    return t


def render(reading: EnvironmentReading, problems: Sequence[Finding], console: Console | None = None,
           frameworks: Any = None) -> None:
    """Print the reading, the frameworks' view when read, and the problems (errors first) to ``console``."""
    console = console or Console()
    visible, mapping = visibility(reading)
    advice = worker_advice(reading)
    parts: list[Any] = [_versions(reading), Text(""), _gpus(reading)]
    links = _links(reading)
    if links is not None:
        parts.append(links)
    if frameworks is not None:
        from allgpu.doctor.framework_report import frameworks_table

        parts.append(frameworks_table(frameworks, reading))
    parts.append(Text("\n" + explain(visible, mapping if reading.gpus else None)))
    quota = f", cgroup quota {reading.cpu_quota:g}" if reading.cpu_quota is not None else ""
    parts.append(Text(f"CPU: {reading.cpu_affinity} of {reading.cpu_total} cores usable{quota}. "
                      f"DataLoader num_workers={advice.workers} per replica: {advice.reason}"))
    console.print(Panel(Group(*parts), title="allgpu doctor: environment", title_align="left"))
    if not problems:
        console.print("[green]No problems found: every GPU the frameworks can see is ready to train.[/green]")
        return
    for p in problems:
        console.print(Text.assemble((f"{p.severity.upper():8}", _STYLE[p.severity]), (p.id, "bold")))
        console.print(finding_body(p))
    errors = sum(p.severity == "error" for p in problems)
    console.print(f"{len(problems)} problem(s), {errors} error(s): exit code {exit_code(problems)}.")


def finding_body(p) -> Table:
    """A finding's cause, evidence (one line each) and fix, as the doctor prints them under its id."""
    body = Table.grid(padding=(0, 1))
    body.add_column(style="dim", no_wrap=True)
    body.add_column()
    body.add_row("  cause:", Text(p.message))
    for i, ev in enumerate(p.evidence):
        body.add_row("  evidence:" if i == 0 else "", Text(ev))
    body.add_row("  fix:", Text(p.fix))
    return body
