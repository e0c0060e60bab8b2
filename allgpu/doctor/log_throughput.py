"""Throughput lines of a pasted log (``examples/sec``, ``images/sec``, ``sec/batch``, ``it/s``, ``s/it``,
``ms/step``) read as a series, and the two things a series can show about idle GPUs:

* **stalls**: most steps fast, some many times slower: the GPU waits for batches in bursts, the signature of an
  input pipeline that cannot keep up (a DataLoader with too few workers, tf.data without prefetch);
* **scaling**: the same job at several GPU counts (``Num GPUs: 4`` ... ``total images/sec: 500``) whose throughput
  grows far less than the GPU count: the extra GPUs wait, on the gradient exchange (communication-bound) or on
  input (input-bound).

Pure: reads only the lines given.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

# A step this many times the median step is a stall; stalls in at least this share of steps make a pattern.
STALL_FACTOR = 3.0
STALL_SHARE = 0.1
MIN_STEPS = 8
# Speed-up over the GPU count (1.0 = linear) below which a multi-GPU run scales poorly.
POOR_SCALING = 0.5

_STEP_TIME = re.compile(r"(\d+(?:\.\d+)?)\s*(sec/batch|s/it|sec/step|s/step|ms/step|ms/it|s/batch)\b")
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(examples/sec|images/sec|samples/sec|img/s|images/s|samples/s|examples/s|"
                   r"sequences/sec|tokens/s(?:ec)?|it/s)\b")
_RATE_AFTER = re.compile(r"\b(examples|images|samples|sequences|tokens)/s(?:ec)?\W{1,3}(\d+(?:\.\d+)?)", re.I)
_GPU_COUNT = re.compile(r"\b(?:num_gpus|n_gpus?|ngpus?|world_size|nproc_per_node|gpus)\s*[=:]\s*(\d+)|"
                        r"\b(?:Num(?:ber of)? (?:GPUs|devices|replicas)|num_replicas_in_sync)\W{1,4}(\d+)|"
                        r"\b(\d+)\s*(?:x\s*)?GPUs?\b", re.I)
_SLOW_LINK = re.compile(r"via NET/Socket|Using network Socket|NCCL_P2P_DISABLE=1|P2P is disabled|"
                        r"NCCL_IB_DISABLE=1|P2P/IPC is not supported|peer access is not supported", re.I)


@dataclass
class Throughput:
    """The throughput a log shows.

    Attributes:
        steps: ``(line, seconds per step)`` for each step-time reading (it/s is turned into s/it).
        by_gpus: ``{gpu count: (line, items per second)}``, the last rate read while that count was in force.
        slow_link: a line showing NCCL on sockets or peer-to-peer disabled, or None.
    """

    steps: list[tuple[int, float]] = field(default_factory=list)
    by_gpus: dict[int, tuple[int, float]] = field(default_factory=dict)
    slow_link: tuple[int, str] | None = None


def _seconds(value: float, unit: str) -> float:
    if unit.startswith("ms/"):
        return value / 1000
    return 1 / value if unit == "it/s" else value


def read_throughput(lines: list[str]) -> Throughput:
    """The throughput series of a log (its lines, without colour codes)."""
    out, gpus = Throughput(), None
    for number, line in enumerate(lines, 1):
        count = _GPU_COUNT.search(line)
        if count:
            gpus = int(next(g for g in count.groups() if g))
        if out.slow_link is None and _SLOW_LINK.search(line):
            out.slow_link = (number, line.strip()[:160])
        for value, unit in _STEP_TIME.findall(line):
            if float(value) > 0:
                out.steps.append((number, _seconds(float(value), unit)))
        rates = _RATE.findall(line) + [(value, f"{unit}/sec") for unit, value in _RATE_AFTER.findall(line)]
        for value, unit in rates:
            if float(value) <= 0:
                continue
            if unit == "it/s":
                out.steps.append((number, 1 / float(value)))
            elif gpus:
                out.by_gpus[gpus] = (number, float(value))
    return out


def stalls(tp: Throughput) -> str | None:
    """Evidence text when steps stall in bursts, else None (the first two readings, warm-up, are left out)."""
    times = [t for _, t in tp.steps[2:]]
    if len(times) < MIN_STEPS:
        return None
    median = statistics.median(times)
    slow = [t for t in times if t >= STALL_FACTOR * median]
    if len(slow) < 2 or len(slow) < STALL_SHARE * len(times):
        return None
    return (f"{len(slow)} of {len(times)} step-time readings are {STALL_FACTOR:.0f}x the median or slower "
            f"({max(slow):.3g} s against {median:.3g} s): the GPU waits for batches in bursts")


def scaling(tp: Throughput) -> tuple[float, str] | None:
    """``(speed-up over GPU count, evidence)`` when the log shows the job at two or more GPU counts, else None."""
    if len(tp.by_gpus) < 2:
        return None
    low, high = min(tp.by_gpus), max(tp.by_gpus)
    (_, rate_low), (line, rate_high) = tp.by_gpus[low], tp.by_gpus[high]
    efficiency = (rate_high / rate_low) / (high / low)
    return efficiency, (f"log line {line}: {rate_high:g}/s on {high} GPUs against {rate_low:g}/s on {low}: "
                        f"{efficiency:.0%} of linear scaling")
