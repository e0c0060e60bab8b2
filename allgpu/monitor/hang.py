"""``SIGUSR1`` on a replica prints where every replica is in the job's collectives: a hang, explained on demand.

``kill -USR1 <pid>`` on any replica prints, to that replica's stderr, its own view from the collective ledger
(``ReplicaGroup.ledger.explain``: who is behind or diverged, at which collective, from which line), every
replica's last collective, and where this replica's main thread is. Replica 0 also names the replicas behind
the job's most advanced collective, and passes the signal on to the replicas on its own machine (their process
ids are in the job's store), so one ``kill -USR1`` of the process you started makes every local replica report.
Each replica publishes its state (step, whether it waits in a collective or the gradient all-reduce, its
innermost line of user code) in the store as it reports; replica 0 then prints a job view naming the replicas
that are not in the collective the others wait in. Each backward round's gradient all-reduce is one ledger entry
(``GradientSync.record_rounds``), so a replica that skipped a backward is named as behind, at its last round.

A replica stuck in a collective is inside C++ code, where Python signal handlers do not run until the call
returns (Python docs, ``signal``: "Execution of Python signal handlers"). So the handler itself does nothing; the
C-level handler Python installs writes the signal number to a wake-up descriptor (``signal.set_wakeup_fd``), and a
daemon thread reading it prints the report while the main thread stays blocked.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

from allgpu.errors import MonitorUsageError
from allgpu.core.ledger import Ledger

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_installed: dict = {}
_PID_KEY = "allgpu/hang-dump/pid/{}"
_STATE_KEY = "allgpu/hang-dump/state/{}"
PEER_WAIT_S = 2.0  # how long replica 0 waits for the other replicas' states before printing the job view
QUIET_S = 1.0  # a second signal this soon after a report (a forwarded one after `pkill -USR1`) is not repeated


def install_hang_dump(strategy, signum: int = signal.SIGUSR1, stream=None) -> None:
    """Make ``signum`` (default SIGUSR1) print this replica's collective report to ``stream`` (default stderr).

    Call it on every replica, from the main thread, after the strategy is built. A second call replaces the
    strategy reported on. Other handled signals keep working: their wake-up bytes are forwarded to a previous
    wake-up descriptor (asyncio's, say).

    Raises:
        MonitorUsageError: (a ``RuntimeError``) called from a thread other than the main thread (Python's signal
            API requires it).
    """
    if threading.current_thread() is not threading.main_thread():
        raise MonitorUsageError("install_hang_dump() must be called from the main thread (Python installs signal "
                                "handlers only there). Fix: call it right after building the strategy, outside any "
                                "thread.")
    _installed.update(strategy=strategy, stream=stream, signum=signum)
    ledger = strategy.replica_group.ledger
    if ledger.store is not None:
        ledger.store.set(_PID_KEY.format(ledger.rank), f"{socket.gethostname()}:{os.getpid()}")
    if signum in _installed.get("signals", ()):
        return
    previous_handler = signal.getsignal(signum)

    def handler(sig, frame):  # the report comes from the reader thread; chain a user's handler
        if callable(previous_handler):
            previous_handler(sig, frame)

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    signal.signal(signum, handler)
    _installed.setdefault("signals", set()).add(signum)
    _installed["sockets"] = (reader, writer)
    threading.Thread(target=_read_wakeups, args=(reader, signum, previous_fd), name="allgpu-hang-dump",
                     daemon=True).start()


def _read_wakeups(reader: socket.socket, signum: int, previous_fd: int) -> None:
    last = 0.0
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        if previous_fd >= 0:
            try:
                os.write(previous_fd, data)
            except OSError:
                pass
        if signum not in data or time.monotonic() - last < QUIET_S:
            continue
        last, signalled_at = time.monotonic(), time.time()
        strategy = _installed["strategy"]
        stream = _installed.get("stream") or sys.stderr
        try:
            stream.write(hang_report(strategy) + "\n")
            stream.flush()
            ledger = strategy.replica_group.ledger
            if ledger.rank == 0 and ledger.store is not None:
                _forward(ledger, signum)
                stream.write(job_view(_gather_states(ledger, since=signalled_at - 0.5)) + "\n")
                stream.flush()
        except Exception as exc:  # never let the reporter kill the thread that reports
            print(f"allgpu: the hang report failed: {exc!r}", file=sys.stderr, flush=True)


def _forward(ledger: Ledger, signum: int) -> None:
    """Signal the other replicas on this machine, from the process ids they left in the store."""
    if ledger.store is None:
        return
    host = socket.gethostname()
    for rank in range(1, ledger.world_size):
        key = _PID_KEY.format(rank)
        try:
            if not ledger.store.check([key]):
                continue
            their_host, pid = ledger.store.get(key).decode().rsplit(":", 1)
            if their_host == host:
                os.kill(int(pid), signum)
        except (OSError, ValueError, RuntimeError):  # exited, or the store is gone: report what we can
            continue


def _gather_states(ledger: Ledger, since: float) -> dict[int, dict | None]:
    """Every replica's state published at or after wall time ``since``, waiting up to PEER_WAIT_S for them."""
    deadline = time.monotonic() + PEER_WAIT_S
    while True:
        states: dict[int, dict | None] = {}
        for rank in range(ledger.world_size):
            key = _STATE_KEY.format(rank)
            try:
                state = json.loads(ledger.store.get(key)) if ledger.store.check([key]) else None
            except Exception:  # the store is gone or the entry is torn: report the replica as silent
                state = None
            states[rank] = state if state and state["time"] >= since else None
        if all(states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


def job_view(states: dict[int, dict | None]) -> str:
    """Replica 0's summary of what every replica was doing when signalled, and who the others wait for."""
    lines = ["allgpu: job view from replica 0 (each replica's state when signalled):"]
    for rank, state in sorted(states.items()):
        if state is None:
            lines.append(f"  replica {rank}: no report (on another machine, or not answering: send it SIGUSR1)")
        else:
            lines.append(f"  replica {rank}: step {state['step']}, {state['doing']}, at {state['line']}")
    known = {r: s for r, s in states.items() if s}
    waiting = [r for r, s in known.items() if s["waiting"]]
    running = [r for r, s in known.items() if not s["waiting"]]
    if waiting and running:
        what = known[waiting[0]]["doing"]
        for r in running:
            lines.append(f"  verdict: replica {r} is not in the collective that replica(s) "
                         f"{', '.join(map(str, waiting))} wait in ({what}); it is at {known[r]['line']} "
                         f"(step {known[r]['step']}). Make every replica reach the same collectives in the same "
                         "order (a step, a backward or a reduce skipped on one replica?).")
    elif waiting and len(waiting) == len(states):
        lines.append("  verdict: every replica is waiting in a collective; if they wait in different ones, they "
                     "diverged (see each replica's report above); if in the same one, suspect the network or a device.")
    return "\n".join(lines)


def _user_line(frame) -> str:
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_PACKAGE_DIR) and f"{os.sep}torch{os.sep}" not in path and "contextlib" not in path \
                and "threading.py" not in path and "multiprocessing" not in path:
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def hang_report(strategy) -> str:
    """The report SIGUSR1 prints, as text: this replica's view, every replica's last collective, its stack."""
    group = strategy.replica_group
    ledger: Ledger = group.ledger
    main = sys._current_frames().get(threading.main_thread().ident)
    stack = traceback.format_stack(main, limit=12) if main is not None else []
    in_group = any("replica_group.py" in line and "in _run" in line for line in stack)
    in_gradients = any("sync.py" in line and "in _finalize" in line for line in stack)
    step = ledger.step if ledger.step is not None else "?"
    round_entered = in_gradients and ledger.last is not None and ledger.last.op.startswith("gradient all-reduce")
    if (in_group or round_entered) and ledger.last is not None:
        view, _ = ledger.explain(time.time() - ledger.last.time)
        if round_entered:  # the round is in the ledger (GradientSync.record_rounds)
            view = view.replace(f"replica {ledger.rank} waited ", f"replica {ledger.rank} is waiting for the gradient "
                                f"all-reduce at the end of loss.backward() (step {step}): it has waited ", 1)
    else:
        view, _ = ledger.explain(None)
        where = (f"is waiting for the gradient all-reduce at the end of loss.backward() (step {step}; "
                 "this round is not in the ledger); its last strategy collective was "
                 if in_gradients else "is not in a collective; its last was ")
        view = view.replace(f"replica {ledger.rank} failed in ", f"replica {ledger.rank} {where}", 1)
    doing = ("waiting for the gradient all-reduce" if in_gradients else
             f"waiting in collective #{ledger.last.seq} {ledger.last.op}" if in_group and ledger.last else "not in a collective")
    _publish(ledger, {"step": step, "doing": doing, "waiting": in_gradients or in_group,
                      "line": _user_line(main), "time": time.time()})
    lines = [f"allgpu: hang report from replica {ledger.rank} of {ledger.world_size} (pid {os.getpid()}, "
             f"{strategy.device} on {socket.gethostname()}), on signal:", f"  {view}"]
    entries = _read(ledger)
    if entries is not None:
        lines.append("  last collective of every replica:")
        for rank, entry in entries.items():
            lines.append(f"    replica {rank}: " + (entry.describe() if entry else "none yet"))
        if ledger.rank == 0:
            lines.append("  " + behind_verdict(entries))
    lines.append("  this replica's main thread is at:")
    lines += ["    " + line.rstrip().replace("\n", "\n    ") for line in stack[-6:]]
    return "\n".join(lines)


def _publish(ledger: Ledger, state: dict) -> None:
    if ledger.store is not None:
        try:
            ledger.store.set(_STATE_KEY.format(ledger.rank), json.dumps(state))
        except Exception:  # the store lives in replica 0; gone means replica 0 is gone, and says so itself
            pass


def _read(ledger: Ledger):
    if ledger.store is None:
        return None
    try:
        return ledger.read_all()
    except Exception:  # the store lives in replica 0; if it is gone, the view above already says so
        return None


def behind_verdict(entries: dict) -> str:
    """One sentence naming the replicas behind the most advanced collective, or those that diverged from it."""
    seqs = {rank: (e.seq if e else 0) for rank, e in entries.items()}
    front = max(seqs.values())
    leader = next(e for e in entries.values() if e and e.seq == front) if front else None
    behind = [r for r, s in seqs.items() if s < front]
    diverged = [r for r, e in entries.items() if e and e.seq == front and (e.op, e.shapes) != (leader.op, leader.shapes)]
    if not behind and not diverged:
        return f"verdict: every replica is at collective #{front}" + (f" ({leader.op} at {leader.where})" if leader
                                                                        else "") + "."
    parts = []
    for r in behind:
        e = entries[r]
        where = f"its last was {e.describe()}" if e else "it has issued no collective"
        parts.append(f"replica {r} is behind ({where}) while replica(s) "
                     f"{', '.join(str(k) for k, s in seqs.items() if s == front)} wait in {leader.describe()}")
    for r in diverged:
        parts.append(f"replica {r} diverged: {entries[r].describe()} vs {leader.describe()}")
    return "verdict: " + "; ".join(parts) + "."
