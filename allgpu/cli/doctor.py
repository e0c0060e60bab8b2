"""``allgpu doctor [--json] [--reading FILE]``: read this machine, list what keeps a GPU idle, with fixes.
``allgpu doctor --log FILE [--json]``: explain a captured run log's device use (one verdict, cause ids).
``allgpu doctor [--steps N] [--report DIR] [--device-memory SIZE] --run script.py [args]``: run a script and explain its device use (an
allgpu.fit script under the step monitor; any other script as a child process with GPU samples and lint).

Exit code: 0 when no problem has severity "error", 1 when one does, 2 when ``--reading`` cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from allgpu.cli.arguments import positive_int, positive_seconds
from allgpu.doctor import EnvironmentReading, ReadingFormatError, diagnose, exit_code, read_environment
from allgpu.doctor.report import render, to_json

EPILOG = ("exit code: 0 when no problem is an error (warnings and info allowed), 1 when at least one is, "
          "2 when --reading or --log cannot be read (or the log is empty) or --run is misused (nothing ran); "
          "--run of a script that failed: the script's exit code. "
          "Cause ids of --log/--run verdicts: allgpu/doctor/causes.py.")


@dataclass(frozen=True)
class DoctorConfig:
    """What ``allgpu doctor`` was asked: ``json`` output, and a saved ``reading`` to diagnose instead of this
    machine."""

    json: bool = False
    reading: Path | None = None


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("Say which GPUs PyTorch, TensorFlow, JAX and Keras can use on this machine, which they "
                          "cannot, and why; or explain a run's device use from its log (--log) or by running it "
                          "(--run).")
    parser.epilog = EPILOG
    parser.add_argument("--json", action="store_true",
                        help="print the reading, the problems and the exit code as JSON")
    parser.add_argument("--reading", type=Path, metavar="FILE",
                        help="diagnose a reading saved with `allgpu doctor --json` (e.g. on another machine)")
    parser.add_argument("--log", type=Path, metavar="FILE",
                        help="explain a captured stdout/stderr of a TensorFlow, JAX, Keras or PyTorch run "
                             "('-' reads stdin): devices registered and used, and causes with evidence")
    parser.add_argument("--explain", metavar="ID",
                        help="print the explanation and fix for a finding id (from a monitor, doctor or lint line)")
    parser.add_argument("--no-frameworks", action="store_true",
                        help="do not read TensorFlow/JAX/Keras installs (each is imported in a child process)")
    parser.add_argument("--framework-timeout", type=positive_seconds, default=120.0, metavar="S",
                        help="seconds the child process reading TensorFlow/JAX/Keras may take; a framework "
                             "still importing then is reported as hung (default 120)")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                        help="with --run of a non-allgpu script: stop it after S seconds (default: no limit)")
    parser.add_argument("--steps", type=positive_int, default=50, help="with --run: steps to monitor (default 50)")
    parser.add_argument("--report", metavar="DIR", help="with --run: write monitor.json and monitor.png (allgpu "
                        "scripts) or run.log and verdict.json (other scripts) here")
    parser.add_argument("--device-memory", type=_size, metavar="SIZE",
                        help="with --run of an allgpu script: plan against devices of SIZE (e.g. 80GiB, 24GB, or "
                             "bytes) instead of the device's own memory; the report then says whether parameters, "
                             "gradients and optimizer state fit it mirrored or need FullyShardedStrategy "
                             "(the only way to ask on a CPU-only machine)")
    parser.add_argument("--run", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS",
                        help="run a training script and explain its device use: an allgpu script under the step "
                             "monitor for --steps steps; any other script as a child process with NVML samples, "
                             "lint and one verdict (must come last)")
    return parser


_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12, "kib": 2 ** 10,
          "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def _size(text: str) -> int:
    """``"80GiB" -> 85899345920``; ``"24GB"``, ``"1.5 TiB"``, ``"1000000"`` (bytes). argparse turns the error
    into a usage message naming the option."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS or float(m.group(1)) * _UNITS[unit] < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size; expected a number with an optional unit "
                                         "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 80GiB")
    return int(float(m.group(1)) * _UNITS[unit])


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


