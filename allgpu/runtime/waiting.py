"""Saying whom a replica waits for at the rendezvous, every 30 s, instead of waiting in silence.

Waiting is right (the other machine may come up later: a ``TF_CONFIG`` worker started first, a scheduler that
starts tasks one by one); silence is not. While :func:`init_process_group` waits for the job's replicas,
:func:`reporting_wait` prints, after ``ALLGPU_WAIT_REPORT_S`` seconds (30) and then as often: who is waiting,
where, for whom (task indices and addresses from ``TF_CONFIG`` when the job comes from it), since when, and when
it will give up (the start time plus the timeout).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Iterator

from allgpu.runtime import env
from allgpu.runtime.cluster import ClusterSpec, from_tf_config_env

REPORT_EVERY_S = 30.0
# srun's default (KillOnBadExit=0) keeps a step's other tasks running when one exits: a task that failed before
# the rendezvous (its traceback and srun's `task N: Exited` line are above) never comes, and the rest wait here.
# A task of this node that ended is found within seconds (engines/slurm_tasks.py); one on another node is not.
SLURM_HINT = (" Under srun, a task on another node that failed before the rendezvous never comes (srun printed "
              "`task N: Exited` above) while srun keeps the others running: fix that task's error, or run "
              "`srun --kill-on-bad-exit=1` so one failed task ends the step.")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def peers(spec: ClusterSpec) -> str:
    """Whom replica ``spec.rank`` waits for, in words: TF_CONFIG's other workers with their addresses, else ranks."""
    if spec.source == "TF_CONFIG":
        try:
            config = from_tf_config_env()
        except Exception:  # already validated when the job was placed; describe by rank instead
            config = None
        if config is not None:
            others = [f"worker {i} ({address})" for i, address in enumerate(config.workers) if i != config.worker_index]
            return "the other workers to start and connect: " + ", ".join(others)
    others = [r for r in range(spec.world_size) if r != spec.rank]
    shown = ", ".join(map(str, others[:16])) + (" ..." if len(others) > 16 else "")
    return f"replicas {shown} to connect"


@contextlib.contextmanager
def reporting_wait(spec: ClusterSpec, timeout_s: float) -> Iterator[None]:
    """Report on stderr, every ``ALLGPU_WAIT_REPORT_S`` seconds, while the body (a rendezvous) has not returned."""
    every = env.read().wait_report_s or REPORT_EVERY_S
    since = time.time()
    done = threading.Event()

    def report() -> None:
        while not done.wait(every):
            waited = time.time() - since
            print(f"allgpu: replica {spec.rank} of {spec.world_size} has waited {waited:.0f} s (since "
                  f"{_clock(since)}) at the rendezvous {spec.master_addr}:{spec.master_port} for {peers(spec)}. "
                  f"It gives up at {_clock(since + timeout_s)} (timeout={timeout_s:g} s); Ctrl-C stops it now."
                  + (SLURM_HINT if spec.source == "Slurm" else ""), file=sys.stderr, flush=True)

    thread = threading.Thread(target=report, name="allgpu-rendezvous-report", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
