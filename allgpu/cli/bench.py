"""``allgpu bench``: throughput of allgpu against hand-written DDP on the same model, and scaling;
``--memory``: what one replica holds under OneDevice, Mirrored and FullySharded, and FullySharded's speed cost."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> argparse.ArgumentParser:
    from allgpu.bench import MODELS

    p = subparsers.add_parser("bench", help="throughput: allgpu vs DDP, and 1 vs N replicas", description=__doc__)
    p.add_argument("--model", choices=[*MODELS, "all"], default="all")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=None, help="timed steps per run (default 200; 20 with --memory)")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs per side (median reported)")
    p.add_argument("--scaling", action="store_true", help="also measure 1 replica against N")
    p.add_argument("--memory", action="store_true",
                   help="bytes of parameters, gradients and optimizer state per replica under OneDevice, Mirrored and "
                        "FullySharded at 2 and 4 replicas (and --replicas), with the FullySharded/Mirrored speed ratio")
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    return p


def run(args: argparse.Namespace) -> int:
    from allgpu.bench import MODELS, compare, format_comparisons, scaling

    if args.memory:
        return _memory(args)
    args.steps = args.steps or 200
    names = list(MODELS) if args.model == "all" else [args.model]
    rows = [compare(n, replicas=args.replicas, device=args.device, steps=args.steps, rounds=args.rounds)
            for n in names]
    print(format_comparisons(rows))
    out = {"comparisons": [{**r.__dict__, "ratio": r.ratio} for r in rows]}
    if args.scaling:
        out["scaling"] = {}
        for n in names:
            figures = scaling(n, replicas=args.replicas, device=args.device, steps=args.steps)
            out["scaling"][n] = figures
            base = figures[1]
            print(f"scaling {n}: " + ", ".join(f"{k} replica(s) {v:.0f} samples/s ({v / base:.2f}x)"
                                               for k, v in figures.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


def _memory(args: argparse.Namespace) -> int:
    from allgpu.bench_memory import format_rows, measure

    counts = sorted({2, 4, args.replicas})
    rows = measure(counts, device=args.device, steps=args.steps or 20, rounds=args.rounds)
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"memory": [{**r.__dict__, "held": r.held} for r in rows]}, fh, indent=2)
    return 0
