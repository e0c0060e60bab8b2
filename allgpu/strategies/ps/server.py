"""The parameter-server side of :class:`~allgpu.strategies.parameter_server.ParameterServerStrategy`.

A parameter-server process holds a shard of the variables and one optimizer over them. Workers call the
functions below through ``torch.distributed.rpc``: ``create`` (worker 0, once), ``pull``, ``push`` (apply a
worker's gradients and return the new values) and ``worker_done``. Updates from different workers are applied
one at a time under a lock, in arrival order, with no barrier between workers: asynchronous SGD as in Dean et
al., "Large Scale Distributed Deep Networks" (NeurIPS 2012) and TensorFlow's ParameterServerStrategy.

RPC calls module-level functions by name, so each parameter-server process keeps its shard in ``_SHARD``.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections import Counter

import torch
import torch.distributed.rpc as rpc


class Shard:
    """Variables of one parameter server, their optimizer, and which workers are still alive."""

    def __init__(self, num_workers: int):
        self.num_workers = num_workers
        self.params: dict[int, torch.nn.Parameter] = {}
        self.optimizer: torch.optim.Optimizer | None = None
        self.cond = threading.Condition()
        self.pushes: Counter = Counter()
        self.last_seen: dict[int, float] = {}
        self.done: set[int] = set()
        self.started = time.monotonic()

    def finished(self, silence_s: float) -> bool:
        """Every worker said it is done, or is silent for ``silence_s`` (dead) while the rest are done."""
        now = time.monotonic()
        alive = [w for w in range(self.num_workers) if w not in self.done
                 and now - self.last_seen.get(w, self.started) < silence_s]
        return not alive and bool(self.done)


_SHARD: Shard | None = None


def start(num_workers: int) -> Shard:
    global _SHARD
    _SHARD = Shard(num_workers)
    return _SHARD


def create(keys: list[int], values: list[torch.Tensor]) -> None:
    with _SHARD.cond:
        for key, value in zip(keys, values):
            _SHARD.params.setdefault(key, torch.nn.Parameter(value.clone()))
        _SHARD.cond.notify_all()


def pull(keys: list[int], timeout_s: float) -> list[torch.Tensor]:
    with _SHARD.cond:
        if not _SHARD.cond.wait_for(lambda: all(k in _SHARD.params for k in keys), timeout=timeout_s):
            raise TimeoutError(f"variables {sorted(set(keys) - set(_SHARD.params))} were never created on this "
                               "parameter server: worker 0 did not leave strategy.scope() in time.")
        return [_SHARD.params[k].detach().clone() for k in keys]


def push(worker: int, keys: list[int], grads: list[torch.Tensor], optimizer_cls, defaults: dict) -> list:
    """Apply ``worker``'s gradients with the shard's optimizer; return the updated values."""
    with _SHARD.cond:
        if _SHARD.optimizer is None:
            _SHARD.optimizer = optimizer_cls(list(_SHARD.params.values()), **defaults)
        for key, grad in zip(keys, grads):
            _SHARD.params[key].grad = grad
        _SHARD.optimizer.step()
        _SHARD.optimizer.zero_grad(set_to_none=True)
        _SHARD.pushes[worker] += 1
        _SHARD.last_seen[worker] = time.monotonic()
        return [_SHARD.params[k].detach().clone() for k in keys]


def heartbeat(worker: int) -> None:
    with _SHARD.cond:
        _SHARD.last_seen[worker] = time.monotonic()


def worker_done(worker: int) -> None:
    with _SHARD.cond:
        _SHARD.done.add(worker)


def stats() -> dict:
    """Updates applied per worker, and the workers that said they are done."""
    with _SHARD.cond:
        return {"pushes": dict(_SHARD.pushes), "done": sorted(_SHARD.done)}


def verdict(silence_s: float) -> str | None:
    """How the job ends, as this server sees it: None while a worker still trains; ``"all done"`` once every
    worker said it is done; ``"lost"`` once the rest are done and the others are silent (dead)."""
    with _SHARD.cond:
        if not _SHARD.finished(silence_s):
            return None
        return "all done" if len(_SHARD.done) == _SHARD.num_workers else "lost"


def leave(all_done: bool, timeout_s: float) -> None:
    """Shut this task's RPC down. When every worker finished, gracefully: every task together (a barrier), so no
    task logs the others' closed connections (tensorpipe's "encountered error when reading incoming request ...:
    eof / pipe closed" warnings, which nothing can be done about). Otherwise locally: a dead worker would never
    reach the barrier."""
    if all_done:
        try:
            rpc.shutdown(graceful=True, timeout=timeout_s)
            return
        except Exception:  # a task vanished during the barrier: the local shutdown already ran (rpc's finally)
            return
    rpc.shutdown(graceful=False)


def serve(shard: Shard, silence_s: float) -> dict:
    """Block until every worker is done or dead; return the final :func:`stats`."""
    while True:
        with shard.cond:
            if shard.finished(silence_s):
                return {"pushes": dict(shard.pushes), "done": sorted(shard.done)}
        time.sleep(0.1)


def run_server(rank: int, world_size: int, task_index: int, num_workers: int, options, silence_s: float) -> None:
    """A parameter-server task's whole life, TensorFlow's ``server.join()``: hold a shard, serve the workers
    until every one is done or silent for ``silence_s`` seconds, then end the process (exit code 0).

    The shard exists before RPC starts, so no worker call can arrive before there is a shard to answer it.
    """
    shard = start(num_workers)
    with warnings.catch_warnings():  # torch's own RPC start-up deprecation notice: nothing a user can act on
        warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
        rpc.init_rpc(f"ps{task_index}", rank=rank, world_size=world_size, rpc_backend_options=options)
    serve(shard, silence_s)
    leave(len(shard.done) == num_workers, min(silence_s, 60.0))
    sys.exit(0)
