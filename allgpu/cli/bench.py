"""``allgpu bench``: throughput of allgpu against hand-written DDP on the same model, and scaling;
``--memory``: what one replica holds under OneDevice, Mirrored and FullySharded, and FullySharded's speed cost."""

from __future__ import annotations

import argparse
import json
from typing import Callable

from allgpu.bench.user_model import is_spec, profile_user_model, shape
from allgpu.cli.arguments import output_file, positive_int, write_atomic
from allgpu.errors import ArgumentError


def add_parser(subparsers) -> argparse.ArgumentParser:
    from allgpu.bench import MODELS

    p = subparsers.add_parser("bench", help="throughput: allgpu vs DDP, and 1 vs N replicas", description=__doc__)
    p.add_argument("--model", type=_model_name(MODELS), default="all", metavar="{" + ",".join([*MODELS, "all"]) + "}",
                   help="a built-in model, all of them, or with --predict your own: FILE.py:FUNCTION or "
                        "package.module:FUNCTION returning a torch.nn.Module (with --input-shape and --classes) or "
                        "(model, (x, y))")
    p.add_argument("--input-shape", type=shape, metavar="D1,D2,...",
                   help="with --predict and your own model: one example's shape, e.g. 3,224,224")
    p.add_argument("--classes", type=positive_int, help="with --predict and your own model: classes of the targets")
    p.add_argument("--batch", type=positive_int, default=32,
                   help="with --predict and your own model: examples per device (default 32)")
    p.add_argument("--replicas", type=positive_int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=positive_int, default=None, help="timed steps per run (default 200; 20 with --memory)")
    p.add_argument("--rounds", type=positive_int, default=5, help="alternating runs per side (median reported)")
    p.add_argument("--compile", metavar="BACKEND", nargs="?", const="inductor", default=None,
                   help="also compare with both sides compiled (torch.compile backend, default inductor)")
    p.add_argument("--no-optimizer-in-backward", action="store_true",
                   help="skip the allgpu optimizer-in-backward side")
    p.add_argument("--scaling", action="store_true", help="also measure 1 replica against N")
    p.add_argument("--memory", action="store_true",
                   help="bytes of parameters, gradients and optimizer state per replica under OneDevice, Mirrored and "
                        "FullySharded at 2 and 4 replicas (and --replicas), with the FullySharded/Mirrored speed ratio")
    p.add_argument("--json", metavar="PATH", type=output_file, help="write the figures here")
    p.add_argument("--predict", action="store_true",
                   help="measure one device's step and predict throughput and efficiency at 1..1024 devices on "
                        "named interconnects (no multi-device run)")
    p.add_argument("--plot", metavar="PNG", default="predict.png", type=output_file, help="with --predict: efficiency plot here")
    p.add_argument("--check", action="store_true",
                   help="with --predict: also measure 1, 2 and 4 Gloo CPU replicas and print predicted vs measured")
    return p


def _model_name(models) -> Callable[[str], str]:
    def model_name(text: str) -> str:
        if text in models or text == "all" or is_spec(text):
            return text
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join([*models, 'all'])}, or "
                                         "FILE.py:FUNCTION with --predict")
    return model_name


def run(args: argparse.Namespace) -> int:
    if args.predict:
        return _predict(args)
    if is_spec(args.model):
        raise ArgumentError(f"--model {args.model}: your own model works with --predict only; the comparison with "
                            "DDP and --memory run the built-in models.")
    from allgpu.bench import MODELS, compare, format_comparisons, scaling

    if args.memory:
        return _memory(args)
    args.steps = args.steps or 200
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
        write_atomic(args.json, json.dumps(out, indent=2))
    return 0


def _predict(args: argparse.Namespace) -> int:
    from allgpu.bench import MODELS, loopback_interconnect, profile_model, weak_scaling
    from allgpu.bench.predict import efficiency, format_table, plot

    names = list(MODELS) if args.model == "all" else [args.model]
    out = {}
    for name in names:
        if is_spec(name):
            if args.check:
                raise ArgumentError("--check measures the built-in models only; drop it with your own --model.")
            profile = profile_user_model(name, args.device, args.input_shape, args.classes, args.batch)
        else:
            profile = profile_model(name, args.device)
        print(format_table(profile))
        path = args.plot if len(names) == 1 else args.plot.replace(".png", f"_{name}.png")
        plot(profile, path)
        print(f"plot: {path}\n")
        out[name] = {"profile": profile.__dict__}
        if args.check:
            ic = loopback_interconnect(2)
            measured = weak_scaling(name)
            print(f"check on this machine, Gloo loopback (fitted: {ic.intra_bw / 1e9:.2f} GB/s, "
                  f"{ic.intra_lat * 1e6:.0f} us/hop), per-device batch fixed:")
            print(f"{'replicas':>8} {'predicted eff':>14} {'measured eff':>13}")
            for n, value in measured.items():
                print(f"{n:>8} {efficiency(profile, n, ic):>14.2f} {value / (n * measured[1]):>13.2f}")
            out[name]["check"] = {"measured_samples_per_s": measured,
                                  "predicted_efficiency": {n: efficiency(profile, n, ic) for n in measured}}
    if args.json:
        write_atomic(args.json, json.dumps(out, indent=2, default=str))
    return 0


def _memory(args: argparse.Namespace) -> int:
    from allgpu.bench.memory import format_rows, measure

    counts = sorted({2, 4, args.replicas})
    rows = measure(counts, device=args.device, steps=args.steps or 20, rounds=args.rounds)
    print(format_rows(rows))
    if args.json:
        write_atomic(args.json, json.dumps({"memory": [{**r.__dict__, "held": r.held} for r in rows]}, indent=2))
    return 0
