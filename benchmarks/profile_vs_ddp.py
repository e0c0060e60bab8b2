"""Where a step's time goes: allgpu MirroredStrategy and hand-written DDP under torch.profiler, side by side.

    python benchmarks/profile_vs_ddp.py [--model mlp_1m|digits_cnn] [--steps 50] [--replicas 2] [--compile BACKEND]

Each side runs in its own replicas (allgpu.launch), profiles ``--steps`` steps after a warm-up on replica 0,
and prints the ops with the most self CPU time, then the two sides' per-step milliseconds next to each other.
"""

import argparse

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import allgpu
from allgpu.bench.throughput import MODELS, _batches, _build


def _side(kind: str, model_name: str, steps: int, backend: str | None = None):
    import os

    import torch.distributed as dist

    builder, shape, classes, global_batch = MODELS[model_name]
    if kind == "allgpu":
        strategy = allgpu.MirroredStrategy()
        with strategy.scope():
            model = _build(builder)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        model = DDP(_build(builder))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    world = dist.get_world_size()
    batches = _batches(shape, classes, global_batch // world, steps + 10, torch.device("cpu"), int(os.environ["RANK"]))
    loss_fn = nn.CrossEntropyLoss()
    if backend is not None:  # as users write it: torch.compile(model), DDP: torch.compile(DDP(model))
        model = torch.compile(model, backend=backend)

    def step(x, y):
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for x, y in batches[:10]:
        step(x, y)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for x, y in batches[10:]:
            step(x, y)
    rows = [(e.key, e.self_cpu_time_total / steps / 1e3, e.count // steps) for e in prof.key_averages()]
    rows.sort(key=lambda r: -r[1])
    return rows[:14], sum(r[1] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="mlp_1m")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--compile", metavar="BACKEND", default=None, help="torch.compile both sides (e.g. inductor)")
    args = parser.parse_args()
    totals = {}
    for kind in ("allgpu", "ddp"):
        rows, total = allgpu.launch(_side, num_replicas=args.replicas, args=(kind, args.model, args.steps, args.compile))[0]
        totals[kind] = total
        print(f"\n{kind}: self CPU ms per step by op (replica 0), total {total:.2f} ms")
        for name, ms, calls in rows:
            print(f"  {ms:8.3f} ms  {calls:4d}x  {name}")
    print(f"\nself CPU per step: allgpu {totals['allgpu']:.2f} ms, DDP {totals['ddp']:.2f} ms, "
          f"allgpu/DDP time {totals['allgpu'] / totals['ddp']:.3f}")


if __name__ == "__main__":
    main()
