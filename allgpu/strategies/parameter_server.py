"""``ParameterServerStrategy``: asynchronous data parallelism (``tf.distribute.experimental.ParameterServerStrategy``).

The job's processes are tasks: ranks ``0 .. W-1`` are workers, the last ``num_ps`` ranks are parameter
servers, all started by a launcher or scheduler with torchrun's variables (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). They talk through ``torch.distributed.rpc``; there is no process group and no
collective, so no global barrier: a slow worker does not hold the others back, and a dead one does not stop them.

- On a parameter server, the constructor serves until every worker is done or silent for ``worker_silence_s``,
  then ends the process (TensorFlow's ``server.join()``): the rest of the script runs only on workers.
- Variables created in ``scope()`` are sharded over the parameter servers (round robin); worker 0 sends their
  initial values, every worker pulls them.
- ``optimizer.step()`` on a worker pushes its gradients to the parameter servers, which apply them with the same
  optimizer class and defaults and return the new values; the worker's own optimizer then has nothing to do.
  Workers compute on parameters that may be a few updates old (asynchronous SGD).
"""

from __future__ import annotations

import atexit
import time
import warnings

import torch
import torch.distributed.rpc as rpc
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from allgpu.errors import ClusterConfigError, UnsupportedError
from allgpu.runtime import env as launch_env
from allgpu.runtime.cluster import from_torchrun_env
from allgpu.runtime.placement import Placement, launched_device
from allgpu.strategies.ps import server as param_server
from allgpu.strategies.base.replica_context import ReplicaContext
from allgpu.strategies.base.strategy import Strategy


