"""Entry point of the ``allgpu`` console script.

Each command lives in its own module under ``allgpu.cli`` and exposes
``add_parser(subparsers) -> argparse.ArgumentParser`` and ``run(args) -> int`` (the exit code).

Exit codes, every command: 0 success; 1 a failed run, or problems found (``lint`` findings, ``doctor`` errors);
2 a usage error only (a bad option, a missing file, an input that cannot be read: nothing ran); under
``allgpu doctor --run`` and ``allgpu run``, a script that failed gives the script's own exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = ("demo", "run", "doctor", "lint", "migrate", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allgpu",
        description="Train on every device you have; when one sits idle, say why.",
        epilog="exit codes: 0 success; 1 a failed run or problems found; 2 a usage error (nothing ran); "
               "doctor --run and run: a failed script's own code",
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
    from allgpu.cli.arguments import exit_code_for
    from allgpu.errors import AllGpuError

    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a reader that left (`| head`) shows here, not as an error at interpreter exit
        return code
    except AllGpuError as exc:  # a mistake allgpu recognised: its message names the fix; no traceback
        print(f"allgpu {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_code_for(exc)  # 2 for a usage error, 1 for a failed run
    except BrokenPipeError:  # `allgpu lint --list-rules | head -1`: the reader left; say nothing more
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit would raise again
        except (AttributeError, OSError, ValueError):  # a stdout with no descriptor (captured)
            pass
        return 141  # the shell's code for SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C: the replicas it started got it too; reports are written whole or not at all
        print(f"\nallgpu {args.command}: interrupted (Ctrl-C); nothing more was written", file=sys.stderr)
        return 130  # the shell's code for SIGINT


if __name__ == "__main__":
    sys.exit(main())
