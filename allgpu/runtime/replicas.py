"""Launch-free start: replica 0 re-executes the running script once per extra device and watches the copies.

The copies get torchrun's variables and the :mod:`allgpu.runtime.env` contract, so they join exactly as they
would under torchrun. A copy that fails is named with its traceback and ends the job within seconds.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Sequence

from allgpu.devices import Device
from allgpu.errors import ReplicaFailedError
from allgpu.runtime import env as launch_env
from allgpu.runtime.interrupt import SIGINT_WORDS, SigintWatch, checkpoint_note
from allgpu.runtime.script_command import die_with_parent, replica_stdin, script_command, start_directory

# Seconds a replica waits for its peers after one of them has failed, before the whole job is ended.
FAILURE_GRACE_S = 5.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it; a race with another program is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def held_store(host: str, timeout_s: float):
    """A rendezvous store server that rank 0 of a job on this machine hosts on a port the OS picked and that stays
    bound: no other program can take the port between the choice and ``init_process_group`` (as it can with
    :func:`free_port`). Multi-tenant, so rank 0's ``init_process_group(init_method="tcp://host:port")`` reuses this
    server instead of binding the port again; the other replicas connect to it as clients. ``.port`` is the port.

    Raises:
        RuntimeError: from :class:`torch.distributed.TCPStore` (no port could be bound on ``host``).
    """
    from datetime import timedelta

    from torch.distributed import TCPStore

    return TCPStore(host, 0, is_master=True, multi_tenant=True, wait_for_workers=False,
                    timeout=timedelta(seconds=timeout_s))


_STOPPED: list[bool] = []  # set once this process stopped its replicas (they will never leave the job cleanly)


def peers_stopped() -> bool:
    """True once replica 0 stopped the replicas it started: nothing is left to wait for at exit."""
    return bool(_STOPPED)


def error_file(error_dir: str, rank: int) -> Path:
    return Path(error_dir) / f"replica-{rank}.txt"


def whole_lines() -> None:
    """Line-buffered stdout and stderr that are not write-through: a line reaches the shared terminal or pipe when
    it ends, in one write, so the replicas' lines never cut into each other ("LINELINE 0 ..."). Block buffering (a
    pipe) cuts lines at 8 KiB boundaries, and write-through (``PYTHONUNBUFFERED=1``, set in many images) makes every
    piece of a ``print`` its own write. Process-wide: see docs/architecture.md."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # a TextIOWrapper; a notebook's or a test's stand-in stays as it is
            stream.reconfigure(line_buffering=True, write_through=False)


def install_replica_excepthook(rank: int, error_dir: str | None) -> None:
    """Make an uncaught exception in replica ``rank`` leave its traceback where the supervisor finds it."""
    if not error_dir:
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        interrupted = issubclass(exc_type, KeyboardInterrupt)
        text = f"KeyboardInterrupt ({SIGINT_WORDS})\n" if interrupted else \
            "".join(traceback.format_exception(exc_type, exc, tb))
        if not interrupted:  # a Ctrl-C reaches every replica: replica 0 alone reports it, not N tracebacks
            previous(exc_type, exc, tb)  # first: once the error file exists the supervisor may stop this replica
        try:
            error_file(error_dir, rank).write_text(text)
        except OSError:
            pass

    sys.excepthook = hook


def process_state(pid: int) -> str:
    """A live process's state in words, from ``/proc``: frozen (stopped) or running."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "is running"
    if "\nState:\tT" in status:
        return "is frozen (stopped: SIGSTOP, Ctrl-Z or a debugger)"
    return "is still running (slow, or waiting elsewhere)"


def raised(text: str | None) -> str | None:
    """The exception line (``Type: message``) of a traceback written by a replica's excepthook, or None."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line.startswith("  ")]
    line = lines[frames[-1] + 1] if frames and frames[-1] + 1 < len(lines) else (lines[-1] if lines else None)
    return None if line is None else (line if len(line) <= 160 else line[:157] + "...")


def _state(proc: subprocess.Popen, error: str | None = None) -> str:
    """A replica's state in words; ``error`` is the exception line it wrote (it raised): never "still running"
    for a replica that already failed and is only exiting."""
    code = proc.poll()
    after = f" after raising {error}" if error else ""
    if code is not None:
        return (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}") + after
    if error:
        return f"raised {error} (exiting)"
    state = process_state(proc.pid)
    return state + (", so it never reached the collective" if "frozen" in state else "")


