"""The replicas of one job: process-group start and the collectives a strategy offers.

A :class:`ReplicaGroup` wraps a ``torch.distributed`` process group (NCCL on CUDA, Gloo on CPU) and adds what
users need when something goes wrong: every collective is entered in the :class:`~allgpu.core.ledger.Ledger`, and a
failed or timed-out one raises an error that names the replica that did not arrive. A world of one has no
process group at all; its collectives return their input.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from allgpu.runtime.gloo_drain import wait_for_gloo_workers
from allgpu.runtime.replicas import peers_stopped
from allgpu.errors import CollectiveTimeoutError, ReplicaFailedError
from allgpu.core.ledger import Ledger, install_exit_record

EXIT_WAIT_S = 10.0
# A Gloo wait longer than this looks in the store, each time again, for a peer that has ended (left the job).
PEER_CHECK_S = 2.0

REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,  # divided by the world size afterwards: Gloo has no AVG
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


_CURRENT: list = []  # the group a strategy placed in this process (at most one process group per process)
# Set when a wait gave up on a Gloo collective whose peer had ended: a Gloo thread stays blocked in it until the
# timeout, and the process group's destructor joins that thread, so this process must end without destroying it.
_ABANDONED: list[bool] = []


def _exit_if_abandoned() -> None:
    """Registered when this module is imported, so it runs after the atexit hooks registered later (the
    checkpoint writer's, the group's close): end the process (status 1: it is failing) before interpreter
    finalisation frees the process group and waits for the blocked thread."""
    if _ABANDONED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


atexit.register(_exit_if_abandoned)


class ReplicaGroup:
    """This process's view of the job: rank, world size, device, and collectives.

    Attributes:
        rank: global replica index (``replica_id_in_sync``).
        world_size: number of replicas (``num_replicas_in_sync``).
        device: this replica's ``torch.device``.
        timeout_s: collective timeout in seconds.
        local_world_size: replicas on this machine.
    """

    def __init__(self, rank: int, world_size: int, device: torch.device, timeout_s: float, owns_group: bool,
                 local_world_size: int | None = None):
        self.rank = rank
        self.world_size = world_size
        self.local_world_size = local_world_size or world_size
        self.device = device
        self.timeout_s = timeout_s
        self.owns_group = owns_group
        store = _default_store() if world_size > 1 else None
        self.ledger = Ledger(store, rank, world_size)
        self.broken = False  # a collective failed: a peer is dead, frozen or gone, and will not leave cleanly

    @classmethod
    def single(cls, device: torch.device) -> "ReplicaGroup":
        """A world of one on ``device``: no process group."""
        return cls(0, 1, device, 0.0, owns_group=False)

    @classmethod
    def from_placement(cls, placement) -> "ReplicaGroup":
        """The group of a placed replica (:class:`allgpu.runtime.placement.Placement`).

        When this process started the process group, it also leaves it at exit (left to interpreter shutdown,
        Gloo's threads can abort the process) and the replicas meet once here, so a replica that never
        connected is a start failure named now, not in the first training step. A collective.
        """
        group = cls(placement.rank, placement.world_size, placement.device, placement.timeout_s,
                    owns_group=placement.owns_group, local_world_size=placement.local_world_size)
        if placement.world_size > 1:
            _CURRENT[:] = [group]
            install_exit_record(group.ledger)  # a replica that raises is named as ended, never as "behind"
        if placement.owns_group:
            atexit.register(group.close)
            group.barrier(where="process-group start")
        elif placement.world_size > 1:
            atexit.register(wait_for_gloo_workers)  # the user's group: still, no abort after the last step
        return group

    @classmethod
    def current(cls) -> "ReplicaGroup":
        """The job's group for collectives issued outside a strategy's methods (checkpoints): the group a
        strategy placed in this process, so they share its ledger and a hang in them is named like any other;
        else a view of ``torch.distributed``'s default group; else a world of one on the CPU."""
        if _CURRENT and dist.is_initialized() and _CURRENT[0].world_size == dist.get_world_size():
            return _CURRENT[0]
        if not (dist.is_available() and dist.is_initialized()):
            return cls.single(torch.device("cpu"))
        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        return cls(dist.get_rank(), dist.get_world_size(), device, 1800.0, owns_group=False)

    # -- collectives -------------------------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", where: str | None = None) -> torch.Tensor:
        """All-reduce ``tensor`` in place with ``op`` in ``"sum" | "mean" | "max" | "min"``; returns it."""
        if self.world_size == 1:
            return tensor
        self._run(f"all_reduce({op})", [tensor], lambda: dist.all_reduce(tensor, op=REDUCE_OPS[op]), where)
        if op == "mean":
            tensor.div_(self.world_size)
        return tensor

    def all_gather(self, tensor: torch.Tensor, where: str | None = None) -> list[torch.Tensor]:
        """Every replica's ``tensor`` (same shape on all), in rank order."""
        if self.world_size == 1:
            return [tensor]
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        self._run("all_gather", [tensor], lambda: dist.all_gather(out, tensor.contiguous()), where)
        return out

    def all_gather_object(self, obj, where: str | None = None) -> list:
        """Every replica's picklable ``obj``, in rank order."""
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size
        self._run("all_gather_object", [], lambda: dist.all_gather_object(out, obj), where)
        return out

    def broadcast_object(self, obj, src: int = 0, where: str | None = None):
        """Replica ``src``'s picklable ``obj`` on every replica."""
        if self.world_size == 1:
            return obj
        box = [obj]
        self._run(f"broadcast_object(src={src})", [], lambda: dist.broadcast_object_list(box, src=src), where)
        return box[0]

    def broadcast(self, tensor: torch.Tensor, src: int = 0, where: str | None = None) -> torch.Tensor:
        """Overwrite ``tensor`` on every replica with replica ``src``'s; returns it."""
        if self.world_size > 1:
            self._run(f"broadcast(src={src})", [tensor], lambda: dist.broadcast(tensor, src), where)
        return tensor

    def barrier(self, where: str | None = None) -> None:
        """Wait until every replica arrives here."""
        if self.world_size > 1:
            self._run("barrier", [], lambda: dist.barrier(), where)

    def run_collective(self, op: str, call, where: str | None = None):
        """Run ``call()``, a library routine made of several collectives (``dcp.save``), as one ledger entry
        named ``op``: if it fails or times out, the error names the replica behind it. Returns its result."""
        if self.world_size == 1:
            return call()
        box = []
        self._run(op, [], lambda: box.append(call()), where)
        return box[0]

    def _run(self, op: str, tensors: list, call, where: str | None) -> None:
        self.ledger.enter(op, [list(t.shape) for t in tensors], where)
        start = time.monotonic()
        try:
            call()
        except Exception as exc:  # Gloo/NCCL raise RuntimeError subclasses with transport-level text
            raise self.explain_failure(exc, time.monotonic() - start) from exc

    def wait(self, work, current: str | None = None) -> None:
        """Wait for ``work``, an asynchronous collective of this group (the gradient all-reduce); ``current`` names
        it when it is not in the ledger.

        On Gloo (CPU replicas) the wait is cut into ``PEER_CHECK_S`` slices; after each, the store says whether a
        peer has ended (left the job or raised). Such a peer can never join this collective: after one more slice
        (a collective it finished may still be completing here) the wait ends with the error naming it, within
        seconds, not at the timeout. Found running pytorch/tutorials' generic_join example (replica 1 with one
        input more than replica 0) launch-free: replica 0 stays alive after its script ends (it watches the
        other replicas and hosts the store), so its connections stay open and replica 1 waited the whole
        ``timeout`` (30 min by default) in its extra backward; under torchrun replica 0's exit closed them.
        NCCL keeps a plain ``wait()`` (a timed wait there blocks the host).

        Raises:
            ReplicaFailedError / CollectiveTimeoutError: as :meth:`explain_failure`.
        """
        start = time.monotonic()
        try:
            if self.device.type != "cpu" or self.ledger.store is None:
                work.wait()
                return
            ended = False
            while True:
                try:
                    work.wait(timeout=timedelta(seconds=PEER_CHECK_S))
                    return
                except RuntimeError as exc:  # Gloo's "Operation timed out!" for a slice; the work goes on
                    if "Operation timed out" not in str(exc) or time.monotonic() - start >= self.timeout_s:
                        raise
                if ended:
                    _ABANDONED.append(True)
                    raise RuntimeError("a peer replica ended while this one waited in the collective")
                ended = self._peer_ended()
        except Exception as exc:
            raise self.explain_failure(exc, time.monotonic() - start, current) from exc

    def _peer_ended(self) -> bool:
        try:
            return bool(self.ledger.exits())
        except Exception:  # the store is gone: the backend reports the peer's end itself
            return False

    def explain_failure(self, exc: BaseException, waited_s: float, current: str | None = None) -> Exception:
        """Turn a backend error into one that names the replicas behind it (from the ledger); ``current`` names
        an unrecorded collective (the gradient all-reduce)."""
        self.broken = True
        text, culprits = self.ledger.explain(waited_s, current)
        raw = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
            return CollectiveTimeoutError(
                f"{text} The collective timed out after {self.timeout_s:g} s (backend said: {raw}). "
                "Fix: make every replica issue the same collectives in the same order; raise timeout= if a "
                "replica is only slow.",
                missing_ranks=culprits,
            )
        if "has ended: it left the job" in text:
            cause = ("It left the job while this replica still issued collectives: a collective called on some "
                     "replicas only (under `if strategy.is_chief:`?), or more training steps here than there "
                     "(uneven numbers of batches). Fix: call it on every replica; give every replica the same "
                     "number of steps (strategy.distribute_dataset, or a DistributedSampler).")
        elif "has ended: it raised" in text:
            cause = "Its traceback is printed above."
        else:
            cause = "A peer replica has probably exited or crashed; its own traceback is printed above."
        return ReplicaFailedError(f"{text} The backend reported: {raw}. {cause}",
                                  rank=culprits[0] if culprits else None)

    def close(self) -> None:
        """Leave the job. Replica 0, which may host the job's store, leaves last (waiting at most
        ``EXIT_WAIT_S``): a peer whose store or Gloo connection vanishes mid-teardown can abort. It does not wait
        after a failed collective or when the process is ending with an uncaught exception: the peers are then
        dead, frozen or waiting for it, and a launcher is about to stop them."""
        if not (self.owns_group and dist.is_initialized()):
            return
        store = self.ledger.store
        failing = self.broken or getattr(sys, "last_value", None) is not None  # set for an uncaught exception
        if store is not None and not failing:
            self.ledger.record_exit("left the job (strategy.close() or the end of its script)")
            try:
                left = store.add("allgpu/exit", 1)
                deadline = time.monotonic() + EXIT_WAIT_S
                while (self.rank == 0 and left < self.world_size and time.monotonic() < deadline
                       and not peers_stopped()):  # replicas this process stopped will never leave
                    time.sleep(0.05)
                    left = store.add("allgpu/exit", 0)
            except Exception:  # the store is gone already: nothing left to wait for
                pass
        if _ABANDONED:  # destroying it would wait for the Gloo thread blocked in the abandoned collective
            self.owns_group = False
            return
        dist.destroy_process_group()
        wait_for_gloo_workers()  # a worker still dropping the last collective's tensors aborts a finalizing process
        self.owns_group = False
        if _CURRENT and _CURRENT[0] is self:
            _CURRENT.clear()


def _default_store():
    try:
        from torch.distributed.distributed_c10d import _get_default_store
    except ImportError:  # a private helper; without it the ledger is off, the collectives still work
        return None
    try:
        return _get_default_store()
    except Exception:
        return None
