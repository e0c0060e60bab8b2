"""The one process harness of the test suite: run Python and the allgpu CLI as separate processes, the way a user
does, with a clean launcher environment (conftest removes RANK/WORLD_SIZE/... from this process's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Sequence

from allgpu.runtime.replicas import free_port  # noqa: F401  (re-exported: tests take ports from here)


def job_port() -> int:
    """A port free now for a job whose processes a test starts independently (pods, Slurm tasks given MASTER_PORT).
    Taken below Linux's ephemeral range (32768-60999) and Slurm's derived ports (15000-30999): a port bind(0)
    gave is released before the job's store binds it, and meanwhile another test's process binding port 0 (Gloo's
    listeners do) could take it; two tests' pods then met once in CI (a 200 s hang)."""
    import random
    import socket

    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, 15000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 10000-14999")


def _env(extra: dict | None) -> dict:
    return {**os.environ, **(extra or {})}


def run_python(args: Sequence[str], *, timeout: float = 120, env: dict | None = None, cwd=None,
               stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` to completion; output captured as text."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=_env(env), input=stdin)


_STDERR = {"merge": subprocess.STDOUT, "pipe": subprocess.PIPE, "inherit": None}


def start_python(args: Sequence[str], *, env: dict | None = None, cwd=None, stderr: str = "merge",
                 **popen) -> subprocess.Popen:
    """``python ARGS`` started and left running; stdout readable as text, stderr merged into it, piped apart
    or left to the test's own (``stderr="merge" | "pipe" | "inherit"``)."""
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=_STDERR[stderr], text=True,
                            env=_env(env), cwd=cwd, **popen)


def run_cli(*args: str, timeout: float = 120, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``allgpu ARGS`` (as ``python -m allgpu.cli.main``) to completion."""
    return run_python(["-m", "allgpu.cli.main", *args], timeout=timeout, env=env, cwd=cwd)


def start_cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.Popen:
    """``allgpu ARGS`` started and left running (stdout and stderr merged)."""
    return start_python(["-m", "allgpu.cli.main", *args], env=env, cwd=cwd)


def write_script(folder: Path, name: str, code: str) -> Path:
    """Write dedented ``code`` to ``folder/name``; returns the path."""
    path = Path(folder) / name
    path.write_text(textwrap.dedent(code))
    return path
