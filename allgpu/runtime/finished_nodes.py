"""Nodes that cannot follow a restart of ``allgpu run`` with fixed node ranks (static rendezvous).

With the static rendezvous each node's launcher restarts on its own (:mod:`allgpu.runtime.attempt_store`). A node
whose replicas have all exited cleanly is done: its launcher waits in PyTorch's exit barrier (300 s) and then
ends, and restarts nothing. A restart on another node after that waited for the finished replicas: up to the
process group timeout (30 min) when the finished node was a worker, 300 s then a bare store error when it was
node 0. So:

- a replica whose script ended cleanly counts itself in node 0's agent store; the last of its node marks the
  node finished (:func:`note_finished`), with the newest checkpoint its replicas saw;
- a replica of a later attempt looks for such a node (:func:`finished_elsewhere`) before it waits for anything,
  and its attempt watch keeps looking while it waits; it then raises :class:`~allgpu.errors.RestartError`
  naming the finished node, after counting its own node in the exit barrier the finished launcher waits in
  (:func:`release_exit_barrier`), so that launcher ends at once instead of 300 s later;
- node 0's store refusing connections during a restart means node 0's launcher has ended: named at once
  (:func:`check_node_zero`), not retried for the store timeout.
"""

from __future__ import annotations

import json
import socket
from typing import Mapping

from allgpu.errors import RestartError

PROBE_TIMEOUT_S = 10.0  # seconds to reach node 0's store before it is named unreachable


def _key(env: Mapping[str, str], name: str) -> str:
    return f"allgpu/{env.get('TORCHELASTIC_RUN_ID', '')}/{name}"


def _ranks(env: Mapping[str, str]) -> tuple[int, int]:
    """This node's global ranks, first and last (the static rendezvous gives each node a contiguous block)."""
    first = int(env["RANK"]) - int(env["LOCAL_RANK"])
    return first, first + int(env["LOCAL_WORLD_SIZE"]) - 1


def note_finished(store, env: Mapping[str, str], checkpoint: str = "") -> None:
    """Count this replica, whose script ended cleanly, in the agent ``store``; the node's last replica to do so
    marks the node finished, and the job's first finished node is kept under ``allgpu/RUN/first_finished_node``
    (one key, so a restarted replica's watch costs one store request a look, whatever the node count).
    ``checkpoint``: the newest-checkpoint sentence (:func:`allgpu.runtime.interrupt.checkpoint_note`) or ``""``.
    Store requests only; not a collective."""
    node, attempt = int(env["GROUP_RANK"]), int(env["TORCHELASTIC_RESTART_COUNT"])
    if checkpoint:
        store.set(_key(env, f"node_checkpoint/{node}"), checkpoint)
    if store.add(_key(env, f"attempt_{attempt}/node_{node}/finished"), 1) != int(env["LOCAL_WORLD_SIZE"]):
        return
    if store.add(_key(env, "finished_nodes"), 1) == 1:  # the first node of the job to finish
        first, last = _ranks(env)
        info = {"node": node, "attempt": attempt, "first": first, "last": last, "host": socket.gethostname()}
        store.set(_key(env, "first_finished_node"), json.dumps(info))


def finished_elsewhere(store, env: Mapping[str, str]) -> dict | None:
    """The job's first finished node when it finished in an earlier attempt than this replica's (a dict with
    ``node``, ``attempt``, ``first``, ``last``, ``host``, ``checkpoint``), or None. A node that finished is never
    restarted, so it cannot be this replica's node, and every node finishing after it did so in the same attempt
    or, restarted later, cannot finish at all. Store requests only."""
    attempt, key = int(env["TORCHELASTIC_RESTART_COUNT"]), _key(env, "first_finished_node")
    if attempt == 0 or not store.check([key]):
        return None
    info = json.loads(store.get(key))
    if info["attempt"] >= attempt:
        return None
    saved = _key(env, f"node_checkpoint/{info['node']}")
    return {**info, "checkpoint": store.get(saved).decode() if store.check([saved]) else ""}


def release_exit_barrier(store, env: Mapping[str, str]) -> None:
    """Count this node (once) in the exit barrier of PyTorch's elastic agents (``_exit_barrier``: every agent
    whose replicas succeeded waits there for all ``GROUP_WORLD_SIZE`` agents, 300 s at most). This node's
    agent will not get there (its replicas fail), so a finished node's launcher can end now. See
    docs/architecture.md (PyTorch internals allgpu relies on)."""
    from torch.distributed import PrefixStore
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.utils.store import _barrier_nonblocking

    try:
        if store.add(_key(env, f"exit_barrier_released/node_{env['GROUP_RANK']}"), 1) == 1:
            agents = PrefixStore(env.get("TORCHELASTIC_RUN_ID", ""), store)  # the static rendezvous's prefix
            _barrier_nonblocking(agents, int(env["GROUP_WORLD_SIZE"]), _TERMINAL_STATE_SYNC_ID)
    except Exception:  # node 0's launcher left the barrier (released by another replica) and took its store along
        pass


def raise_if_finished_elsewhere(store, env: Mapping[str, str]) -> None:
    """Raise :func:`restart_error` (after :func:`release_exit_barrier`) if :func:`finished_elsewhere` finds a
    node."""
    info = finished_elsewhere(store, env)
    if info is not None:
        release_exit_barrier(store, env)
        raise restart_error(env, info)


def restart_error(env: Mapping[str, str], info: Mapping) -> RestartError:
    """The error for a replica of a restarted attempt whose job another node (``info``, from
    :func:`finished_elsewhere`) had already finished."""
    attempt, (first, last) = int(env["TORCHELASTIC_RESTART_COUNT"]), _ranks(env)
    saved = info.get("checkpoint") or (f" allgpu saw no checkpoint saved by node {info['node']}'s replicas (a "
                                       "checkpoint saved by other means is not known to it).")
    return RestartError(
        f"node {env['GROUP_RANK']} (replicas {first}-{last}) began restart attempt {attempt}, but node "
        f"{info['node']} (replicas {info['first']}-{info['last']} on {info['host']}) had already finished cleanly "
        f"in attempt {info['attempt']}: a launcher does not restart replicas that finished, so attempt {attempt} "
        "can never gather the whole job (it would wait for them until the store timeout). The failure that "
        "restarted this node is printed above. Fix: make every replica reach the same end (a replica that "
        "raises after the others have finished, e.g. in its last step, an evaluation or a save only some "
        f"replicas do, fails the job), then run the job again on every node.{saved}"
    )


def check_node_zero(env: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`RestartError` at once when node 0's agent store (``MASTER_ADDR:MASTER_PORT``) refuses
    connections or cannot be reached within ``timeout_s``: node 0's launcher has ended (its store lives as long
    as it does). PyTorch's store client would retry such an address for its whole timeout."""
    address = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
    try:
        socket.create_connection(address, timeout=timeout_s).close()
    except OSError as error:
        attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
        raise RestartError(
            f"node 0's launcher (its store at {address[0]}:{address[1]}) cannot be reached ({error}) as node "
            f"{env.get('GROUP_RANK', '?')} begins attempt {attempt}: node 0's launcher has ended (its replicas "
            "finished, or it stopped), so this node cannot rejoin the job. Fix: make every replica reach the "
            "same end (a replica that raises after the others have finished fails the job), then run the job "
            "again on every node; fit(checkpoint_dir=...) resumes from the newest checkpoint."
        ) from None