def run_log(path: Path, *, json_out: bool = False) -> int:
    """``allgpu doctor --log FILE``: 0 with no error finding, 1 with one, 2 when the file cannot be read or is empty."""
    from allgpu.doctor.log_reader import read_log
    from allgpu.doctor.verdict import verdict_from_log
    from allgpu.doctor.verdict_report import render_verdict, verdict_exit_code

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(errors="replace")
    except OSError as exc:
        print(f"allgpu doctor --log {path}: cannot read it ({exc.strerror}). Fix: save the run's output with "
              "`python train.py 2>&1 | tee run.log` and pass run.log.", file=sys.stderr)
        return 2
    if not text.strip():  # an empty capture (a redirect that missed stderr, a run that had not started)
        print(f"allgpu doctor --log {path}: the log is empty, so there is nothing to read. Fix: capture stdout and "
              "stderr together: `python train.py 2>&1 | tee run.log`, and pass run.log.", file=sys.stderr)
        return 2
    verdict = verdict_from_log(read_log(text))
    if json_out:
        print(json.dumps({"log": str(path), **verdict.to_dict(), "exit_code": verdict_exit_code(verdict)}, indent=2))
    else:
        render_verdict(verdict, f"allgpu doctor --log {path}")
    return verdict_exit_code(verdict)


def _run_usage_error(args: argparse.Namespace) -> str:
    """Why ``--run`` and the options only it reads do not fit together ("" when they do): an option after
    ``--run SCRIPT`` goes to the script, and one that works with --run only would be silently ignored without it."""
    if args.run is not None and not args.run:
        return "--run: name the script. Fix: allgpu doctor --run train.py [args]"
    if args.run and args.run[0].startswith("-"):
        return (f"--run {args.run[0]}: every word after --run goes to the script, so the script comes first. Fix: "
                f"put doctor's options before --run: allgpu doctor {args.run[0]} ... --run train.py [args]")
    only_run = [name for name, value in (("--steps", args.steps != 50), ("--report", args.report),
                                         ("--timeout", args.timeout), ("--device-memory", args.device_memory)) if value]
    if args.run is None and only_run:
        return (f"{', '.join(only_run)}: used only with --run, and no --run was given (nothing ran). Fix: "
                f"allgpu doctor {only_run[0]} ... --run train.py [args]")
    return ""


def run(args: argparse.Namespace) -> int:
    if args.explain:
        from allgpu.doctor.explain import explain

        print(explain(args.explain), end="")  # an unknown id is an ArgumentError: exit 2, naming the known ids
        return 0
    misplaced = _run_usage_error(args)
    if misplaced:
        print(f"allgpu doctor: {misplaced}", file=sys.stderr)
        return 2
    if args.run is not None:
        from allgpu.doctor.run_any import is_allgpu_script, run_any

        if is_allgpu_script(args.run[0]):
            from allgpu.cli.doctor_run import run_monitored

            return run_monitored(args.run[0], args.run[1:], steps=args.steps, report_dir=args.report,
                                 device_memory=args.device_memory)
        return run_any(args.run[0], args.run[1:], json_out=args.json, timeout=args.timeout, report_dir=args.report)
    if args.log is not None:
        return run_log(args.log, json_out=args.json)
    config = DoctorConfig(json=args.json, reading=args.reading)
    try:
        if config.reading:
            reading, frameworks = load_reading(config.reading), load_frameworks(config.reading)
        else:
            reading = read_environment()
            frameworks = None if args.no_frameworks else _read_frameworks(args.framework_timeout)
    except ReadingFormatError as exc:
        print(f"allgpu doctor: {exc}", file=sys.stderr)
        return 2
    problems = diagnose(reading)
    if frameworks is not None:
        from allgpu.doctor.framework_rules import diagnose_frameworks
        from allgpu.doctor.problem import by_severity

        problems = by_severity(problems + diagnose_frameworks(frameworks, reading))
    if config.json:
        print(json.dumps(to_json(reading, problems, frameworks), indent=2))
    else:
        render(reading, problems, frameworks=frameworks)
    return exit_code(problems)


def _read_frameworks(timeout: float):
    from allgpu.doctor.frameworks import installed_packages, read_frameworks

    if not any(p in installed_packages() for p in ("tensorflow", "tensorflow-cpu", "tf-nightly", "jax", "keras",
                                                     "tensorflow-gpu", "tensorflow-intel")):
        return None
    if sys.stderr.isatty():
        print("allgpu doctor: reading TensorFlow/JAX/Keras in a child process (importing TensorFlow takes a few "
              "seconds)...", file=sys.stderr)
    return read_frameworks(timeout=timeout)


def load_frameworks(path: Path):
    """The ``"frameworks"`` member of a saved ``allgpu doctor --json`` output, or None when it has none."""
    from allgpu.doctor.frameworks import FrameworksReading

    data = json.loads(path.read_text())
    if isinstance(data, dict) and isinstance(data.get("frameworks"), dict):
        return FrameworksReading.from_dict(data["frameworks"])
    return None
