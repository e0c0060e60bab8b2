"""Argument types shared by the commands: a bad number is argparse's usage error (exit 2), naming the option and
what it expects, before anything starts."""

from __future__ import annotations

import argparse


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


USAGE = 2  # the command line or an input it names was wrong: nothing ran
FAILED = 1  # it ran and failed (a replica, a collective, a checkpoint), or found problems


def exit_code_for(error: BaseException) -> int:
    """The exit code for an allgpu error: 2 (usage) for a bad argument or input (the errors that subclass
    ``ValueError``, ``TypeError`` or ``FileNotFoundError``: nothing ran), 1 for a failed run (``RuntimeError``s:
    a replica, a collective, a checkpoint, a start-up that failed)."""
    return USAGE if isinstance(error, (ValueError, TypeError, FileNotFoundError)) else FAILED
