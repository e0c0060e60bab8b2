"""Argument types shared by the commands: a bad number is argparse's usage error (exit 2), naming the option and
what it expects, before anything starts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text: str) -> int:
    """A whole number >= 1 (replicas, steps, rounds, epochs, batch sizes)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: expected a positive whole number")
    return value


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (restarts, node ranks)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: expected a whole number >= 0")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g}: expected a number of seconds > 0")
    return value


def output_file(text: str) -> str:
    """A file to write at the end of a run: checked before the run (its folder exists and is writable, it is not a
    folder), so minutes of measuring are not lost to a typo."""
    path = Path(text)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name in it, e.g. {str(path / 'out')!r}")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} does not exist; create it (`mkdir -p {folder}`) "
                                         "or give another path")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} is not writable; give another path")
    return text


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file beside it, then ``os.replace``)."""
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


USAGE = 2  # the command line or an input it names was wrong: nothing ran
FAILED = 1  # it ran and failed (a replica, a collective, a checkpoint), or found problems


def exit_code_for(error: BaseException) -> int:
    """The exit code for an allgpu error: 2 (usage) for a bad argument or input (the errors that subclass
    ``ValueError``, ``TypeError`` or ``FileNotFoundError``: nothing ran), 1 for a failed run (``RuntimeError``s:
    a replica, a collective, a checkpoint, a start-up that failed)."""
    return USAGE if isinstance(error, (ValueError, TypeError, FileNotFoundError)) else FAILED
