"""``allgpu demo``: train a CNN on real handwritten digits across every device, and report."""

from __future__ import annotations

import argparse
import sys

from allgpu.cli.arguments import positive_int


DEFAULT_EPOCHS = 12


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("demo", help="train a CNN on scikit-learn's digits on every device",
                              description=__doc__)
    p.add_argument("--replicas", type=positive_int, default=None,
                   help="number of replicas (default: every visible GPU, or 2 CPU replicas without one)")
    p.add_argument("--epochs", type=positive_int, default=DEFAULT_EPOCHS)
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="global batch size (all replicas together; default 64 rounded up to a multiple of the "
                        "replicas)")
    p.add_argument("--report", metavar="PATH",
                   help="write a JSON summary to PATH (a .json file; the step monitor's monitor.json and "
                        "monitor.png go beside it), or into the folder PATH")
    p.add_argument("--checkpoint-dir", default="allgpu_checkpoints/demo", help="'' to skip saving")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no per-epoch monitor table")
    p.add_argument("--no-monitor", action="store_true", help="do not time the steps")
    return p


def run(args: argparse.Namespace) -> int:
    from allgpu.bench.demo import report_paths, run_demo, write_report

    if args.replicas and args.batch_size and args.batch_size % args.replicas:
        low = args.batch_size // args.replicas * args.replicas or args.replicas
        print(f"allgpu demo: --batch-size {args.batch_size} does not divide among --replicas {args.replicas}. Fix: "
              f"--batch-size {low} or {low + args.replicas}, or leave it out.", file=sys.stderr)
        return 2

    summary, monitor_dir = report_paths(args.report) if args.report else (None, None)
    taken = next((p for p in (monitor_dir, *monitor_dir.parents) if p.exists()), None) if monitor_dir else None
    if taken is not None and not taken.is_dir():
        print(f"allgpu demo: --report {args.report}: {str(taken)!r} is a file, not a folder (nothing ran). Fix: "
              "give a .json file name or a folder", file=sys.stderr)
        return 2
    result = run_demo(replicas=args.replicas, epochs=args.epochs, global_batch_size=args.batch_size,
                      checkpoint_dir=args.checkpoint_dir or None, verbose=not args.quiet,
                      monitor=not args.no_monitor, report_dir=str(monitor_dir) if monitor_dir else None)
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() != 0:
        return 0
    print(f"replicas: {result.replicas} x {result.device.split(':')[0]}"
          + (f"  (fell back: {result.fallback_reason})" if result.fallback_reason else ""))
    print(f"test accuracy: {result.test_accuracy:.4f}  (test loss {result.test_loss:.4f})")
    print(f"throughput: {result.samples_per_second:.0f} samples/s in all, "
          f"{result.per_replica_samples_per_second:.0f} samples/s per replica (last epoch)")
    if result.checkpoint:
        print(f"checkpoint: {result.checkpoint}")
    if result.diagnosis:
        print(f"diagnosis: {', '.join(result.diagnosis)} (see the table above)")
    if summary:
        write_report(result, summary)
        print(f"report: {summary}" + ("" if args.no_monitor else f" (step monitor: {monitor_dir}/monitor.json, .png)"))
    if result.test_accuracy < 0.95:
        why = (f"after {args.epochs} epoch(s) the CNN has not learned enough yet. Fix: leave out --epochs (12)"
               if args.epochs < DEFAULT_EPOCHS else "something is wrong with this machine or build (the digits CNN "
               f"reaches about 0.98 in {DEFAULT_EPOCHS} epochs). Fix: run `allgpu doctor`")
        print(f"test accuracy is below 0.95: {why}", file=sys.stderr)
        return 1
    return 0
