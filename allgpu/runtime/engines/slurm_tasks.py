"""Slurm: a task of this ``srun`` step that ended while the others wait at the rendezvous.

``srun``'s default (``KillOnBadExit=0``) keeps a step's other tasks running when one exits, so a task that failed
before the rendezvous (an error on one node only) left the others waiting until the timeout. Slurm's own account
of the step's tasks on this node answers it: ``SLURM_GTIDS`` (set by ``slurmstepd``) lists the global task ids
it started here, and ``scontrol listpids JOB.STEP`` the ones still running (PID, job, step, local id, global id;
"only with processes on the node on which scontrol is run", Slurm's ``scontrol`` manual). ``slurmstepd`` forks
every task of the node before any of them runs, so a task id of this node missing from the list while this task
is alive has ended: during the rendezvous, before it joined the job.

No false alarm: when ``scontrol`` is missing, fails, or does not list this task itself (a proctrack plugin that
cannot list), nothing is concluded. A task on another node is not seen this way; the tasks that saw it post it in
the job's store, where the other nodes' tasks read it (when the store is up: not when replica 0 is what ended, and
not when every task of a node ended, as nobody is left there to see it; docs/not_done.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Iterator, Mapping

from allgpu.errors import ReplicaFailedError
from allgpu.runtime.engines import slurm_nodes


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


def ended_tasks(env: Mapping[str, str] | None = None) -> tuple[list[int], str | None]:
    """The global ids of this step's tasks on this node that ended on their own (sorted), and their node when
    another node's (None: this one): a task this watch stopped is replaced by the ones it named, never blamed
    itself. ``([], None)`` when none has ended, or when Slurm cannot say (outside a step, no ``SLURM_GTIDS``,
    ``scontrol listpids`` unusable)."""
    env = os.environ if env is None else env
    here = _global_ids(env.get("SLURM_GTIDS", ""))
    if "SLURM_STEP_ID" not in env or len(here) < 2:
        return [], None
    running = running_tasks(env)
    if running is None:
        return [], None
    failed: set[int] = set()
    node = None
    for task in here - running:
        try:
            named, _, node_named = (_marks(env) / f"followed-{task}").read_text().partition("\n")
            failed |= _global_ids(named)
            node = node_named.strip() or node
        except OSError:  # no mark: it ended by itself
            failed.add(task)
    return sorted(failed), node


def _leave_mark(env: Mapping[str, str], named: list[int], node: str | None) -> None:
    try:
        folder = _marks(env)
        folder.mkdir(exist_ok=True)
        text = ",".join(map(str, named)) + (f"\n{node}" if node else "")
        (folder / f"followed-{env.get('SLURM_PROCID', '')}").write_text(text)
    except OSError:
        pass


def ended_message(ended: list[int], rank: int, world_size: int, env: Mapping[str, str] | None = None,
                  node: str | None = None, seen: str | None = None) -> str:
    """The error text for task ``rank`` of ``world_size`` that found ``ended`` gone before the rendezvous (on
    ``node``, default this one; ``seen``: how, when not by that node's other tasks)."""
    env = os.environ if env is None else env
    seen = seen if seen is not None else ", seen by its node's other tasks" if node else ""
    node = node or env.get("SLURMD_NODENAME") or "this node"
    step = f"{env.get('SLURM_JOB_ID', '?')}.{env.get('SLURM_STEP_ID', '?')}"
    names = ", ".join(f"task {t}" for t in ended)
    return (f"{names} of Slurm step {step} on {node} ended before joining the job{seen} (srun prints `{node}: "
            f"task {ended[0]}: Exited ...` and that task's error), so the job of {world_size} replicas can never "
            f"form; task {rank} stops instead of waiting at the rendezvous until the timeout. Fix: that task's "
            "error; `srun --kill-on-bad-exit=1` also ends a step at its first failed task.")


POLL_S = 1.0  # seconds between looks at the step's tasks while the rendezvous waits


class _StepMark:
    """The job's rendezvous store as a notice board for tasks on other nodes: a task that found a task of its node
    ended posts it there; every task waiting at the rendezvous reads it. Reached once replica 0 hosts the store
    (never when replica 0 itself is what ended). Connections wait for the store as ``init_process_group``'s own
    client does (quietly; a short connect timeout would log a C++ error at each try)."""

    def __init__(self, env: Mapping[str, str], addr: str, port: int):
        self.key = f"allgpu/slurm/{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}/ended"
        self.addr, self.port, self._store = addr, port, None
        self.node_index = env.get("SLURM_NODEID", "0")

    def reached(self, node_index: int) -> bool:
        """Whether a task of node ``node_index`` has reached the store (False while this task has not)."""
        try:
            return self._store is not None and self._store.check([f"{self.key}/node/{node_index}"])
        except Exception:  # the store is gone
            return True

    def up(self) -> bool:
        """Whether replica 0's store is (or was) reached: replica 0 is alive, or was when it opened it."""
        return self._store is not None or _listening(self.addr, self.port)

    def connect(self, timeout_s: float):
        """A client of the job's store, waiting up to ``timeout_s`` for it; None if it never came."""
        from torch.distributed import TCPStore

        try:
            return TCPStore(self.addr, self.port, is_master=False, timeout=timedelta(seconds=timeout_s))
        except Exception:  # never came up within the timeout, or gone
            return None

    def watch(self, done: threading.Event, found) -> None:
        """Reader thread: once the store is up, look every ``POLL_S`` seconds for a post; ``found(tasks, node)``.
        It connects only once a plain TCP connect shows the store listening (then at once), so it is never long
        inside PyTorch's C++ store calls: a daemon thread there when the interpreter exits aborts the process."""
        while not done.wait(POLL_S):
            try:
                if self._store is None:
                    if _listening(self.addr, self.port):
                        self._store = self.connect(10.0)
                        if self._store is not None:  # this task's node has reached the store
                            self._store.set(f"{self.key}/node/{self.node_index}", "1")
                elif self._store.check([self.key]):
                    value = json.loads(self._store.get(self.key))
                    found([int(t) for t in value["tasks"]], str(value["node"]), value.get("seen"))
            except Exception:  # a store that went away, a value not ours: nothing concluded
                return

    def post(self, ended: list[int], node: str, seen: str | None = None) -> None:
        """Post ``ended`` (tasks of ``node``). Replica 0 may not host the store yet: wait up to ``LINGER_S`` for it,
        unless replica 0 is among ``ended`` (then no store will come)."""
        if self._store is None and 0 not in ended:
            self._store = self.connect(LINGER_S)
        try:
            if self._store is not None:
                self._store.set(self.key, json.dumps({"tasks": ended, "node": node, "seen": seen}))
        except Exception:  # best effort: this task ends anyway
            pass

    def leave(self, expected: int, host: bool) -> None:
        """Count this task among those that have seen the post; the host (replica 0, whose exit closes the store)
        first waits until ``expected`` others have, for at most ``LINGER_S`` (a task on another node that is
        still starting reaches the store in that time)."""
        store = self._store
        if store is None:
            return
        try:
            if not host:
                store.add(self.key + "/seen", 1)
                return
            deadline = time.monotonic() + LINGER_S
            while store.add(self.key + "/seen", 0) < expected and time.monotonic() < deadline:
                time.sleep(0.2)
        except Exception:  # the store is gone: nothing left to wait for
            pass


def _listening(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=1.0):
            return True
    except OSError:
        return False


# Seconds replica 0 keeps the store up at most after a post, for the other nodes' tasks to read it.
LINGER_S = 30.0


def _end(message: str, failed: list[int], spec, mark: _StepMark, post_from: str | None = None,
         seen: str | None = None) -> None:
    """Print the error; post ``failed`` (tasks of node ``post_from``, seen as ``seen`` says) for the other nodes when
    this task saw them; leave."""
    error = ReplicaFailedError(message, rank=failed[0])
    print("".join(traceback.format_exception_only(type(error), error)).rstrip(), file=sys.stderr, flush=True)
    if post_from is not None:
        mark.post(failed, post_from, seen)
    mark.leave(spec.world_size - 1 - len(set(failed) - {spec.rank}), host=spec.rank == 0)
    os._exit(1)  # the rendezvous blocks in PyTorch's C++ store, which no exception can interrupt


def _watch_first_node(env: Mapping[str, str], done: threading.Event, mark: _StepMark, end) -> None:
    """Thread of the first task of a node other than the first: while replica 0's store is not up, look at the first
    node's tasks from here (:mod:`.slurm_nodes`); the same ended tasks on two looks in a row: ``end`` naming them."""
    if done.wait(slurm_nodes.AFTER_S):
        return
    last = None
    while not mark.up():
        seen = slurm_nodes.ended_on_first_node(env)
        if seen is not None and seen == last:
            node, tasks = seen
            end(tasks, node, f", seen from {env.get('SLURMD_NODENAME') or 'another node'} (`srun --overlap -w "
                             f"{node} scontrol listpids`: not running there)")
            return
        last = seen
        if done.wait(slurm_nodes.POLL_S):
            return


def _watch_other_nodes(env: Mapping[str, str], done: threading.Event, mark: _StepMark, end) -> None:
    """Thread of task 0: look at each other node none of whose tasks has reached the store (:mod:`.slurm_nodes`);
    the same ended tasks on two looks in a row: ``end`` naming them, posted for every task."""
    if done.wait(slurm_nodes.AFTER_S):
        return
    others = list(enumerate(slurm_nodes.nodes(env)))[1:]
    last: dict[int, object] = {}
    while True:
        for index, (node, tasks) in others:
            if mark.reached(index) or done.is_set():
                continue
            seen = slurm_nodes.ended_on(env, node, tasks)
            if seen is not None and seen == last.get(index):
                end(seen[1], node, f", seen by task 0 (`srun --overlap -w {node} scontrol listpids`: not running "
                                   "there)", post=True)
                return
            last[index] = seen
        if done.wait(slurm_nodes.POLL_S):
            return


@contextlib.contextmanager
def ended_task_watch(spec, env: Mapping[str, str] | None = None) -> Iterator[None]:
    """While the body (task ``spec.rank``'s rendezvous) runs, look every ``POLL_S`` seconds
    for a task of this node that has ended, and at the job's store for those another node's tasks posted; when one
    has, print a :class:`~allgpu.errors.ReplicaFailedError` naming it and end this process with exit code 1. Does
    nothing outside a Slurm step."""
    env = dict(os.environ if env is None else env)
    if "SLURM_STEP_ID" not in env:
        yield
        return
    done, ending = threading.Event(), threading.Lock()
    mark = _StepMark(env, spec.master_addr, spec.master_port)
    here = env.get("SLURMD_NODENAME") or "this node"

    def end(failed: list[int], node: str | None, seen: str | None = None, post: bool = False) -> None:
        if done.is_set() or not ending.acquire(blocking=False):
            return  # the rendezvous completed, or another watch thread is ending this process
        _leave_mark(env, failed, node)  # before exiting: a task of this node finds it followed, not failed
        _end(ended_message(failed, spec.rank, spec.world_size, env, node=node, seen=seen), failed, spec, mark,
             post_from=here if node is None else node if post else None, seen=seen if post else None)

    def watch_node() -> None:
        while not done.wait(POLL_S):
            ended, node = ended_tasks(env)
            if ended:  # of this node, or another's that a task of this node saw before it stopped
                end(ended, None) if node is None else end(ended, node, f", seen by a task of {here}")

    targets = [watch_node, lambda: mark.watch(done, end)]
    if slurm_nodes.watches_first_node(env):
        targets.append(lambda: _watch_first_node(env, done, mark, end))
    if spec.rank == 0 and len(slurm_nodes.nodes(env)) > 1:
        targets.append(lambda: _watch_other_nodes(env, done, mark, end))
    threads = [threading.Thread(target=target, name="allgpu-slurm-task-watch", daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if not ending.acquire(blocking=False):  # a watch thread is ending this process (os._exit): let it
            threading.Event().wait()
        for thread in threads:
            thread.join(timeout=12)
