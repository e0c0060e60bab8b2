"""Let Gloo's worker threads finish before the interpreter finalizes, so a clean exit cannot abort.

A Gloo collective runs on one of the process group's worker threads (named ``pt_gloo_runloop``). The worker
drops its reference to the finished work a moment *after* the caller's ``wait()`` returns. When that is the
last reference to a tensor Python has already let go of, the drop must take the GIL to free the tensor's
Python object. If the main thread has meanwhile begun ``Py_Finalize``, CPython 3.11 ends the worker with
``pthread_exit`` inside a ``noexcept`` destructor, and the process dies with "terminate called without an
active exception" / SIGABRT after the script has finished (cpython issue 87135, pytorch issue 38228).
``destroy_process_group()`` does not stop Gloo's threads: the process group object lives on while FSDP, a
``DeviceMesh`` or a model still refer to it. So the exit path waits, with the GIL released, until every Gloo
worker is asleep and has not run for three sampling intervals in a row.
"""

from __future__ import annotations

import os
import time

GLOO_WORKER = "pt_gloo_runloop"  # the thread name torch gives ProcessGroupGloo's workers
SAMPLE_S = 0.01
IDLE_SAMPLES = 3  # consecutive quiet samples: on a loaded machine a runnable worker can miss one 10 ms slot


def _gloo_workers() -> dict[str, tuple[str, int]]:
    """``{tid: (state, ns run so far)}`` for this process's Gloo worker threads (Linux ``/proc``)."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                if f.read().strip() != GLOO_WORKER:
                    continue
            with open(f"{base}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"{base}/schedstat") as f:
                ran_ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended while being read
            continue
        found[tid] = (state, ran_ns)
    return found


def wait_for_gloo_workers(timeout_s: float = 2.0) -> bool:
    """Block until this process's Gloo worker threads are idle, or ``timeout_s`` (seconds) has passed.

    Idle: every worker sleeps (state S or D) and has not run during ``IDLE_SAMPLES`` consecutive ``SAMPLE_S``
    intervals in which this thread held no GIL, so a worker waiting for the GIL would have taken it and run (one
    interval was not enough on a loaded machine: the worker could wait for a CPU through all of it). Local to this process,
    not a collective. Returns True when idle (or on a platform without ``/proc``, where nothing can be
    checked), False at the timeout. Call it after the last collective, before the interpreter exits.
    """
    if not os.path.isdir("/proc/self/task"):
        return True
    deadline = time.monotonic() + timeout_s
    before = _gloo_workers()
    if not before:
        return True
    quiet = 0
    while True:
        time.sleep(SAMPLE_S)  # releases the GIL
        now = _gloo_workers()
        quiet = quiet + 1 if all(state in "SD" and before.get(tid) == (state, ran)
                                 for tid, (state, ran) in now.items()) else 0
        if quiet >= IDLE_SAMPLES:
            return True
        if time.monotonic() >= deadline:
            return False
        before = now
