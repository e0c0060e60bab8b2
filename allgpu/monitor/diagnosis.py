"""Diagnosis: pure rules from every replica's :class:`ReplicaFigures` to findings, each with its fix.

The rules follow the usual reading of a data-parallel profile (PyTorch's performance tuning guide, the
TensorFlow Profiler's "input-bound" / "device-bound" verdicts):

``input-bound``          input wait over 20% of step time on a replica;
``communication-bound``  all-reduce wait over 20% of a typical step (medians over steps) even on the replica that
                         waits least (the slowest replica's wait is pure communication; the others' also includes
                         waiting for it);
``straggler``            a replica whose typical (median) compute a step is over 1.2x the replicas' median;
``idle-device``          a host with more visible GPUs than replicas on them (:func:`allgpu.devices.advice.device_use`, the
                         computation, severity and fix ``allgpu doctor``'s ``idle_devices`` uses too);
``shared-device``        a GPU that several replicas of one host share;
``host-bound``           "other" (Python between phases) over 30% of step time;
``needs-sharding``       parameters, gradients and optimizer state of a strategy that keeps a full copy per replica
                         over 90% of a device's memory (:func:`allgpu.devices.advice.memory_finding`, the arithmetic and
                         wording ``fit``'s warning, ``allgpu doctor --run`` and lint rule AG003 share).

No I/O, no torch: the functions take figures and return :class:`allgpu.findings.Finding` s (``replica`` set where
one replica is concerned), so they are tested on constructed figures.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from allgpu.devices.advice import IDLE_FIX, IDLE_SEVERITY, SHARED_FIX, WORKERS_RULE, MemoryFit, device_use, memory_finding
from allgpu.findings import Finding
from allgpu.monitor.figures import ReplicaFigures

__all__ = ["Finding", "Thresholds", "communication_bound", "diagnose", "host_bound", "idle_devices", "input_bound",
           "needs_sharding", "stragglers"]


# Each rule's fix, a str.format template the rule fills in.
FIXES = {
    "input-bound": (
        "Feed faster: more loader workers ({current}; distribute_dataset(..., num_workers='auto') picks {rule}"
        ", the number `allgpu doctor` prints; or DataLoader(num_workers=N)), keep prefetch on (prefetch_factor) and "
        "pinned memory (pin_memory=True) for the host-to-device copy, and move slow decoding or augmentation out "
        "of __getitem__ (precompute or cache it)."),
    "communication-bound": (
        "All-reduce less often or send less: gradient accumulation (strategy.accumulate(k) or "
        "fit(accumulation_steps=k)), a bigger per-replica batch (now {batch} examples) so each all-reduce pays for "
        "more compute, and bf16 gradient compression (MirroredStrategy(gradient_compression='bf16')) to halve the "
        "bytes sent (under FullyShardedStrategy: mixed_precision='bf16', and reshard_after_forward=False to skip the "
        "backward all-gather); across machines, check the interconnect (NCCL_DEBUG=INFO names the transport)."),
    "straggler": (
        "Find what slows replica {replica}: another process on its device (run `allgpu doctor`; nvidia-smi), a "
        "slower or throttled GPU, work only it does inside the step (logging, checkpoints, evaluation: move it "
        "after the step or spread it), or uneven batch shapes (bucket by length)."),
    "host-bound": (
        "Give each launch more work: a larger per-replica batch, torch.compile(model) to fuse small kernels, fewer "
        "per-step host syncs (.item(), .cpu(), print) and logging every N steps instead of every step."),
}


@dataclass(frozen=True)
class Thresholds:
    """Rule thresholds. Fractions are shares of step time (0-1); ``straggler`` is a ratio to the median."""

    input: float = 0.20
    comm: float = 0.20
    other: float = 0.30
    straggler: float = 1.2
    straggler_min_excess_s: float = 0.0005  # below half a millisecond a step, differences are timer noise


def diagnose(figures: list[ReplicaFigures], thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """Every finding for one epoch of the job, most fundamental first; ``[]`` for a healthy run.

    Args:
        figures: one entry per replica (any order); replicas that timed no step are ignored.
    """
    timed = sorted((f for f in figures if f.steps > 0 and f.step_s > 0), key=lambda f: f.replica)
    findings = needs_sharding(figures) + idle_devices(figures)
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


def _over(figures: list[ReplicaFigures], phase: str, limit: float):
    """``(slow replicas, replica or None, "who", "replica r NN%, ...")`` for the replicas whose ``phase`` share of
    step time is over ``limit``; ``([], None, "", "")`` when none is."""
    slow = [f for f in figures if f.fraction(phase) > limit]
    if not slow:
        return [], None, "", ""
    replica, who = _who(slow, len(figures))
    return slow, replica, who, ", ".join(f"replica {f.replica} {100 * f.fraction(phase):.0f}%" for f in slow)


def input_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    slow, replica, who, shares = _over(figures, "input", t.input)
    if not slow:
        return []
    workers = {f.num_workers for f in slow if f.num_workers is not None}
    if workers:
        now = ", ".join(map(str, sorted(workers)))
        current = f"num_workers={now} now" + (", which loads batches in the training process itself" if 0 in workers
                                               else "")
    else:
        current = "num_workers is unknown here"
    message = (f"{who} waited for input ({shares} of step time; threshold {t.input:.0%}): the device idles while "
               "the next batch is loaded.")
    return [Finding("input-bound", "warning", message, FIXES["input-bound"].format(current=current, rule=WORKERS_RULE),
                    replica=replica)]


def communication_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    if len(figures) < 2:
        return []
    least = min(figures, key=lambda f: f.typical_comm_fraction)
    if least.typical_comm_fraction <= t.comm:
        return []
    per_replica = [f.samples / f.steps for f in figures if f.steps]
    batch = f"{statistics.median(per_replica):g}" if per_replica else "?"
    message = (f"every replica waited on the gradient all-reduce beyond the backward overlap for at least "
               f"{100 * least.typical_comm_fraction:.0f}% of a typical step (replica {least.replica}, the one that "
               f"waits least; threshold {t.comm:.0%}).")
    return [Finding("communication-bound", "warning", message, FIXES["communication-bound"].format(batch=batch))]


def stragglers(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    if len(figures) < 2:
        return []
    compute = {f.replica: f.typical_compute_s for f in figures}
    median = statistics.median(compute.values())
    out = []
    for f in figures:
        mine = compute[f.replica]
        if mine > t.straggler * median and mine - median > t.straggler_min_excess_s:
            message = (f"replica {f.replica} ({f.device} on {f.host}) computes {1000 * mine:.1f} ms a step, "
                       f"{mine / median:.2f}x the median {1000 * median:.1f} ms (threshold {t.straggler:g}x); every "
                       "other replica waits for it at each all-reduce.")
            out.append(Finding("straggler", "warning", message, FIXES["straggler"].format(replica=f.replica),
                               replica=f.replica))
    return out


def host_bound(figures: list[ReplicaFigures], t: Thresholds = Thresholds()) -> list[Finding]:
    slow, replica, who, shares = _over(figures, "other", t.other)
    if not slow:
        return []
    message = (f"{who} spent time outside input, compute, communication and optimizer ({shares} of step time; "
               f"threshold {t.other:.0%}): Python overhead between many small kernels, host syncs or per-step "
               "logging.")
    return [Finding("host-bound", "warning", message, FIXES["host-bound"], replica=replica)]


def idle_devices(figures: list[ReplicaFigures]) -> list[Finding]:
    """Per host: an ``idle-device`` error for visible GPUs no replica runs on, a ``shared-device`` warning for a
    GPU several replicas share (replicas whose GPU is unknown are left out)."""
    by_host: dict[str, list[ReplicaFigures]] = defaultdict(list)
    for f in figures:
        by_host[f.host].append(f)
    out = []
    for host, replicas in sorted(by_host.items()):
        visible = max(f.visible_gpus for f in replicas)
        # An index past the host's count (a replica that saw fewer GPUs) is left out, never raised mid-training.
        use = device_use(visible, [f.cuda_index for f in replicas
                                   if f.cuda_index is not None and f.cuda_index < visible])
        if use.idle:
            names = ", ".join(f"cuda:{i}" for i in use.idle)
            n = len(replicas)
            out.append(Finding(
                "idle-device", IDLE_SEVERITY, devices=use.idle, fix=IDLE_FIX, message=
                f"{host}: {visible} GPUs are visible but only {len(set(use.replicas))} have a replica ({n} replica"
                f"{'s' if n != 1 else ''}); {names} {'does' if len(use.idle) == 1 else 'do'} no work.",
            ))
        if use.shared:
            out.append(Finding("shared-device", "warning", f"{host}: {use.shared_message()}", SHARED_FIX,
                               devices=use.shared))
    return out


def needs_sharding(figures: list[ReplicaFigures]) -> list[Finding]:
    """One ``needs-sharding`` finding for the job when a replica's training state does not fit its device mirrored
    (the replica with the least device memory decides); ``[]`` when it fits or no replica measured it."""
    fits = [MemoryFit.from_dict(f.memory) for f in figures if f.memory and f.memory.get("device_bytes")]
    if not fits:
        return []
    finding = memory_finding(min(fits, key=lambda m: m.device_bytes))
    return [finding] if finding is not None else []
