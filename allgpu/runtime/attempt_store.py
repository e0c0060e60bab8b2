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
replica of a later attempt has announced itself; its own agent then restarts it into that attempt.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from datetime import timedelta
from typing import Mapping

ATTEMPT_OVER_EXIT = 1  # the exit status of a replica whose attempt another node has left: its agent restarts it
WATCH_INTERVAL_S = 0.5  # seconds between two looks at the agent's store


def _key(env: Mapping[str, str], attempt: int, name: str) -> str:
    return f"allgpu/{env.get('TORCHELASTIC_RUN_ID', '')}/attempt_{attempt}/{name}"


def _agent_store(env: Mapping[str, str], timeout_s: float):
    from torch.distributed import TCPStore

    return TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=timeout_s))


class AttemptWatch:
    """A thread that ends this replica (``os._exit(ATTEMPT_OVER_EXIT)``, after a line on stderr) once a replica of
    attempt ``attempt + 1`` has announced itself in the agent's store at ``MASTER_ADDR:MASTER_PORT``.

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

    def _later_attempt_began(self) -> bool:
        """Block until a later attempt began (True) or :meth:`stop` / the store is gone (False)."""
        later = _key(self._env, self._attempt + 1, "started")
        try:
            store = _agent_store(self._env, timeout_s=30.0)
            while not self._stopped.wait(self._interval_s):
                if store.check([later]):
                    return True
        except Exception:  # any store error means node 0's agent store is gone: nothing left to watch
            return False
        return False

    def _watch(self) -> None:
        if not self._later_attempt_began() or self._stopped.is_set():
            return
        rank, attempt = self._env.get("RANK", "?"), self._attempt
        print(f"allgpu: replica {rank} ends attempt {attempt}: another node restarted the job (attempt "
              f"{attempt + 1} began there), so this node's launcher restarts its replicas to join it.",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(ATTEMPT_OVER_EXIT)


def use_fresh_store(env: dict = os.environ, timeout_s: float = 300.0) -> AttemptWatch:
    """Point ``init_process_group(env://)`` at a new store for this attempt, hosted by global rank 0; returns the
    started :class:`AttemptWatch` for this attempt (call its ``stop()`` when the script has finished).

    The replica first announces its attempt (``TORCHELASTIC_RESTART_COUNT``) in the agent's store, so replicas
    of earlier attempts on other nodes end. Rank 0 (on node 0, whose address is ``MASTER_ADDR``) then picks a free
    port and publishes it under a key named by the attempt; the others wait up to ``timeout_s`` seconds for it;
    ``TORCHELASTIC_USE_AGENT_STORE=False`` then makes rank 0's ``init_process_group`` host the store there, as it
    does without an agent.
    """
    attempt = int(env["TORCHELASTIC_RESTART_COUNT"])
    agent = _agent_store(env, timeout_s)
    agent.set(_key(env, attempt, "started"), env["RANK"])
    watch = AttemptWatch(env, attempt).start()
    key = _key(env, attempt, "master_port")
    if env["RANK"] == "0":
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        agent.set(key, str(port))
    else:
        port = int(agent.get(key))
    env["MASTER_PORT"] = str(port)
    env["TORCHELASTIC_USE_AGENT_STORE"] = "False"
    return watch
