"""``allgpu bench``: throughput of allgpu against hand-written DDP on the same model, and scaling."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> argparse.ArgumentParser:
    from allgpu.bench import MODELS

    p = subparsers.add_parser("bench", help="throughput: allgpu vs DDP, and 1 vs N replicas", description=__doc__)
    p.add_argument("--model", choices=[*MODELS, "all"], default="all")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=200, help="timed steps per run")
    p.add_argument("--rounds", type=int, default=5, help="alternating runs per side (median reported)")
    p.add_argument("--compile", metavar="BACKEND", nargs="?", const="inductor", default=None,
                   help="also compare with both sides compiled (torch.compile backend, default inductor)")
    p.add_argument("--no-optimizer-in-backward", action="store_true",
                   help="skip the allgpu optimizer-in-backward side")
    p.add_argument("--scaling", action="store_true", help="also measure 1 replica against N")
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    return p


def run(args: argparse.Namespace) -> int:
    from allgpu.bench import MODELS, compare, format_comparisons, scaling

    names = list(MODELS) if args.model == "all" else [args.model]
    oib = not args.no_optimizer_in_backward
    rows = [compare(n, replicas=args.replicas, device=args.device, steps=args.steps, rounds=args.rounds,
                    optimizer_in_backward=oib) for n in names]
    if args.compile:
        rows += [compare(n, replicas=args.replicas, device=args.device, steps=args.steps, rounds=args.rounds,
                         backend=args.compile, optimizer_in_backward=oib) for n in names]
    print(format_comparisons(rows))
    out = {"comparisons": [{**r.__dict__, "ratio": r.ratio} for r in rows]}
    if args.compile:  # compiled vs eager allgpu, each measured against DDP in its own alternation
        for eager, compiled in zip(rows[:len(names)], rows[len(names):]):
            mine = compiled.allgpu_samples_per_s / eager.allgpu_samples_per_s
            theirs = compiled.ddp_samples_per_s / eager.ddp_samples_per_s
            print(f"{eager.model}: allgpu compiled/eager {mine:.3f} (DDP compiled/eager {theirs:.3f})")
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
