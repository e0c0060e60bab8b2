"""What ``allgpu doctor --log`` says about a log in which nothing names a cause (issue 21: "a log with no known
message still says what it could read ... and never invents a cause").

Besides the facts every verdict shows (frameworks, devices, versions, environment blocks), such a log gets two notes:

- the log's own error lines that no reader matched (a Python exception's last line, lines that say error, fatal,
  failed, aborted, killed, segmentation fault), with their line numbers: what the run itself reported, quoted, not
  interpreted;
- the commands whose output the readers do know, chosen by the frameworks the log shows: PyTorch's
  ``python -m torch.utils.collect_env`` (read by :mod:`allgpu.doctor.log_blocks`), TensorFlow run with
  ``TF_CPP_MIN_LOG_LEVEL=0`` (its library and device messages), JAX's device list with its package list, and for a
  log that shows no framework ``nvidia-smi`` and the package list; always ``allgpu doctor`` on the machine itself.

Pure: reads only the lines given. Names no cause.
"""

from __future__ import annotations

import re

# A Python exception's last line ("RuntimeError: ...", "zorb.ZorbError: ...", "MemoryError"), a C++ runtime's
# "terminate called", or a line that says it failed.
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Fault|Interrupt)\b(?::.*)?$")
_FAILURE = re.compile(r"\b(?:error|fatal|failed|failure|aborted|abort|killed|segmentation fault|core dumped|"
                      r"terminate called|panic(?:ked)?)\b", re.I)
# Lines that carry the words but report no failure ("0 errors", "error_rate", a loss named "...error").
_NOT_FAILURE = re.compile(r"\b0 errors?\b|\bno errors?\b|error[_-]?rate|mean_\w*error|squared_error|ignore_errors|"
                          r"\bwarn(?:ing)?s?\b.*\bdeprecat", re.I)
MAX_LINES = 3
MIN_CHARS = 8  # a bare "error:" quotes nothing
QUOTE = 160


def error_lines(lines: list[str], known: frozenset[int] = frozenset()) -> list[tuple[int, str]]:
    """The log's own error lines, ``(line, text)`` 1-based, at most :data:`MAX_LINES`, last first, each text once:
    exception lines when there are any (the last is what ended the run), else lines that say they failed.
    ``known``: lines a reader already matched, left out."""
    exceptions, failures = [], []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or number in known or line.startswith(("File ", "at ", "#")):
            continue
        if _EXCEPTION.match(line):
            exceptions.append((number, line[:QUOTE]))
        elif _FAILURE.search(line) and not _NOT_FAILURE.search(line):
            failures.append((number, line[:QUOTE]))
    chosen, seen = [], set()
    for number, text in reversed(exceptions or failures):  # last first, each text once
        if text not in seen and len(re.sub(r"\W", "", text)) >= MIN_CHARS:
            seen.add(text)
            chosen.append((number, text))
    return chosen[:MAX_LINES]


def error_note(found: list[tuple[int, str]]) -> str | None:
    """One note quoting the log's own error lines (:func:`error_lines`), or None when it has none."""
    if not found:
        return None
    quoted = "; ".join(f"line {n}: {text}" for n, text in found)
    return (f"The log's own error lines, which no reader here knows (quoted, last first, not read for a cause): "
            f"{quoted}. Search the tool's issue tracker for the first of them.")


_STEPS = {
    "pytorch": "`python -m torch.utils.collect_env` (its report names PyTorch's CUDA build, the driver and the GPUs)",
    "tensorflow": "`TF_CPP_MIN_LOG_LEVEL=0 python -c \"import tensorflow as tf; "
                  "print(tf.config.list_physical_devices('GPU'))\"` (TensorFlow then prints the CUDA libraries it "
                  "loads or misses and the GPUs it registers)",
    "jax": "`python -c \"import jax; print(jax.devices())\"` and `pip list` (the jaxlib and its CUDA plugin)",
}
_STEPS["keras"] = _STEPS["tensorflow"]
_ANY = "`nvidia-smi` (the driver and the GPUs) and `pip list` or `conda list` (CPU or CUDA builds)"


def next_steps(frameworks: set[str]) -> str:
    """What to run and paste so that a reader has something to read, for the frameworks a log shows."""
    steps = list(dict.fromkeys(_STEPS[f] for f in sorted(frameworks) if f in _STEPS)) or [_ANY]
    return ("The log shows no message allgpu doctor knows about devices, so it names no cause. To give it "
            "something to read, run "
            + "; ".join(steps) + ", and paste that output with the whole log, from the first import on, to "
            "`allgpu doctor --log`; or run `allgpu doctor` on the machine itself.")
