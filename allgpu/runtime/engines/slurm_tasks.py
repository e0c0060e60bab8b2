"""Slurm: a task of this ``srun`` step that ended while the others wait at the rendezvous.

``srun``'s default (``KillOnBadExit=0``) keeps a step's other tasks running when one exits, so a task that failed
before the rendezvous (an error on one node only) left the others waiting until the timeout. Slurm's own account
of the step's tasks on this node answers it: ``SLURM_GTIDS`` (set by ``slurmstepd``) lists the global task ids
it started here, and ``scontrol listpids JOB.STEP`` the ones still running (PID, job, step, local id, global id;
"only with processes on the node on which scontrol is run", Slurm's ``scontrol`` manual). ``slurmstepd`` forks
every task of the node before any of them runs, so a task id of this node missing from the list while this task
is alive has ended: during the rendezvous, before it joined the job.

No false alarm: when ``scontrol`` is missing, fails, or does not list this task itself (a proctrack plugin that
cannot list), nothing is concluded. A task on another node is not seen (see docs/not_done.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Iterator, Mapping

from allgpu.errors import ReplicaFailedError


def _global_ids(text: str) -> set[int]:
    return {int(part) for part in text.split(",") if part.strip().isdigit()}


def running_tasks(env: Mapping[str, str]) -> set[int] | None:
    """The global task ids of this step that ``scontrol listpids`` shows running on this node; None when it cannot
    say (no ``scontrol``, an error, or this task itself not listed)."""
    step = f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    try:
        out = subprocess.run(["scontrol", "listpids", step], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    running = set()
    for line in out.stdout.splitlines()[1:]:  # PID JOBID STEPID LOCALID GLOBALID; a task's children show "-"
        fields = line.split()
        if len(fields) >= 5 and fields[4].isdigit():
            running.add(int(fields[4]))
    own = env.get("SLURM_PROCID", "")
    return running if own.isdigit() and int(own) in running else None


def _marks(env: Mapping[str, str]) -> Path:
    """This node's folder where a task stopped by this watch notes whom it followed (node-local temp, named for the
    job, the step and srun's launcher port, so a folder left by another cluster's job of the same id differs)."""
    step = f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}-{env.get('SLURM_STEP_LAUNCHER_PORT', '')}"
    return Path(tempfile.gettempdir()) / f"allgpu-slurm-{step}"


def ended_tasks(env: Mapping[str, str] | None = None) -> list[int]:
    """The global ids of this step's tasks on this node that ended on their own (sorted): a task this watch stopped
    is replaced by the ones it named, never blamed itself. [] when none has ended, or when Slurm cannot say
    (outside a step, no ``SLURM_GTIDS``, ``scontrol listpids`` unusable)."""
    env = os.environ if env is None else env
    here = _global_ids(env.get("SLURM_GTIDS", ""))
    if "SLURM_STEP_ID" not in env or len(here) < 2:
        return []
    running = running_tasks(env)
    if running is None:
        return []
    failed: set[int] = set()
    for task in here - running:
        try:
            failed |= _global_ids((_marks(env) / f"followed-{task}").read_text())
        except OSError:  # no mark: it ended by itself
            failed.add(task)
    return sorted(failed)


def _leave_mark(env: Mapping[str, str], named: list[int]) -> None:
    try:
        folder = _marks(env)
        folder.mkdir(exist_ok=True)
        (folder / f"followed-{env.get('SLURM_PROCID', '')}").write_text(",".join(map(str, named)))
    except OSError:
        pass


def ended_message(ended: list[int], rank: int, world_size: int, env: Mapping[str, str] | None = None) -> str:
    """The error text for task ``rank`` of ``world_size`` that found ``ended`` gone before the rendezvous."""
    env = os.environ if env is None else env
    node = env.get("SLURMD_NODENAME") or "this node"
    step = f"{env.get('SLURM_JOB_ID', '?')}.{env.get('SLURM_STEP_ID', '?')}"
    names = ", ".join(f"task {t}" for t in ended)
    return (f"{names} of Slurm step {step} on {node} ended before joining the job (srun prints `{node}: task "
            f"{ended[0]}: Exited ...` and that task's error above), so the job of {world_size} replicas can never "
            f"form; task {rank} stops instead of waiting at the rendezvous until the timeout. Fix: that task's "
            "error; `srun --kill-on-bad-exit=1` also ends a step at its first failed task.")


POLL_S = 1.0  # seconds between looks at the step's tasks while the rendezvous waits


@contextlib.contextmanager
def ended_task_watch(rank: int, world_size: int, env: Mapping[str, str] | None = None) -> Iterator[None]:
    """While the body (this task's rendezvous) runs, look every ``POLL_S`` seconds for a task of this node that has
    ended; when one has, print a :class:`~allgpu.errors.ReplicaFailedError` naming it and end this process with
    exit code 1 (the rendezvous blocks in PyTorch's C++ store, which no exception can interrupt). Does nothing
    outside a Slurm step of several tasks on this node."""
    env = dict(os.environ if env is None else env)
    if "SLURM_STEP_ID" not in env or len(_global_ids(env.get("SLURM_GTIDS", ""))) < 2:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            ended = ended_tasks(env)
            if ended and not done.is_set():
                error = ReplicaFailedError(ended_message(ended, rank, world_size, env), rank=ended[0])
                _leave_mark(env, ended)  # before exiting: a task watching finds it followed, not failed
                print("".join(traceback.format_exception_only(type(error), error)).rstrip(), file=sys.stderr,
                      flush=True)
                os._exit(1)

    thread = threading.Thread(target=watch, name="allgpu-slurm-task-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
