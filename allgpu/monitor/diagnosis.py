"""Diagnosis: pure rules from every replica's :class:`ReplicaFigures` to findings, each with its fix.

The rules follow the usual reading of a data-parallel profile (PyTorch's performance tuning guide, the
TensorFlow Profiler's "input-bound" / "device-bound" verdicts):

``input-bound``          input wait over 20% of step time on a replica;
``communication-bound``  all-reduce wait over 20% of a typical step (medians over steps) even on the replica that
                         waits least (the slowest replica's wait is pure communication; the others' also includes
                         waiting for it);
``straggler``            a replica whose typical (median) compute a step is over 1.2x the replicas' median;
``idle-device``          a host with more visible GPUs than replicas on them;
``host-bound``           "other" (Python between phases) over 30% of step time.

No I/O, no torch: the functions take figures and return findings, so they are tested on constructed figures.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from allgpu.monitor.figures import ReplicaFigures


@dataclass(frozen=True)
class Thresholds:
    """Rule thresholds. Fractions are shares of step time (0-1); ``straggler`` is a ratio to the median."""

    input: float = 0.20
    comm: float = 0.20
    other: float = 0.30
    straggler: float = 1.2
    straggler_min_excess_s: float = 0.0005  # below half a millisecond a step, differences are timer noise


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem.

    Attributes:
        id: rule name (``"input-bound"``, ``"communication-bound"``, ``"straggler"``, ``"idle-device"``,
            ``"host-bound"``).
        severity: ``"warning"`` (throughput lost) or ``"error"`` (a device does no work at all).
        replica: the replica concerned; None when it concerns the job (every replica, or a device).
        message: what was measured, with numbers. fix: what to change.
    """

    id: str
    severity: str
    replica: int | None
    message: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(figures: list[ReplicaFigures], thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """Every finding for one epoch of the job, most fundamental first; ``[]`` for a healthy run.

    Args:
        figures: one entry per replica (any order); replicas that timed no step are ignored.
    """
    timed = sorted((f for f in figures if f.steps > 0 and f.step_s > 0), key=lambda f: f.replica)
    findings = idle_devices(figures)
    if not timed:
        return findings
    findings += stragglers(timed, thresholds)
    findings += input_bound(timed, thresholds)
    findings += communication_bound(timed, thresholds)
    findings += host_bound(timed, thresholds)
    return findings


def _who(replicas: list[ReplicaFigures], total: int) -> tuple[int | None, str]:
    if len(replicas) == total and total > 1:
        return None, "every replica"
    if len(replicas) == 1:
        return replicas[0].replica, f"replica {replicas[0].replica}"
    return None, "replicas " + ", ".join(str(f.replica) for f in replicas)


def _pct(figure: ReplicaFigures, phase: str) -> str:
    return f"{100 * figure.fraction(phase):.0f}%"


def input_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    slow = [f for f in figures if f.fraction("input") > t.input]
    if not slow:
        return []
    replica, who = _who(slow, len(figures))
    shares = ", ".join(f"replica {f.replica} {_pct(f, 'input')}" for f in slow)
    workers = {f.num_workers for f in slow if f.num_workers is not None}
    if workers:
        now = ", ".join(map(str, sorted(workers)))
        current = f"num_workers={now} now" + (", which loads batches in the training process itself" if 0 in workers
                                               else "")
    else:
        current = "num_workers is unknown here"
    return [Finding(
        "input-bound", "warning", replica,
        f"{who} waited for input ({shares} of step time; threshold {t.input:.0%}): the device idles while the "
        "next batch is loaded.",
        f"Feed faster: more loader workers ({current}; distribute_dataset(..., num_workers=N) or "
        "DataLoader(num_workers=N), up to the cores per replica), keep prefetch on (prefetch_factor) and pinned "
        "memory (pin_memory=True) for the host-to-device copy, and move slow decoding or augmentation out of "
        "__getitem__ (precompute or cache it).",
    )]


def communication_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    if len(figures) < 2:
        return []
    least = min(figures, key=lambda f: f.typical_comm_fraction)
    if least.typical_comm_fraction <= t.comm:
        return []
    per_replica = [f.samples / f.steps for f in figures if f.steps]
    batch = f"{statistics.median(per_replica):g}" if per_replica else "?"
    return [Finding(
        "communication-bound", "warning", None,
        f"every replica waited on the gradient all-reduce beyond the backward overlap for at least "
        f"{100 * least.typical_comm_fraction:.0f}% of a typical step (replica {least.replica}, the one that waits "
        f"least; threshold {t.comm:.0%}).",
        f"All-reduce less often or send less: gradient accumulation (strategy.accumulate(k) or "
        f"fit(accumulation_steps=k)), a bigger per-replica batch (now {batch} examples) so each all-reduce pays "
        "for more compute, and bf16 gradient compression (MirroredStrategy(gradient_compression='bf16')) to "
        "halve the bytes sent (under FullyShardedStrategy: mixed_precision='bf16', and reshard_after_forward=False "
        "to skip the backward all-gather); across machines, check the interconnect (NCCL_DEBUG=INFO names the "
        "transport).",
    )]


def stragglers(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    if len(figures) < 2:
        return []
    compute = {f.replica: f.typical_compute_s for f in figures}
    median = statistics.median(compute.values())
    out = []
    for f in figures:
        mine = compute[f.replica]
        if mine > t.straggler * median and mine - median > t.straggler_min_excess_s:
            out.append(Finding(
                "straggler", "warning", f.replica,
                f"replica {f.replica} ({f.device} on {f.host}) computes {1000 * mine:.1f} ms a step, "
                f"{mine / median:.2f}x the median {1000 * median:.1f} ms (threshold {t.straggler:g}x); every other "
                "replica waits for it at each all-reduce.",
                f"Find what slows replica {f.replica}: another process on its device (run `allgpu doctor`; "
                "nvidia-smi), a slower or throttled GPU, work only it does inside the step (logging, checkpoints, "
                "evaluation: move it after the step or spread it), or uneven batch shapes (bucket by length).",
            ))
    return out


def host_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    slow = [f for f in figures if f.fraction("other") > t.other]
    if not slow:
        return []
    replica, who = _who(slow, len(figures))
    shares = ", ".join(f"replica {f.replica} {_pct(f, 'other')}" for f in slow)
    return [Finding(
        "host-bound", "warning", replica,
        f"{who} spent time outside input, compute, communication and optimizer ({shares} of step time; "
        f"threshold {t.other:.0%}): Python overhead between many small kernels, host syncs or per-step logging.",
        "Give each launch more work: a larger per-replica batch, torch.compile(model) to fuse small kernels, "
        "fewer per-step host syncs (.item(), .cpu(), print) and logging every N steps instead of every step.",
    )]


def idle_devices(figures: list[ReplicaFigures]) -> list[Finding]:
    by_host: dict[str, list[ReplicaFigures]] = defaultdict(list)
    for f in figures:
        by_host[f.host].append(f)
    out = []
    for host, replicas in sorted(by_host.items()):
        visible = max(f.visible_gpus for f in replicas)
        used = {f.cuda_index for f in replicas if f.cuda_index is not None}
        idle = [i for i in range(visible) if i not in used]
        if not idle:
            continue
        names = ", ".join(f"cuda:{i}" for i in idle)
        out.append(Finding(
            "idle-device", "error", None,
            f"{host}: {visible} GPUs are visible but only {len(used)} have a replica ({len(replicas)} replica"
            f"{'s' if len(replicas) != 1 else ''}); {names} {'does' if len(idle) == 1 else 'do'} no work.",
            "Use every visible GPU: MirroredStrategy() with no devices= (or devices listing them all), or launch "
            "one replica per GPU with `allgpu run --nproc-per-node auto train.py`; if the GPUs are meant for "
            "something else, hide them with CUDA_VISIBLE_DEVICES.",
        ))
    return out
