"""Does torch.compile pay off for the bench models on this machine, with no allgpu and no distribution at all?

    python benchmarks/compile_plain.py [--model mlp_1m|digits_cnn] [--steps 200] [--rounds 5] [--threads 1]

One process, plain PyTorch training steps (forward, backward, SGD with momentum), eager and
``torch.compile(model)`` (inductor) alternating; prints the median compiled/eager ratio of wall time and of process
CPU time per step. This is the ceiling for "compiled vs eager" under any data-parallel wrapper: if compiling does
not pay here, it cannot under allgpu or DDP either. One intra-op thread by default, as each forked replica has.
"""

import argparse
import statistics
import time

import torch
from torch import nn

from allgpu.bench.throughput import MODELS, _batches, _build


def _run(model_name: str, compiled: bool, steps: int, warmup: int = 20) -> tuple[float, float]:
    builder, shape, classes, batch = MODELS[model_name]
    torch.manual_seed(0)
    model = _build(builder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if compiled:
        model = torch.compile(model)
    batches = _batches(shape, classes, batch // 2, 8, torch.device("cpu"), 0)  # a 2-replica run's per-replica batch
    loss_fn = nn.CrossEntropyLoss()
    for i in range(warmup + steps):
        if i == warmup:
            wall, cpu = time.perf_counter(), time.process_time()
        x, y = batches[i % len(batches)]
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="mlp_1m")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    walls, cpus = [], []
    for _ in range(args.rounds):
        eager, compiled = _run(args.model, False, args.steps), _run(args.model, True, args.steps)
        walls.append(eager[0] / compiled[0])
        cpus.append(eager[1] / compiled[1])
        print(f"eager {eager[0] * 1e3:.2f} ms/step (CPU {eager[1] * 1e3:.2f}), compiled {compiled[0] * 1e3:.2f} "
              f"(CPU {compiled[1] * 1e3:.2f})", flush=True)
    print(f"{args.model}, plain PyTorch, {args.threads} thread(s): compiled/eager speed, median of {args.rounds}: "
          f"wall {statistics.median(walls):.3f}, CPU time {statistics.median(cpus):.3f}")


if __name__ == "__main__":
    main()