class ParameterServerStrategy(Strategy):
    """Workers train asynchronously against variables held by parameter servers.

    Args:
        num_ps: parameter servers: the last ``num_ps`` ranks of the job.
        timeout: seconds an RPC may take (and a worker waits for worker 0's initial values).
        worker_silence_s: a worker not heard from for this long counts as dead (default ``timeout``).

    Raises:
        ClusterConfigError: not started as part of a job, or no rank left for a worker.

    ``reduce``/``gather``, ``fit`` and ``allgpu.checkpoint`` are not available (workers are not in step and the
    optimizer state lives on the servers): each raises :class:`UnsupportedError` at once, naming the alternative.
    """

    unsupported = {
        "fit": "allgpu.fit does not run under ParameterServerStrategy: it reduces metrics across replicas every "
               "epoch, and asynchronous workers are never in step (the job would train an epoch, then fail). Fix: "
               "write the training loop yourself (see the README's ParameterServerStrategy example), or use "
               "MultiWorkerMirroredStrategy / MirroredStrategy with fit.",
        "checkpoint": "allgpu.checkpoint does not work under ParameterServerStrategy: the optimizer state lives on "
                      "the parameter servers, so a worker's checkpoint would lose it, and every worker would write "
                      "the same file. Fix: use MultiWorkerMirroredStrategy or MirroredStrategy for checkpointed "
                      "training; for the weights alone, torch.save(model.state_dict(), path) on worker 0.",
    }

    _no_optimizer_in_backward = "the update happens on the parameter servers, pushed at optimizer.step()."

    def __init__(self, num_ps: int = 1, *, timeout: float = 300.0, worker_silence_s: float | None = None):
        spec = from_torchrun_env()
        if spec is None:
            raise ClusterConfigError(
                "ParameterServerStrategy runs one process per task. Fix: start workers + parameter servers with "
                "torchrun's variables, e.g. `allgpu run --cpu-replicas 3 train.py` for 2 workers and 1 server "
                "(the last num_ps ranks serve), or have your scheduler set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.")
        self.num_ps = num_ps
        self.num_workers = spec.world_size - num_ps
        if num_ps < 1 or self.num_workers < 1:
            raise ClusterConfigError(
                f"num_ps={num_ps} with WORLD_SIZE={spec.world_size} leaves {self.num_workers} workers; "
                "expected at least one parameter server and one worker.")
        self.timeout = timeout
        self.worker_silence_s = worker_silence_s or timeout
        self.is_ps = spec.rank >= self.num_workers
        self.task_index = spec.rank - self.num_workers if self.is_ps else spec.rank
        options = rpc.TensorPipeRpcBackendOptions(init_method="env://", rpc_timeout=timeout)
        if self.is_ps:  # serves until the workers are done, then ends this process: the script stops here
            param_server.run_server(spec.rank, spec.world_size, self.task_index, self.num_workers, options,
                                    self.worker_silence_s)
        with warnings.catch_warnings():  # torch's own RPC start-up deprecation notice: nothing a user can act on
            warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
            rpc.init_rpc(f"worker{self.task_index}", rank=spec.rank, world_size=spec.world_size, rpc_backend_options=options)
        device = launched_device(spec.local_rank, launch_env.read())
        super().__init__(Placement.single(device, timeout), check_mirrored=True)
        self._keys: dict[int, int] = {}  # id(param) -> variable key
        self._params: dict[int, torch.nn.Parameter] = {}
        self._stash: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self._hooks = [register_optimizer_step_pre_hook(self._push), register_optimizer_step_post_hook(self._restore)]
        for ps in range(num_ps):
            rpc.rpc_sync(f"ps{ps}", param_server.heartbeat, args=(self.task_index,))
        atexit.register(self._finish)

    @property
    def num_replicas_in_sync(self) -> int:
        """Workers in the job (each takes ``global_batch_size / num_workers`` examples a step)."""
        return self.num_workers

    @property
    def replica_id_in_sync(self) -> int:
        """This worker's index."""
        return self.task_index

    def _mirror(self, params: list, buffers: list) -> None:
        super()._mirror(params, buffers)
        new = [p for p in params if p.requires_grad and id(p) not in self._keys]
        for p in new:
            self._keys[id(p)] = len(self._keys)
            self._params[id(p)] = p
        for ps, group in self._by_ps(new).items():
            keys = [self._keys[id(p)] for p in group]
            if self.task_index == 0:
                rpc.rpc_sync(f"ps{ps}", param_server.create, args=(keys, [p.detach().cpu() for p in group]))
            values = rpc.rpc_sync(f"ps{ps}", param_server.pull, args=(keys, self.timeout))
            with torch.no_grad():
                for p, value in zip(group, values):
                    p.copy_(value)

    def _by_ps(self, params) -> dict[int, list]:
        out: dict[int, list] = {}
        for p in params:
            out.setdefault(self._keys[id(p)] % self.num_ps, []).append(p)
        return out

    def _push(self, optimizer, args, kwargs) -> None:
        ours = [p for g in optimizer.param_groups for p in g["params"] if id(p) in self._keys and p.grad is not None]
        futures = {}
        for ps, group in self._by_ps(ours).items():
            futures[ps] = (group, rpc.rpc_async(
                f"ps{ps}", param_server.push,
                args=(self.task_index, [self._keys[id(p)] for p in group], [p.grad.detach().cpu() for p in group],
                      type(optimizer), optimizer.defaults)))
        with torch.no_grad():
            for group, future in futures.values():
                for p, value in zip(group, future.wait()):
                    p.copy_(value)
                    self._stash.append((p, p.grad))
                    p.grad = None  # the worker's own optimizer has nothing left to do

    def _restore(self, optimizer, args, kwargs) -> None:
        for p, grad in self._stash:
            p.grad = grad
        self._stash = []

    def server_stats(self, ps: int = 0) -> dict:
        """Updates parameter server ``ps`` applied per worker, and the workers done."""
        return rpc.rpc_sync(f"ps{ps}", param_server.stats)

    def replica_context(self) -> ReplicaContext:
        """This worker's replica context: its ids answer; ``all_reduce``/``all_gather`` raise UnsupportedError
        (asynchronous workers never meet in a collective, as in TensorFlow's parameter-server training)."""
        return ReplicaContext(self, self._group, refuse=(
            "its workers are asynchronous: there is no cross-worker collective. Fix: compute the value on each "
            "worker, or use MirroredStrategy"))

    def reduce(self, op, value, axis=None):
        raise UnsupportedError("ParameterServerStrategy workers are asynchronous: there is no cross-worker "
                                  "reduce. Fix: read values on each worker, or use MirroredStrategy.")

    def gather(self, value, axis=0):
        raise UnsupportedError("ParameterServerStrategy workers are asynchronous: there is no cross-worker "
                                  "gather. Fix: read values on each worker, or use MirroredStrategy.")

    def _finish(self) -> None:
        for hook in self._hooks:
            hook.remove()
        for ps in range(self.num_ps):
            try:
                rpc.rpc_sync(f"ps{ps}", param_server.worker_done, args=(self.task_index,))
            except Exception:  # the server is gone already; nothing to tell it
                pass
        # Leave together with the servers when every worker finished (see ps_server.leave); this waits for the
        # slowest worker, as the servers do, so the process ends when the job does.
        outcome, deadline = None, time.monotonic() + self.worker_silence_s + 5
        while outcome is None and time.monotonic() < deadline:
            try:
                outcome = rpc.rpc_sync("ps0", param_server.verdict, args=(self.worker_silence_s,))
            except Exception:  # the server is gone: nobody left to leave with
                break
            time.sleep(0 if outcome else 0.2)
        param_server.leave(outcome == "all done", min(self.worker_silence_s, 60.0))
