"""Per-GPU utilisation and memory sampled while a script runs (``allgpu doctor --run``), and what they say.

:class:`GpuWatch` calls any ``sampler`` (``() -> list[GpuSample]``) on a background thread; the NVML one is
:func:`allgpu.doctor.probe.nvml_gpu_sampler` (the only code touching NVML), tests pass fake samples.
:func:`summarize` and :func:`sample_evidence` are pure.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

# A GPU counts as used by the job when one of the job's processes holds memory on it, or (when the driver cannot
# name processes, e.g. in a container) its memory grew by this much (MiB) while the job ran.
USED_MIB = 256.0
# Mean utilisation (%) of the GPUs the job used below which the GPUs mostly wait (for input, usually).
LOW_UTIL = 30.0
MIN_SAMPLES = 5


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment: driver index, utilisation % (NVML's last sample period), memory used (MiB) by
    every process, and the pids NVML lists on it."""

    index: int
    util: float
    mem_mib: float
    pids: tuple[int, ...] = ()


@dataclass
class GpuUse:
    """One GPU over the run: ``samples`` taken, mean/max utilisation %, memory at the start and at its peak (MiB),
    and ``by_job`` (a process of the job held memory on it, or its memory grew by ``USED_MIB`` or more)."""

    index: int
    samples: int = 0
    mean_util: float = 0.0
    max_util: float = 0.0
    start_mib: float = 0.0
    peak_mib: float = 0.0
    job_pids_seen: bool = False
    by_job: bool = False


@dataclass
class GpuWatch:
    """Samples every ``interval_s`` seconds until :meth:`stop`; ``job_pids`` (called at each sample) names the
    processes of the job, so a GPU they hold counts as used by the job."""

    sampler: Callable[[], list[GpuSample]]
    job_pids: Callable[[], set[int]] = set
    interval_s: float = 0.5
    samples: list[tuple[GpuSample, bool]] = field(default_factory=list)
    error: str | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="allgpu-doctor-gpu-watch", daemon=True)

    def start(self) -> "GpuWatch":
        self._take()
        self._thread.start()
        return self

    def _take(self) -> None:
        try:
            pids = self.job_pids()
            for s in self.sampler():
                self.samples.append((s, bool(pids & set(s.pids))))
        except Exception as exc:  # a GPU that fell off the bus: keep the run going without readings
            self.error = f"{type(exc).__name__}: {exc}"
            self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def stop(self) -> list[GpuUse]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval_s + 1)
        self._take()
        return summarize(self.samples)


def summarize(samples: Iterable[tuple[GpuSample, bool]]) -> list[GpuUse]:
    """Per-GPU figures from ``(sample, a job process was on it)`` pairs, in driver order."""
    uses: dict[int, GpuUse] = {}
    utils: dict[int, list[float]] = {}
    for s, job_there in samples:
        u = uses.get(s.index)
        if u is None:
            u = uses[s.index] = GpuUse(s.index, start_mib=s.mem_mib, peak_mib=s.mem_mib)
            utils[s.index] = []
        u.samples += 1
        utils[s.index].append(s.util)
        u.peak_mib = max(u.peak_mib, s.mem_mib)
        u.job_pids_seen = u.job_pids_seen or job_there
    for i, u in uses.items():
        u.mean_util = sum(utils[i]) / len(utils[i])
        u.max_util = max(utils[i])
        u.by_job = u.job_pids_seen or u.peak_mib - u.start_mib >= USED_MIB
    return [uses[i] for i in sorted(uses)]


def sample_evidence(uses: list[GpuUse]) -> tuple[int | None, list[tuple[str, float, str, str]], list[str]]:
    """GPUs the job used, evidence for the verdict as ``(cause, weight, source, text)``, and notes.

    Several GPUs with only one used: ``single-device-strategy``. GPUs used but mostly idle (mean utilisation below
    ``LOW_UTIL`` over ``MIN_SAMPLES`` samples or more): ``input-bound`` (supporting weight: the log or the script
    must agree for it to be named). Every GPU used and busy: ``multi-gpu-ok``.
    """
    if not uses:
        return None, [], []
    used = [u for u in uses if u.by_job]
    figures = "; ".join(f"GPU {u.index}: mean {u.mean_util:.0f}% busy, max {u.max_util:.0f}%, memory "
                        f"{u.start_mib:.0f} -> peak {u.peak_mib:.0f} MiB" + (" (job)" if u.by_job else "")
                        for u in uses)
    notes = [f"NVML samples while the script ran ({max(u.samples for u in uses)} per GPU): {figures}."]
    extra: list[tuple[str, float, str, str]] = []
    if not used:
        notes.append("The job never used a GPU: no process of it held GPU memory.")
        return 0, extra, notes
    enough = min(u.samples for u in used) >= MIN_SAMPLES
    idle = [u for u in uses if not u.by_job]
    if len(uses) >= 2 and len(used) == 1:
        extra.append(("single-device-strategy", 0.8, "nvml-samples",
                      f"NVML: only GPU {used[0].index} held the job's memory; GPU(s) "
                      f"{', '.join(str(u.index) for u in idle)} stayed idle"))
    mean = sum(u.mean_util for u in used) / len(used)
    if enough and mean < LOW_UTIL:
        extra.append(("input-bound", 0.5, "nvml-samples",
                      f"NVML: the GPU(s) the job used were busy {mean:.0f}% of the time on average"))
    if not idle and enough and mean >= LOW_UTIL:
        extra.append(("multi-gpu-ok", 0.6, "nvml-samples",
                      f"NVML: all {len(uses)} GPU(s) held the job's memory, {mean:.0f}% busy on average"))
    return len(used), extra, notes
