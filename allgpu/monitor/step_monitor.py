"""``StepMonitor``: where each replica's step time goes, gathered once an epoch into a diagnosis.

Per replica, per step::

    monitor.start_step()
    with monitor.phase("input"):     batch = next(it)
    with monitor.phase("compute"):   loss = loss_fn(model(x), y); loss.backward()
    monitor.add("comm", strategy.gradient_sync.wait_s)     # taken out of compute
    with monitor.phase("optimizer"): optimizer.step()
    monitor.end_step(samples=len(x))                        # the rest of the step is "other"

and ``report = monitor.end_epoch()`` on every replica (one ``all_gather_object``; no collective per step).
"""

from __future__ import annotations

import socket
import statistics
from collections import deque
from dataclasses import dataclass, field

from allgpu.devices import cuda_device_count
from allgpu.errors import ArgumentError, MonitorUsageError
from allgpu.monitor.clock import clock_for
from allgpu.monitor.diagnosis import Thresholds, diagnose
from allgpu.monitor.figures import PHASES, ReplicaFigures
from allgpu.monitor.gpu import GpuSampler, nvml_reader
from allgpu.monitor.report import EpochReport, write_run_report

TIMED_PHASES = ("input", "compute", "optimizer")
# A figure measured elsewhere (add) is taken out of the phase it happened inside.
TAKEN_FROM = {"comm": "compute", "input": "other", "compute": "other", "optimizer": "other"}


@dataclass
class _Step:
    start: object
    end: object = None
    phases: list = field(default_factory=list)  # (name, start mark, end mark)
    added: dict = field(default_factory=dict)
    samples: int = 0


class _Phase:
    """The context manager ``monitor.phase(name)`` returns (one per name, reused: phases do not nest)."""

    __slots__ = ("monitor", "name", "start")

    def __init__(self, monitor: "StepMonitor", name: str):
        self.monitor = monitor
        self.name = name

    def __enter__(self) -> "_Phase":
        step = self.monitor._step
        if step is None:
            raise MonitorUsageError(f"monitor.phase({self.name!r}) outside a step. "
                                    "Fix: call monitor.start_step() first.")
        if self.monitor._open is not None:
            raise MonitorUsageError(f"monitor.phase({self.name!r}) inside phase {self.monitor._open!r}; phases do "
                                    "not nest. Fix: close one before opening the next.")
        self.monitor._open = self.name
        self.start = self.monitor._clock.mark()
        return self

    def __exit__(self, *exc) -> None:
        self.monitor._step.phases.append((self.name, self.start, self.monitor._clock.mark()))
        self.monitor._open = None