class ScriptReplicas:
    """Replicas 1..N-1 of the running script, started and watched by replica 0 (this process).

    If a replica exits with an error (or at all before the job's rendezvous completed), its traceback is printed
    naming it, the other replicas are stopped, and replica 0 ends within ``FAILURE_GRACE_S`` seconds if it has
    not failed on its own by then. If replica 0 raises (including ``KeyboardInterrupt``), the others are stopped
    at its exit. A SIGINT to replica 0 alone stops the others at once and ends replica 0 within
    ``FAILURE_GRACE_S`` seconds, even when it is blocked in a collective: never a hang.
    """

    def __init__(self, devices: Sequence[Device], timeout_s: float, *, rank_offset: int = 0,
                 world_size: int | None = None, master_addr: str = "127.0.0.1", master_port: int | None = None,
                 job: str | None = None):
        self.devices = list(devices)
        self.placement = dict(rank_offset=rank_offset, world_size=world_size, master_addr=master_addr)
        # Rank 0 of a job on this machine alone hosts the store on a port held from now on; a worker of a
        # multi-worker job is told the chief's address and port.
        self._store = held_store(master_addr, timeout_s) if master_port is None and rank_offset == 0 else None
        self.port = master_port or (self._store.port if self._store is not None else free_port())
        # The job in words, checked at the rendezvous: the engine's (``job``), or one this job on this machine alone
        # makes up; its rendezvous then refuses a replica of another (a stale one).
        self.job_id = job or (f"allgpu job {uuid.uuid4().hex[:12]}" if self._store is not None else None)
        self.error_dir = tempfile.mkdtemp(prefix="allgpu-errors-")
        self.timeout_s = timeout_s
        self.failure: ReplicaFailedError | None = None
        self._procs: dict[int, subprocess.Popen] = {}
        self._stopping = False
        self._joined = False  # the rendezvous completed: from then on a replica may finish (exit 0) before us
        self._main_failed = False
        self._interrupted_main = False  # replica 0 is ending with KeyboardInterrupt
        self._stopped = threading.Event()
        self._reporting = threading.Lock()  # the watch thread and the main thread may both see one SIGINT
        self._sigint = None

    def start(self) -> None:
        command = script_command()
        folder = start_directory()
        whole_lines()  # replica 0 shares its stdout with the replicas it starts
        for rank in range(1, len(self.devices)):
            env = {**os.environ, **launch_env.replica_variables(
                rank, [str(d) for d in self.devices], self.port, self.error_dir, self.timeout_s, **self.placement,
                job_id=self.job_id)}
            with replica_stdin() as stdin:
                self._procs[rank] = subprocess.Popen(command, env=env, stdin=stdin, cwd=folder,
                                                     preexec_fn=die_with_parent)
        self._sigint = SigintWatch()
        previous = sys.excepthook

        def hook(exc_type, exc, tb):  # replica 0 is dying of an exception: its peers must not wait for it
            if self._reporting.locked() and self._stopping:
                # A SIGINT was reported and the replicas stopped while replica 0 sat in a collective, which then
                # failed for that reason: its traceback would blame the network or a crash.
                print(f"allgpu: replica {self.placement['rank_offset']} left its collective "
                      f"({exc_type.__name__}) because the job was interrupted.", file=sys.stderr, flush=True)
                self._stopped.wait(15)
                os._exit(130)
            self._main_failed = True
            self._interrupted_main = issubclass(exc_type, KeyboardInterrupt)
            previous(exc_type, exc, tb)
            self._at_exit()

        sys.excepthook = hook
        threading.Thread(target=self._watch, name="allgpu-replica-watch", daemon=True).start()
        atexit.register(self._at_exit)

    def joined(self) -> None:
        """The job's rendezvous completed; a replica exiting with 0 from now on has simply finished."""
        self._joined = True
        self._store = None  # the process group's own store keeps the server it shares alive

    def _watch(self) -> None:
        while not self._stopping:
            if self._sigint.fired():
                self._interrupted()
                return
            for rank, proc in self._procs.items():
                code = proc.poll()
                if code is not None and (code != 0 or not self._joined) and not self._stopping:
                    self._fail(rank, code)
                    return
            time.sleep(0.1)

    def _interrupted(self) -> None:
        self._report_interrupt(f" Replica {self.placement['rank_offset']} ends within {FAILURE_GRACE_S:g} s.")
        time.sleep(FAILURE_GRACE_S)
        os._exit(130)  # the main thread did not end by itself: it is blocked in a collective or rendezvous

    def _report_interrupt(self, tail: str = "") -> None:
        """Say that the job was interrupted (not that a replica failed), which replicas are stopped, and where the
        newest checkpoint is; then stop them. Once only: a second caller waits for the first to finish."""
        if not self._reporting.acquire(blocking=False):
            self._stopped.wait(15)
            return
        stopping = [f"replica {self.placement['rank_offset'] + r} (pid {p.pid}"
                    + (")" if p.poll() is None else ", already ended)") for r, p in self._procs.items()]
        # A worker that started no replica of its own (one device; the others are other workers' processes) stops
        # none: they see this one leave at their next collective.
        stops = f"; stopping {', '.join(stopping)}." if stopping else "."
        print(f"\nallgpu: interrupted by SIGINT ({SIGINT_WORDS.removeprefix('SIGINT: ')}) on replica "
              f"{self.placement['rank_offset']}{stops}" + checkpoint_note() + tail, file=sys.stderr, flush=True)
        self.stop()

    def _fail(self, local_rank: int, code: int) -> None:
        path = error_file(self.error_dir, local_rank)
        rank = self.placement["rank_offset"] + local_rank
        remote = path.read_text() if path.exists() else None
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if code > 0 and not self._joined and remote is None:
            # It failed before its strategy existed: in the script's own code, re-run in the copy.
            how += (" before creating its strategy (its traceback is above): the code before the strategy runs again "
                    "in each replica, started in the folder the program was started in and without standard input (a terminal or pipe is replica 0's alone: an input() "
                    "there ends with EOFError; python train.py < answers.txt works, each replica reads the file from "
                    "its start). Fix: make that code run the same when re-executed (input as arguments or a file)")
        if code == 0:
            how += (" before joining the job (it ran to the end without creating the same strategy: "
                    "a script whose code differs when re-executed, or a strategy created only on replica 0)")
        self.failure = ReplicaFailedError(f"replica {rank} {how}", rank=rank, remote_traceback=remote)
        banner = f"\nallgpu: replica {rank} {how}; stopping the other replicas."
        print(banner + (f" Its traceback:\n{remote}" if remote else ""), file=sys.stderr, flush=True)
        self.stop()
        time.sleep(FAILURE_GRACE_S)
        os._exit(1)  # replica 0 did not fail by itself in the grace period: it is waiting on a dead peer

    @property
    def started_any(self) -> bool:
        """True once at least one replica process was started."""
        return bool(self._procs)

    def describe(self, wait_s: float = 0.0) -> str:
        """Each started replica's state, naming it: killed by a signal, exited with a code, frozen (stopped, e.g. by
        SIGSTOP or a debugger), raised (naming its error, even while it is still exiting), or running. ``wait_s``:
        give a replica that is failing this long to write its error or be reaped."""
        deadline = time.monotonic() + wait_s
        def settling() -> bool:  # a replica still running that has not (yet) written an error
            return any(p.poll() is None and not error_file(self.error_dir, r).exists() for r, p in self._procs.items())

        while wait_s and time.monotonic() < deadline and settling():
            time.sleep(0.05)
        parts = []
        for local_rank, proc in self._procs.items():
            rank = self.placement["rank_offset"] + local_rank
            path = error_file(self.error_dir, local_rank)
            try:
                error = raised(path.read_text()) if path.exists() else None
            except OSError:
                error = None
            parts.append(f"replica {rank} (pid {proc.pid}) {_state(proc, error)}")
        return "; ".join(parts)

    def stop(self) -> None:
        self._stopping = True
        self._store = None
        _STOPPED.append(True)
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    os.kill(proc.pid, signal.SIGCONT)  # a frozen (SIGSTOPped) replica gets its SIGTERM now
                except OSError:
                    pass
        for proc in self._procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.error_dir, ignore_errors=True)  # one a run was left in /tmp, thousands on a test machine
        self._stopped.set()

    def _at_exit(self) -> None:
        if self._stopping:  # another thread is stopping the replicas: let it finish before this process ends
            self._stopped.wait(15)
            if self.failure is not None:  # a replica failed while this one was finishing: the job failed
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)
            return
        if self._interrupted_main:
            self._report_interrupt()
            return
        if self._main_failed:  # the others would wait for replica 0 in a collective until the timeout
            started = f" {self.describe(2.0)}; stopping the other replicas." if self._procs else ""
            print(f"allgpu: replica {self.placement['rank_offset']} failed (traceback above).{started}",
                  file=sys.stderr, flush=True)
            self.stop()
            return
        deadline = time.monotonic() + self.timeout_s + 10
        for local_rank, proc in self._procs.items():
            rank = self.placement["rank_offset"] + local_rank
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
            except KeyboardInterrupt:  # Ctrl-C once this replica's script was done: stop the others, no traceback
                self._stopping = True
                print(f"allgpu: interrupted (Ctrl-C) while waiting for replica {rank} to finish; stopping it.",
                      file=sys.stderr, flush=True)
                self.stop()
                os._exit(130)
            if code not in (0,):
                self._stopping = True
                print(f"allgpu: replica {rank} did not finish cleanly (exit code {code}).", file=sys.stderr)
                self.stop()
                os._exit(1)
        self._stopping = True
        shutil.rmtree(self.error_dir, ignore_errors=True)
