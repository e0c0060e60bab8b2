"""What one replica measured over one epoch: the plain, picklable record that replicas gather once an epoch.

Every duration is in seconds, summed over the epoch's steps. The five phases partition each step's time:

``input``      waiting for the next batch (the loader, the host-to-device copy);
``compute``    forward and backward, minus the all-reduce wait below;
``comm``       waiting for the gradient all-reduce beyond what overlapped the backward pass;
``optimizer``  the optimizer step;
``other``      the rest of the step (Python between phases, logging, metric updates).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PHASES = ("input", "compute", "comm", "optimizer", "other")


@dataclass
class ReplicaFigures:
    """One replica's epoch.

    Attributes:
        replica: rank. host: machine name. device: the replica's device (``"cuda:1"``, ``"cpu"``).
        steps: steps timed. samples: examples this replica trained on.
        phase_s: seconds per phase (keys :data:`PHASES`), summed over steps.
        step_s: seconds of all steps together (the sum of ``phase_s``).
        timing: ``"wall"`` (host clock) or ``"cuda-events"`` (the device's timeline).
        gpu_util_pct: mean NVML GPU utilisation over the epoch, 0-100; None without NVML or a GPU.
        gpu_mem_mib: peak device memory in use (NVML, MiB); None without.
        visible_gpus: GPUs visible to this replica's process (PyTorch's count).
        cuda_index: this replica's visible GPU index; None on CPU.
        num_workers: loader worker processes feeding this replica, when known.
        step_compute_median_s: the median over steps of compute seconds a step: a replica's typical step, which a
            burst of load on a few steps does not move (None where only totals are known).
        step_comm_median_s / step_median_s: the same medians for the all-reduce wait and the whole step.
        memory: the replica's training state against its device's memory (:meth:`allgpu.devices.advice.MemoryFit.to_dict`),
            None when the monitor was not given the model or the strategy already shards it.
    """

    replica: int
    host: str
    device: str
    steps: int = 0
    samples: int = 0
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    timing: str = "wall"
    gpu_util_pct: float | None = None
    gpu_mem_mib: float | None = None
    visible_gpus: int = 0
    cuda_index: int | None = None
    num_workers: int | None = None
    step_compute_median_s: float | None = None
    step_comm_median_s: float | None = None
    step_median_s: float | None = None
    memory: dict | None = None

    @property
    def step_s(self) -> float:
        return sum(self.phase_s.values())

    def fraction(self, phase: str) -> float:
        """Share of step time spent in ``phase``, 0-1 (0 when nothing was timed)."""
        total = self.step_s
        return self.phase_s[phase] / total if total > 0 else 0.0

    def per_step(self, phase: str) -> float:
        """Mean seconds per step in ``phase``."""
        return self.phase_s[phase] / self.steps if self.steps else 0.0

    @property
    def typical_compute_s(self) -> float:
        """Compute seconds of a typical step: the median where measured, else the mean."""
        return self.step_compute_median_s if self.step_compute_median_s is not None else self.per_step("compute")

    @property
    def typical_comm_fraction(self) -> float:
        """All-reduce wait as a share of a typical step (medians over steps) where measured, else of the total."""
        if self.step_comm_median_s is not None and self.step_median_s:
            return self.step_comm_median_s / self.step_median_s
        return self.fraction("comm")

    @property
    def busy_pct(self) -> float:
        """Compute and optimizer time as a share of step time, 0-100: utilisation where NVML cannot tell."""
        return 100.0 * (self.fraction("compute") + self.fraction("optimizer"))

    @property
    def utilisation_pct(self) -> float:
        """NVML GPU utilisation where measured, else :attr:`busy_pct`."""
        return self.gpu_util_pct if self.gpu_util_pct is not None else self.busy_pct

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_s if self.step_s > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(step_s=self.step_s, busy_pct=self.busy_pct, samples_per_s=self.samples_per_s)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ReplicaFigures":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)
