"""What recording each backward round in the collective ledger costs a training step, side by side in one run.

    python benchmarks/ledger_rounds.py [--replicas 2] [--steps 200] [--blocks 6]

``GradientSync.record_rounds`` (on by default) writes one ledger entry per backward round to the job's store
(a TCPStore in replica 0's process), so that a replica missing from a gradient all-reduce is named with its round.
Two CPU replicas on Gloo train a small MLP (where a fixed per-step cost shows most) and a 1.07M-parameter MLP,
alternating blocks of steps with recording on and off in the same processes; prints the median step time of each
and the ratio on/off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import allgpu
from allgpu.core.sync import GradientSync

MODELS = {
    "mlp_small (4.4K params)": lambda: torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                            torch.nn.Linear(64, 32)),
    "mlp_1m (1.07M params)": lambda: torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                                          torch.nn.Linear(1024, 512)),
}


def _steps(model, optimizer, x, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


def measure(steps: int, blocks: int) -> dict:
    strategy = allgpu.MirroredStrategy()
    results = {}
    for name, build in MODELS.items():
        torch.manual_seed(0)
        with strategy.scope():
            model = build()
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(32, model[0].in_features)
        _steps(model, optimizer, x, 20)  # warm-up
        times = {True: [], False: []}
        for block in range(2 * blocks):
            on = block % 2 == 0
            GradientSync.record_rounds = on
            times[on].append(_steps(model, optimizer, x, steps))
        GradientSync.record_rounds = True
        results[name] = {key: statistics.median(value) for key, value in times.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=6)
    args = parser.parse_args()
    results = allgpu.launch(measure, num_replicas=args.replicas, args=(args.steps, args.blocks))[0]
    print(f"{args.replicas} CPU replicas (Gloo), median step time over {args.blocks} blocks of {args.steps} steps each")
    print(f"{'model':26} {'ledger on':>12} {'ledger off':>12} {'on/off':>8}")
    for name, t in results.items():
        print(f"{name:26} {t[True] * 1e3:10.3f}ms {t[False] * 1e3:10.3f}ms {t[True] / t[False]:8.3f}")


if __name__ == "__main__":
    main()
