"""What the step monitor costs: the same training loop with and without it, in alternating runs.

    python benchmarks/monitor_overhead.py                     # one replica, CUDA if there is a GPU, else CPU
    python benchmarks/monitor_overhead.py --replicas 2        # two Gloo CPU replicas (allgpu.launch)
    python benchmarks/monitor_overhead.py --device cuda --batch 256 --json

Each pair of runs trains the same model on the same batches, once plain and once under ``StepMonitor`` (every
phase timed, comm added, GPU sampled where NVML exists, one gather at the end); which goes first alternates
between pairs so drift (clock boost, other load) falls on both. A run's step time is its median step on CPU
(bursts of other load on a shared machine fall out) and its synchronised total over the steps on CUDA. The
overhead is the median over pairs of (monitored - plain) / plain step time. Because that difference is small next to run-to-run noise on a shared
machine, the monitor's own cost is also measured directly: the calls of one step with empty phases, in
microseconds, as a share of the plain step time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import allgpu
from allgpu.monitor import StepMonitor


def _model(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_time(marks: list[float], device: torch.device) -> float:
    """Seconds a step: on CPU the median step (robust to bursts of other load); on CUDA, where the host runs
    ahead and only the synchronised total is real, the total over the steps."""
    if device.type == "cuda":
        return (marks[-1] - marks[0]) / (len(marks) - 1)
    return statistics.median(b - a for a, b in zip(marks, marks[1:]))


def _plain(model, optimizer, batches, strategy) -> float:
    _sync(strategy.device)
    marks = [time.perf_counter()]
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
    _sync(strategy.device)
    marks[-1] = time.perf_counter()
    return _step_time(marks, strategy.device)


def _monitored(model, optimizer, batches, strategy, epoch: int) -> float:
    monitor = StepMonitor(strategy, sample_gpu=True, warmup_steps=0)
    _sync(strategy.device)
    marks = [time.perf_counter()]
    monitor.start_epoch(epoch)
    it = iter(batches)
    for _ in range(len(batches)):
        monitor.start_step()
        with monitor.phase("input"):
            x, y = next(it)
        with monitor.phase("compute"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        monitor.add("comm", strategy.gradient_sync.wait_s)
        with monitor.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        monitor.end_step(samples=len(y))
        marks.append(time.perf_counter())
    monitor.end_epoch()  # one gather; on CUDA it also waits for the device, as the plain run's final sync does
    _sync(strategy.device)
    marks[-1] = time.perf_counter()
    monitor.close()
    return _step_time(marks, strategy.device)


def _api_cost_us(strategy, calls: int = 20000) -> float:
    """Microseconds the monitor's calls of one step take with nothing inside the phases."""
    monitor = StepMonitor(strategy, sample_gpu=False, warmup_steps=0)
    monitor.start_epoch(0)
    _sync(strategy.device)
    start = time.perf_counter()
    for _ in range(calls):
        monitor.start_step()
        with monitor.phase("input"):
            pass
        with monitor.phase("compute"):
            pass
        monitor.add("comm", 0.0)
        with monitor.phase("optimizer"):
            pass
        monitor.end_step(samples=1)
    _sync(strategy.device)
    return 1e6 * (time.perf_counter() - start) / calls


def measure(device: str, steps: int, pairs: int, batch: int, width: int) -> dict:
    strategy = allgpu.MirroredStrategy() if device == "replicas" else allgpu.OneDeviceStrategy(device)
    torch.manual_seed(0)
    with strategy.scope():
        model = _model(width)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    batches = [(torch.randn(batch, width, device=strategy.device),
                torch.randint(0, 10, (batch,), device=strategy.device)) for _ in range(steps)]
    _plain(model, optimizer, batches[: max(3, steps // 10)], strategy)  # warm up kernels and allocator
    plain, monitored, overheads = [], [], []
    for pair in range(pairs):
        if pair % 2 == 0:
            a = _plain(model, optimizer, batches, strategy)
            b = _monitored(model, optimizer, batches, strategy, pair)
        else:
            b = _monitored(model, optimizer, batches, strategy, pair)
            a = _plain(model, optimizer, batches, strategy)
        plain.append(a)
        monitored.append(b)
        overheads.append(100 * (b - a) / a)
    api_us = _api_cost_us(strategy)
    step_s = statistics.median(plain)
    return {
        "device": str(strategy.device), "replicas": strategy.num_replicas_in_sync, "steps": steps, "pairs": pairs,
        "batch": batch, "width": width,
        "plain_ms_per_step": 1000 * step_s, "monitored_ms_per_step": 1000 * statistics.median(monitored),
        "overhead_pct_median": statistics.median(overheads),
        "overhead_pct_per_pair": [round(o, 2) for o in overheads],
        "api_us_per_step": api_us, "api_pct_of_step": 100 * api_us / 1e6 / step_s,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--replicas", type=int, default=1, help="Gloo CPU replicas (with 2+, --device is ignored)")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--pairs", type=int, default=6, help="plain/monitored run pairs")
    parser.add_argument("--batch", type=int, default=128, help="per-replica batch")
    parser.add_argument("--width", type=int, default=512, help="hidden width of the MLP")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    shape = (args.steps, args.pairs, args.batch, args.width)
    if args.replicas > 1:
        result = allgpu.launch(measure, num_replicas=args.replicas, args=("replicas", *shape))[0]
    else:
        result = measure(args.device or ("cuda" if torch.cuda.is_available() else "cpu"), *shape)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"monitor overhead on {result['replicas']} replica(s), {result['device']}, batch {args.batch}, "
          f"width {args.width}, {args.steps} steps x {args.pairs} alternating pairs")
    print(f"  step time plain      {result['plain_ms_per_step']:.3f} ms")
    print(f"  step time monitored  {result['monitored_ms_per_step']:.3f} ms")
    print(f"  overhead (median of pairs) {result['overhead_pct_median']:+.2f}%   per pair: "
          f"{result['overhead_pct_per_pair']}")
    print(f"  monitor calls alone  {result['api_us_per_step']:.1f} us/step = {result['api_pct_of_step']:.2f}% of a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
