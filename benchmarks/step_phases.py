"""Where a training step's wall time goes, allgpu against hand-written DDP, in the same processes.

    python benchmarks/step_phases.py [--model mlp_1m|digits_cnn] [--replicas 2] [--blocks 100] [--steps 10]

``allgpu bench`` starts fresh replicas for every run, so a load change between runs moves its ratio by several
percent. Here both sides live in the same replicas: an allgpu ``MirroredStrategy`` model and a
``DistributedDataParallel`` model built from the same seed on the strategy's process group, trained in
alternating blocks of ``--steps`` steps (allgpu, DDP, DDP with ``no_sync()``, repeated ``--blocks`` times). Each
step is split into forward, backward (for allgpu and DDP this includes waiting for the gradient all-reduce),
optimizer step and ``zero_grad``, timed with ``time.perf_counter`` on every replica; the printed figures are
replica 0's medians over steps, then over blocks. The ``no_sync`` rows are the same DDP model with gradient
synchronisation off: their step time is compute alone, so the gap to them is what synchronising costs.
The speed ratio is the median over blocks of DDP's step time over allgpu's (above 1: allgpu faster).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import allgpu
from allgpu.bench.throughput import MODELS, _batches, _build

PHASES = ("forward", "backward", "step", "zero_grad")


def _block(model, optimizer, batches) -> dict[str, float]:
    """Median seconds per phase over one block of steps."""
    loss_fn, times = nn.CrossEntropyLoss(), {p: [] for p in PHASES}
    for x, y in batches:
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        for phase, seconds in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[phase].append(seconds)
    return {p: statistics.median(v) for p, v in times.items()}


def measure(model_name: str, blocks: int, steps: int) -> dict:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    strategy = allgpu.MirroredStrategy()
    builder, shape, classes, global_batch = MODELS[model_name]
    torch.manual_seed(0)
    with strategy.scope():
        mirrored = _build(builder)
        mirrored_opt = torch.optim.SGD(mirrored.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(0)
    ddp = DDP(_build(builder))  # the strategy's process group is the default one
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    batches = _batches(shape, classes, global_batch // strategy.num_replicas_in_sync, steps, torch.device("cpu"),
                       seed=dist.get_rank())
    _block(mirrored, mirrored_opt, batches[:5]), _block(ddp, ddp_opt, batches[:5])  # warm-up
    out: dict[str, list] = {"allgpu": [], "DDP": [], "DDP no_sync": []}
    for _ in range(blocks):
        out["allgpu"].append(_block(mirrored, mirrored_opt, batches))
        out["DDP"].append(_block(ddp, ddp_opt, batches))
        with ddp.no_sync():
            out["DDP no_sync"].append(_block(ddp, ddp_opt, batches))
    del ddp, ddp_opt  # while the process group lives (DDP's reducer holds it)
    __import__("gc").collect()
    return out


def report(out: dict, model_name: str, replicas: int, steps: int) -> str:
    lines = [f"{model_name}, {replicas} CPU replicas (Gloo), replica 0, median ms per step over {len(out['allgpu'])} "
             f"alternating blocks of {steps} steps",
             f"{'side':<13}" + "".join(f"{p:>11}" for p in PHASES) + f"{'total':>9}"]
    for side, blocks in out.items():
        medians = [statistics.median(b[p] for b in blocks) * 1e3 for p in PHASES]
        lines.append(f"{side:<13}" + "".join(f"{m:>11.3f}" for m in medians) + f"{sum(medians):>9.3f}")
    totals = {side: [sum(b.values()) for b in blocks] for side, blocks in out.items()}
    ratios = [d / a for a, d in zip(totals["allgpu"], totals["DDP"])]
    sync = statistics.median(totals["DDP"]) - statistics.median(totals["DDP no_sync"])
    lines.append(f"speed allgpu/DDP: median {statistics.median(ratios):.3f} (blocks {min(ratios):.3f} to "
                 f"{max(ratios):.3f}); synchronising costs DDP {sync * 1e3:.2f} ms of a "
                 f"{statistics.median(totals['DDP']) * 1e3:.2f} ms step")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp_1m")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    out = allgpu.launch(measure, num_replicas=args.replicas, args=(args.model, args.blocks, args.steps))[0]
    print(report(out, args.model, args.replicas, args.steps))


if __name__ == "__main__":
    main()
