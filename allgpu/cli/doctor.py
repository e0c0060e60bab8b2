"""``allgpu doctor [--json] [--reading FILE]``: read this machine, list what keeps a GPU idle, with fixes.
``allgpu doctor [--steps N] [--report DIR] --run script.py [args]``: run a script under the step monitor.

Exit code: 0 when no problem has severity "error", 1 when one does, 2 when ``--reading`` cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from allgpu.doctor import EnvironmentReading, ReadingFormatError, diagnose, exit_code, read_environment
from allgpu.doctor.report import render, to_json

EPILOG = ("exit code: 0 when no problem is an error (warnings and info allowed), 1 when at least one is, "
          "2 when --reading cannot be read.")


@dataclass(frozen=True)
class DoctorConfig:
    """What ``allgpu doctor`` was asked: ``json`` output, and a saved ``reading`` to diagnose instead of this
    machine."""

    json: bool = False
    reading: Path | None = None


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = "Say which GPUs PyTorch can use on this machine, which it cannot, and why."
    parser.epilog = EPILOG
    parser.add_argument("--json", action="store_true",
                        help="print the reading, the problems and the exit code as JSON")
    parser.add_argument("--reading", type=Path, metavar="FILE",
                        help="diagnose a reading saved with `allgpu doctor --json` (e.g. on another machine)")
    parser.add_argument("--steps", type=int, default=50, help="with --run: steps to monitor (default 50)")
    parser.add_argument("--report", metavar="DIR", help="with --run: write monitor.json and monitor.png here")
    parser.add_argument("--run", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS",
                        help="run a training script that uses allgpu.fit under the step monitor for --steps steps "
                             "and print why its devices idle (must come last)")
    return parser


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return configure(subparsers.add_parser("doctor", help="why is a GPU unused? check this machine"))


def load_reading(path: Path) -> EnvironmentReading:
    """A reading from a file holding ``allgpu doctor --json`` output, or just its ``"reading"`` member.

    Raises:
        ReadingFormatError: the file is missing, not JSON, or not a reading.
    """
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ReadingFormatError(f"--reading {path}: cannot read it ({exc.strerror}). "
                                 "Fix: pass a file written by `allgpu doctor --json > FILE`.") from None
    except UnicodeDecodeError:
        raise ReadingFormatError(f"--reading {path}: not a text file (it does not decode as UTF-8). "
                                 "Fix: pass a file written by `allgpu doctor --json > FILE`.") from None
    except json.JSONDecodeError as exc:
        raise ReadingFormatError(f"--reading {path}: not JSON ({exc}). "
                                 "Fix: pass a file written by `allgpu doctor --json > FILE`.") from None
    if isinstance(data, dict) and "reading" in data:
        data = data["reading"]
    return EnvironmentReading.from_dict(data)


def run(args: argparse.Namespace) -> int:
    if args.run is not None:
        if not args.run:
            print("allgpu doctor --run: name the script. Fix: allgpu doctor --run train.py [args]", file=sys.stderr)
            return 2
        from allgpu.cli.doctor_run import run_monitored

        return run_monitored(args.run[0], args.run[1:], steps=args.steps, report_dir=args.report)
    config = DoctorConfig(json=args.json, reading=args.reading)
    try:
        reading = load_reading(config.reading) if config.reading else read_environment()
    except ReadingFormatError as exc:
        print(f"allgpu doctor: {exc}", file=sys.stderr)
        return 2
    problems = diagnose(reading)
    if config.json:
        print(json.dumps(to_json(reading, problems), indent=2))
    else:
        render(reading, problems)
    return exit_code(problems)