class _Off:
    """What a disabled monitor's ``phase`` returns."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class StepMonitor:
    """Times one replica's steps by phase and diagnoses the job at the end of each epoch.

    Args:
        strategy: the replica's strategy (its ``replica_group`` gathers the figures; its ``device`` picks the clock).
        sample_gpu: sample GPU utilisation and memory through NVML on a background thread, where a GPU and NVML
            exist (elsewhere this does nothing).
        num_workers: the loader workers feeding this replica, named in an input-bound fix (e.g.
            ``distributed_dataset.num_workers``).
        thresholds: diagnosis thresholds.
        warmup_steps: the run's first steps, left out of the figures (lazy allocation, first collectives and
            kernel autotuning make them unrepresentative); later epochs count every step.
        enabled: False makes every method a no-op (``end_epoch`` returns None without a collective); every
            replica must pass the same value.
        model, optimizer: what the replica trains (``fit`` passes both). With them, each epoch's report says
            (``needs-sharding``) when parameters, gradients and optimizer state would not fit one device under a
            strategy that keeps a full copy per replica, and whether ``FullyShardedStrategy`` would fit them;
            under ``FullyShardedStrategy``, when even each replica's share does not.
        device_memory: one device's memory in bytes to plan against; None reads it from the device
            (``torch.cuda.get_device_properties``; a CPU replica has no limit, so no such finding).

    Attributes:
        reports: the :class:`EpochReport` of every finished epoch.
    """

    def __init__(self, strategy, sample_gpu: bool = True, *, num_workers: int | None = None,
                 thresholds: Thresholds = Thresholds(), warmup_steps: int = 1, enabled: bool = True, model=None,
                 optimizer=None, device_memory: int | None = None):
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ArgumentError(f"StepMonitor(warmup_steps={warmup_steps!r}): expected an integer >= 0.")
        if device_memory is not None and (isinstance(device_memory, bool) or not isinstance(device_memory, int)
                                          or device_memory <= 0):
            raise ArgumentError(f"StepMonitor(device_memory={device_memory!r}): expected a number of bytes > 0, "
                                "e.g. 80 * 2**30, or None to read the device's own.")
        self._model, self._optimizer, self._device_memory = model, optimizer, device_memory
        self.strategy = strategy
        self.enabled = enabled
        self.num_workers = num_workers
        self.thresholds = thresholds
        self.reports: list[EpochReport] = []
        device = strategy.device
        self._clock = clock_for(device)
        self._sampler = None
        if enabled and sample_gpu:
            reader = nvml_reader(device)
            self._sampler = GpuSampler(reader) if reader is not None else None
        self._device = device
        self._phases = {name: _Phase(self, name) for name in TIMED_PHASES}
        self._off = _Off()
        self._pending: deque[_Step] = deque()
        self._step: _Step | None = None
        self._open: str | None = None
        self._epoch = 0
        self._global_step = 0
        self._warmup_left = warmup_steps
        self._sync_rounds = strategy.gradient_sync.rounds if hasattr(strategy, "gradient_sync") else 0
        self._reset()

    def _reset(self) -> None:
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._steps = 0
        self._samples = 0
        self._per_step: dict[str, list[float]] = {"compute": [], "comm": [], "step": []}

    # -- per epoch ---------------------------------------------------------------------------------------------
    def start_epoch(self, epoch: int) -> None:
        """Begin timing epoch ``epoch``; GPU samples taken before now are dropped."""
        if not self.enabled:
            return
        self._epoch = epoch
        self._reset()
        self._pending.clear()
        if self._sampler is not None:
            self._sampler.take()

    def end_epoch(self) -> EpochReport | None:
        """Gather every replica's figures (one ``all_gather_object``) and diagnose; the same report on every replica.

        Every replica must call it (it is a collective). Raises MonitorUsageError (a RuntimeError) inside an
        unfinished step.
        """
        if not self.enabled:
            return None
        if self._step is not None:
            raise MonitorUsageError("monitor.end_epoch() inside a step. "
                                    "Fix: call monitor.end_step() before end_epoch().")
        self._resolve(block=True)
        util, mem = self._sampler.take() if self._sampler is not None else (None, None)
        device = self._device
        mine = ReplicaFigures(
            replica=self.strategy.replica_id_in_sync, host=socket.gethostname(), device=str(device),
            steps=self._steps, samples=self._samples, phase_s=dict(self._totals), timing=self._clock.kind,
            gpu_util_pct=util, gpu_mem_mib=mem, visible_gpus=cuda_device_count(),
            cuda_index=_cuda_index(device), num_workers=self.num_workers,
            step_compute_median_s=self._median("compute"), step_comm_median_s=self._median("comm"),
            step_median_s=self._median("step"), memory=self._memory_fit(),
        )
        gathered = self.strategy.replica_group.all_gather_object(mine.to_dict(), where="StepMonitor.end_epoch")
        figures = sorted((ReplicaFigures.from_dict(d) for d in gathered), key=lambda f: f.replica)
        report = EpochReport(self._epoch, figures, diagnose(figures, self.thresholds))
        self.reports.append(report)
        return report

    def _memory_fit(self) -> dict | None:
        """This replica's state against its device (:class:`allgpu.devices.advice.MemoryFit` as a dict), or None."""
        strategy = self.strategy
        if self._model is None or getattr(strategy, "offload_to_cpu", False):  # shards and state in host memory
            return None
        sharded = getattr(strategy, "forward_is_collective", False)
        from allgpu.core.memory_fit import device_capacity, measure, visible_replicas

        total, source = (self._device_memory, "as given: device_memory= / --device-memory") if self._device_memory \
            else device_capacity(self._device)
        if total is None:
            return None
        # CentralStorageStrategy keeps the optimizer state on its central device, ParameterServerStrategy on the
        # servers: the replica's device holds parameters and gradients only.
        central = getattr(strategy, "central_device", None)
        elsewhere = (central is not None and central.type != self._device.type) or hasattr(strategy, "server_stats")
        optimizer = None if elsewhere else self._optimizer
        return measure(self._model, optimizer, replicas=strategy.num_replicas_in_sync if sharded
                       else visible_replicas(strategy), device_bytes=total,
                       strategy="FullyShardedStrategy" if sharded else type(strategy).__name__,
                       capacity_source=source).to_dict()

    def _median(self, name: str) -> float | None:
        values = self._per_step[name]
        return statistics.median(values) if values else None

    # -- per step ----------------------------------------------------------------------------------------------
    def start_step(self) -> None:
        """Mark the start of a step. Raises MonitorUsageError (a RuntimeError) when the previous step
        was not ended."""
        if not self.enabled:
            return
        if self._step is not None:
            raise MonitorUsageError("monitor.start_step() twice without end_step(). "
                                    "Fix: call monitor.end_step(samples=...) at the end of every step.")
        self._global_step += 1
        ledger = getattr(self.strategy.replica_group, "ledger", None)
        if ledger is not None:
            ledger.step = self._global_step  # a hang report then names the step
        self._step = _Step(self._clock.mark())

    def abandon_step(self) -> None:
        """Forget the step just started (the input ran out before it trained on anything)."""
        if not self.enabled or self._step is None:
            return
        if self._open is not None:
            raise MonitorUsageError(f"monitor.abandon_step() inside phase {self._open!r}. Fix: end the phase first.")
        self._step = None
        self._global_step -= 1

    def phase(self, name: str):
        """Context manager timing ``name`` in ``"input"``, ``"compute"`` (forward + backward), ``"optimizer"``.

        Raises:
            ArgumentError: (a ``ValueError``) another name.
            MonitorUsageError: (a ``RuntimeError``, on entry) outside a step, or inside another phase.
        """
        if not self.enabled:
            return self._off
        try:
            return self._phases[name]
        except KeyError:
            raise ArgumentError(f"monitor.phase({name!r}): expected one of {TIMED_PHASES}; communication is measured "
                                "by the gradient sync and passed with monitor.add('comm', seconds).") from None

    def add(self, phase: str, seconds: float) -> None:
        """Count ``seconds`` measured elsewhere as ``phase`` this step.

        ``"comm"`` (all-reduce wait beyond overlap, ``strategy.gradient_sync.wait_s``) is taken out of compute,
        which contains it; ``"input"``, ``"compute"`` and ``"optimizer"`` measured outside a phase are taken out
        of "other". Raises ArgumentError (a ValueError) for another phase name or a negative or non-finite number.
        """
        if not self.enabled:
            return
        if phase not in TAKEN_FROM:
            raise ArgumentError(f"monitor.add({phase!r}, ...): expected one of {tuple(TAKEN_FROM)}.")
        if not (seconds >= 0 and seconds != float("inf")):
            raise ArgumentError(f"monitor.add({phase!r}, {seconds!r}): expected a finite number of seconds >= 0.")
        if self._step is None:
            raise MonitorUsageError(f"monitor.add({phase!r}, ...) outside a step. "
                                    "Fix: call it between start_step() and end_step().")
        self._step.added[phase] = self._step.added.get(phase, 0.0) + float(seconds)

    def add_sync_wait(self, sync) -> None:
        """Add ``sync.wait_s`` (a :class:`~allgpu.core.sync.GradientSync`) as "comm" only when a new all-reduce round
        finished since the last call: under gradient accumulation, micro-steps without an all-reduce add nothing,
        where ``add("comm", sync.wait_s)`` would count the last round's wait again."""
        if not self.enabled:
            return
        rounds = sync.rounds
        if rounds != self._sync_rounds:
            self._sync_rounds = rounds
            self.add("comm", sync.wait_s)

    def end_step(self, samples: int = 0) -> None:
        """End the step that trained on ``samples`` examples on this replica.

        On CUDA the step's times are read once the device has passed its events, without waiting for it.
        """
        if not self.enabled:
            return
        step = self._step
        if step is None:
            raise MonitorUsageError("monitor.end_step() without start_step(). Fix: call monitor.start_step() first.")
        if self._open is not None:
            raise MonitorUsageError(f"monitor.end_step() inside phase {self._open!r}. Fix: end the phase first.")
        step.end = self._clock.mark()
        step.samples = int(samples)
        self._step = None
        self._pending.append(step)
        self._resolve(block=False)

    def _resolve(self, block: bool) -> None:
        clock = self._clock
        while self._pending:
            step = self._pending[0]
            if block:
                clock.wait(step.end)
            elif not clock.ready(step.end):
                return
            self._pending.popleft()
            split = dict.fromkeys(PHASES, 0.0)
            for name, start, end in step.phases:
                split[name] += clock.seconds(start, end)
                clock.release(start)
                clock.release(end)
            total = clock.seconds(step.start, step.end)
            clock.release(step.start)
            clock.release(step.end)
            if self._warmup_left > 0:
                self._warmup_left -= 1
                continue
            split["other"] = max(0.0, total - sum(split.values()))
            for name, seconds in step.added.items():
                source = TAKEN_FROM[name]
                moved = min(seconds, split[source])
                split[source] -= moved
                split[name] += moved
            for name, seconds in split.items():
                self._totals[name] += seconds
            self._steps += 1
            self._samples += step.samples
            for name in ("compute", "comm"):
                self._per_step[name].append(split[name])
            self._per_step["step"].append(sum(split.values()))

    # -- output ------------------------------------------------------------------------------------------------
    def write_report(self, directory) -> list:
        """On replica 0, write ``monitor.json`` (every epoch's figures and findings) and ``monitor.png`` (the
        per-replica time split across the run) into ``directory``; returns their paths (``[]`` elsewhere)."""
        if not self.enabled or not self.strategy.is_chief:
            return []
        return write_run_report(self.reports, directory)

    def close(self) -> None:
        """Stop the GPU sampler thread."""
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None


def _cuda_index(device) -> int | None:
    if device.type != "cuda":
        return None
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()
