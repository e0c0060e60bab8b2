"""The step monitor: where each replica's step time goes, why a device idles, and what a hung job waits for.

- :class:`StepMonitor` times each step's phases (input, compute, comm, optimizer, other) on every replica,
  samples GPU utilisation through NVML, and once an epoch gathers the figures into an :class:`EpochReport`
  whose ``diagnosis`` lists :class:`Finding` objects, each with its fix.
- :func:`diagnose` is the pure rule set behind it.
- :func:`install_hang_dump` makes ``SIGUSR1`` print which replica is behind, at which collective, from which line.
"""

from allgpu.findings import Finding
from allgpu.monitor.diagnosis import Thresholds, diagnose
from allgpu.monitor.figures import PHASES, ReplicaFigures
from allgpu.monitor.hang import hang_report, install_hang_dump
from allgpu.monitor.report import EpochReport, write_run_report
from allgpu.monitor.step_monitor import StepMonitor

__all__ = ["PHASES", "EpochReport", "Finding", "ReplicaFigures", "StepMonitor", "Thresholds", "diagnose",
           "hang_report", "install_hang_dump", "write_run_report"]
