"""Restart attempts of ``allgpu run`` with fixed node ranks (static rendezvous): a fresh store per attempt, and an
attempt that another node has left ends on every node.

PyTorch's static rendezvous gives every attempt the node-0 agent's one TCPStore without a per-attempt prefix, so
after a restart the group read the previous attempt's keys and hung (pytorch/pytorch#135712).
:func:`use_fresh_store` gives each attempt a store of its own, hosted by that attempt's global rank 0.

The static rendezvous also restarts each node on its own: an agent restarts its replicas when one of them fails,
and nothing tells the other nodes (its ``num_nodes_waiting()`` is always 0, where the c10d rendezvous makes every
agent restart). The other nodes' replicas learn of it only through their connections to the dead replicas. One
that reads the attempt's store address after the restarting node has stopped that attempt's rank 0 connects to a
port nobody listens on, and PyTorch's TCPStore client retries it for the whole ``init_process_group`` timeout
(30 min), while the restarted node waits for it in the next attempt: the intermittent two-node hang of
``tests/test_elastic_run.py`` (the worker node's replicas read the address a few seconds late on a loaded machine).
So each replica announces its attempt in the agent's store, and :class:`AttemptWatch` ends a replica as soon as a
replica of a later attempt has announced itself; its own agent then restarts it into that attempt. A node whose
replicas all finished cannot follow that way: :mod:`allgpu.runtime.finished_nodes` names it instead.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Mapping

from allgpu.errors import RestartError
from allgpu.runtime import finished_nodes

ATTEMPT_OVER_EXIT = 1  # the exit status of a replica whose attempt another node has left: its agent restarts it
WATCH_INTERVAL_S = 0.5  # seconds between two looks at the agent's store


def _key(env: Mapping[str, str], attempt: int, name: str) -> str:
    return f"allgpu/{env.get('TORCHELASTIC_RUN_ID', '')}/attempt_{attempt}/{name}"


def _agent_store(env: Mapping[str, str], timeout_s: float):
    from torch.distributed import TCPStore

    return TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=timeout_s))


class AttemptWatch:
    """A thread that ends this replica once its attempt cannot go on: ``os._exit(ATTEMPT_OVER_EXIT)``, after a
    line on stderr, when a replica of attempt ``attempt + 1`` has announced itself in the agent's store at
    ``MASTER_ADDR:MASTER_PORT``; ``os._exit(1)`` with a :class:`~allgpu.errors.RestartError` (written where the
    launcher reads a replica's error) when another node had finished in an earlier attempt.

    It looks every ``interval_s`` seconds on a connection of its own; it stops watching, ending nothing, when that
    store is gone (node 0's launcher has finished). Local to this process, not a collective. Call :meth:`stop`
    before the interpreter exits.
    """

    def __init__(self, env: Mapping[str, str], attempt: int, interval_s: float = WATCH_INTERVAL_S):
        self._env = dict(env)
        self._attempt = attempt
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="allgpu-attempt-watch", daemon=True)

    def start(self) -> "AttemptWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and wait for the thread (at most one store request, bounded by its 30 s timeout)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _attempt_over(self):
        """Block until a later attempt began (True), another node finished earlier (its dict, see
        :func:`~allgpu.runtime.finished_nodes.finished_elsewhere`) or :meth:`stop` / the store is gone (None)."""
        later = _key(self._env, self._attempt + 1, "started")
        try:
            store = _agent_store(self._env, timeout_s=30.0)
            while not self._stopped.wait(self._interval_s):
                if store.check([later]):
                    return True
                finished = finished_nodes.finished_elsewhere(store, self._env)
                if finished is not None:
                    finished_nodes.release_exit_barrier(store, self._env)
                    return finished
        except Exception:  # any store error means node 0's agent store is gone: nothing left to watch
            return None
        return None

    def _watch(self) -> None:
        over = self._attempt_over()
        if over is None or self._stopped.is_set():
            return
        rank, attempt = self._env.get("RANK", "?"), self._attempt
        if over is not True:
            end_with(finished_nodes.restart_error(self._env, over))
        print(f"allgpu: replica {rank} ends attempt {attempt}: another node restarted the job (attempt "
              f"{attempt + 1} began there), so this node's launcher restarts its replicas to join it.",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(ATTEMPT_OVER_EXIT)


def end_with(error: RestartError) -> None:
    """End this replica (``os._exit(1)``, from any thread) as an uncaught ``error`` would under ``record``, without
    a traceback of allgpu's code: the launcher reads it from the error file (``TORCHELASTIC_ERROR_FILE``) and
    prints it; the node's local replica 0 also prints it on stderr at once."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        raise error
    except RestartError as raised:
        ErrorHandler().record_exception(raised)
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print(f"allgpu: replica {os.environ.get('RANK', '?')}: RestartError: {error}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


class Attempt:
    """This replica's restart attempt: the agent's store (``store``) and the started :class:`AttemptWatch`."""

    def __init__(self, env: Mapping[str, str], store, watch: AttemptWatch):
        self._env, self.store, self.watch = env, store, watch

    def finished(self, checkpoint: str = "") -> None:
        """Stop the watch and note that this replica's script ended cleanly (see
        :func:`~allgpu.runtime.finished_nodes.note_finished`); store errors are ignored (node 0 may be gone)."""
        self.watch.stop()
        try:
            finished_nodes.note_finished(self.store, self._env, checkpoint)
        except Exception:  # node 0's launcher has ended: no other node can restart any more
            pass

    def stop(self) -> None:
        self.watch.stop()


def _published_port(agent, env: Mapping[str, str], key: str, timeout_s: float) -> int:
    """Wait for rank 0's port under ``key``; raise :class:`RestartError` at once if another node finished."""
    deadline = time.monotonic() + timeout_s
    while not agent.check([key]) and time.monotonic() < deadline:
        finished_nodes.raise_if_finished_elsewhere(agent, env)
        time.sleep(0.2)
    return int(agent.get(key))  # past the deadline: the store's own timeout error


def use_fresh_store(env: dict = os.environ, timeout_s: float = 300.0) -> Attempt:
    """Point ``init_process_group(env://)`` at a new store for this attempt, hosted by global rank 0; returns the
    :class:`Attempt`, whose watch has started (call its ``finished()`` when the script has ended cleanly, else
    its ``stop()``).

    The replica first announces its attempt (``TORCHELASTIC_RESTART_COUNT``) in the agent's store, so replicas
    of earlier attempts on other nodes end. Rank 0 (on node 0, whose address is ``MASTER_ADDR``) then picks a free
    port and publishes it under a key named by the attempt; the others wait up to ``timeout_s`` seconds for it;
    ``TORCHELASTIC_USE_AGENT_STORE=False`` then makes rank 0's ``init_process_group`` host the store there, as it
    does without an agent.

    Raises:
        RestartError: in a restarted attempt, node 0's launcher has ended or another node's replicas had all
            finished in an earlier attempt (they will never join this one).
    """
    attempt = int(env["TORCHELASTIC_RESTART_COUNT"])
    if attempt > 0:
        finished_nodes.check_node_zero(env)
    agent = _agent_store(env, timeout_s)
    agent.set(_key(env, attempt, "started"), env["RANK"])
    finished_nodes.raise_if_finished_elsewhere(agent, env)
    watch = AttemptWatch(env, attempt).start()
    key = _key(env, attempt, "master_port")
    if env["RANK"] == "0":
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        agent.set(key, str(port))
    else:
        try:
            port = _published_port(agent, env, key, timeout_s)
        except BaseException:
            watch.stop()
            raise
    env["MASTER_PORT"] = str(port)
    env["TORCHELASTIC_USE_AGENT_STORE"] = "False"
    return Attempt(env, agent, watch)
