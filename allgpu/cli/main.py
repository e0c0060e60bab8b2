"""Entry point of the ``allgpu`` console script.

Each command lives in its own module under ``allgpu.cli`` and exposes
``add_parser(subparsers) -> argparse.ArgumentParser`` and ``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("demo", "run", "doctor", "lint", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allgpu",
        description="Train on every device you have; when one sits idle, say why.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"allgpu.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"allgpu.cli.{name}":
                raise
            continue
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from allgpu.errors import AllGpuError

    try:
        return int(args._run(args) or 0)
    except AllGpuError as exc:  # a mistake allgpu recognised: its message names the fix; no traceback
        print(f"allgpu {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
