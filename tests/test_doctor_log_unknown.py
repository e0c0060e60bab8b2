"""``allgpu doctor --log`` on a log in which nothing names a cause: it names none, quotes the log's own error lines
(last first, each once, lines a reader matched left out, "0 errors" and bare "error:" left out) and says what to run
for the frameworks the log shows (collect_env for PyTorch, TF_CPP_MIN_LOG_LEVEL=0 for TensorFlow, jax.devices() for
JAX, nvidia-smi and the package list for none). Every log here was written by us for tools that do not exist:
fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_reader import read_log
from allgpu.doctor.log_unknown import error_lines
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def notes(text: str) -> str:
    verdict = verdict_from_log(read_log(text))
    assert verdict.cause_ids == () and verdict.nothing_known  # never a cause invented
    return " ".join(verdict.notes)


def test_the_last_exception_is_quoted_with_its_line() -> None:
    text = ('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    zorb.start()\n'
            "zorb.ZorbError: the worker pool did not start\n")
    said = notes(text)
    assert "line 4: zorb.ZorbError: the worker pool did not start" in said and "names no cause" in said
    assert 'File "train.py"' not in said


def test_failure_lines_are_quoted_last_first_each_once() -> None:
    lines = ["zorb: loading", "zorb: ERROR: can't find the plugin", "zorb: ERROR: can't find the plugin",
             "zorb: shutdown failed after 3 tries", "error:"]
    assert error_lines(lines) == [(4, "zorb: shutdown failed after 3 tries"), (3, "zorb: ERROR: can't find the plugin")]


def test_lines_without_a_failure_and_known_lines_are_not_quoted() -> None:
    assert error_lines(["epoch 1: 0 errors", "val mean_squared_error 0.3", "zorb done"]) == []
    assert error_lines(["zorb.ZorbError: x went wrong"], known=frozenset({1})) == []


@pytest.mark.parametrize(("text", "step"), [
    ("import torch\nzorb ran 3 epochs on torch 2.3.0", "torch.utils.collect_env"),
    ("Using TensorFlow backend.\nzorb ran 3 epochs", "TF_CPP_MIN_LOG_LEVEL=0"),
    ("import jax\nzorb ran 3 epochs", "jax.devices()"),
    ("zorb ran 3 epochs", "nvidia-smi"),
])
def test_what_to_run_follows_the_frameworks_the_log_shows(text: str, step: str) -> None:
    assert step in notes(text)
