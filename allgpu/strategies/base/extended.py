"""``strategy.extended``: the members of ``tf.distribute.StrategyExtended`` that training code calls.

Measured on public TensorFlow training code (``docs/tf_names_usage.md``), the members used are the cross-replica
half of ``ReplicaContext.merge_call``: an exponential moving average of the weights or a copy between variables
written as ``merge_call(fn)`` where ``fn(strategy, ...)`` calls ``strategy.extended.reduce_to`` /
``batch_reduce_to`` then ``strategy.extended.update``; and the questions ``worker_devices``,
``parameter_devices``, ``should_checkpoint`` and ``should_save_summary``.

One replica per process: TensorFlow calls ``merge_fn`` once, in one thread, with every replica's values; here every
replica's process calls it with its own values, at the same point of the program (SPMD). The reductions are
therefore collectives (every replica calls them, in the same order) and ``update`` changes this replica's copy
of a variable with the value every replica computed alike, so the copies stay identical as TensorFlow's
mirrored copies do.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from allgpu.errors import ArgumentTypeError
from allgpu.strategies.base.checks import op_name


def tf_device_name(device: torch.device, task: int) -> str:
    """``torch.device("cuda:1")`` on replica 3 -> ``"/job:worker/replica:0/task:3/device:GPU:1"`` (TensorFlow's
    full spelling; one task per replica). Local."""
    kind = {"cuda": "GPU", "cpu": "CPU"}.get(device.type, device.type.upper())
    return f"/job:worker/replica:0/task:{task}/device:{kind}:{device.index or 0}"


class StrategyExtended:
    """``strategy.extended`` (``tf.distribute.StrategyExtended``) for one replica per process.

    Attributes:
        strategy: the strategy it extends (``tf.distribute``'s ``_container_strategy()``).
    """

    def __init__(self, strategy):
        self.strategy = strategy

    def __repr__(self) -> str:
        return f"StrategyExtended({self.strategy!r})"

    # -- questions (local) ---------------------------------------------------------------------------------
    @property
    def worker_devices(self) -> tuple[str, ...]:
        """This process's replica devices, TensorFlow-spelled: one entry, ``("/job:worker/replica:0/task:R/
        device:GPU:i",)`` (a process is one replica, as a one-GPU worker of ``MultiWorkerMirroredStrategy``).
        Under TensorFlow's single-process ``MirroredStrategy`` it listed every local GPU: code that takes
        ``len(worker_devices)`` as the number of replicas should read ``strategy.num_replicas_in_sync``. Local."""
        return (tf_device_name(self.strategy.device, self.strategy.replica_id_in_sync),)

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        """Where this process keeps the variables: ``CentralStorageStrategy``'s central device, else this
        replica's device (as :attr:`worker_devices`). Local."""
        central = getattr(self.strategy, "central_device", None)
        if central is not None:
            return (tf_device_name(torch.device(central), self.strategy.replica_id_in_sync),)
        return self.worker_devices

    @property
    def should_checkpoint(self) -> bool:
        """True on every replica: allgpu's checkpoint saves (``allgpu.checkpoint``, its ``Checkpoint`` and
        ``CheckpointManager``) are collectives that replica 0 writes, so every replica must call them; a save
        guarded by ``if strategy.extended.should_checkpoint:`` then runs everywhere, as it must. (TensorFlow
        answers True on the chief only and lets other workers save to temporary directories.) Local."""
        return True

    @property
    def should_save_summary(self) -> bool:
        """True on replica 0 only: summaries (TensorBoard events) are written once, by the chief. Local."""
        return self.strategy.replica_id_in_sync == 0

    # -- cross-replica computation -----------------------------------------------------------------------
    def reduce_to(self, reduce_op, value: Any, destinations: Any = None, options: Any = None) -> torch.Tensor:
        """``value`` combined across replicas (``StrategyExtended.reduce_to``), for a cross-replica context such
        as ``merge_call``'s ``merge_fn``.

        Args:
            reduce_op: ``"sum" | "mean" | "max" | "min"`` or ``allgpu.ReduceOp`` / ``tf.distribute.ReduceOp``.
            value: this replica's tensor, number or Keras variable, the same shape on every replica.
            destinations: where TensorFlow puts the result (a variable or device); the result is on this
                replica's device here, where its copy of every variable lives. ``options``: TensorFlow's
                ``CommunicationOptions``, accepted and unused (NCCL on GPUs, Gloo on CPUs).

        Returns:
            a tensor of ``value``'s shape, identical on every replica (``"mean"`` of integers: float64).
            A collective: every replica calls it, in the same order.

        Raises:
            ArgumentError: unknown ``reduce_op``. CollectiveTimeoutError: a replica did not call it in time.
            UnsupportedError: ``ParameterServerStrategy`` (asynchronous workers).
        """
        return self.strategy.reduce(op_name(reduce_op), _tensor(value))

    def batch_reduce_to(self, reduce_op, value_destination_pairs: Iterable, options: Any = None) -> list:
        """:meth:`reduce_to` for a list of ``(value, destinations)`` pairs, in one all-reduce per dtype (the
        values are flattened into one buffer, as TensorFlow packs them). Returns the reduced tensors in order,
        each of its value's shape. A collective; raises as :meth:`reduce_to`, and ``ArgumentTypeError`` for an
        element that is not a ``(value, destinations)`` pair."""
        op = op_name(reduce_op)
        values = []
        for pair in value_destination_pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ArgumentTypeError("batch_reduce_to(reduce_op, value_destination_pairs): each element is a "
                                        f"(value, destinations) pair, e.g. zip(values, variables); got {pair!r}.")
            values.append(_tensor(pair[0]))
        results: list = [None] * len(values)
        for dtype in dict.fromkeys(v.dtype for v in values):  # one buffer per dtype, first-seen order
            picked = [i for i, v in enumerate(values) if v.dtype == dtype]
            flat = torch.cat([values[i].reshape(-1).to(self.strategy.device) for i in picked])
            reduced = self.strategy.reduce(op, flat)
            offset = 0
            for i in picked:
                size = values[i].numel()
                results[i] = reduced[offset:offset + size].reshape(values[i].shape)
                offset += size
        return results

    def update(self, var: Any, fn: Callable, args: tuple = (), kwargs: dict | None = None, group: bool = True):
        """``fn(var, *args, **kwargs)`` on this replica's copy of ``var`` (``StrategyExtended.update``), with
        autograd off, so ``fn`` may write a parameter in place (``var.copy_(v)``, ``var.sub_(...)``) or a Keras
        variable (``var.assign(v)``). Returns ``fn``'s result (``group`` is accepted: there is one copy here).

        Local: no communication. TensorFlow applies ``fn`` to every mirrored copy with the same arguments; here
        each replica applies it to its own copy, so pass arguments every replica holds alike (the output of
        :meth:`reduce_to`, or a constant) to keep the copies identical.

        Raises:
            ArgumentTypeError: ``fn`` not callable, or ``args`` not a tuple/list.
        """
        if not callable(fn):
            raise ArgumentTypeError(f"extended.update(var, fn, args=...): fn must be callable; got {type(fn).__name__}.")
        if not isinstance(args, (tuple, list)):
            raise ArgumentTypeError(f"extended.update(var, fn, args=...) takes a tuple of arguments; got "
                                    f"{type(args).__name__}. Fix: args=(value,) with a trailing comma.")
        with torch.no_grad():
            return fn(var, *args, **(kwargs or {}))

    def call_for_each_replica(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """``strategy.run(fn, args, kwargs)``: one replica per process, so "each replica" is this one. Local."""
        return self.strategy.run(fn, args=args, kwargs=kwargs)


def _tensor(value: Any) -> torch.Tensor:
    """A tensor for ``value``: a tensor as it is, a Keras variable's backing tensor, else ``torch.as_tensor``."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    inner = getattr(value, "value", None)  # keras.Variable on the torch backend
    if isinstance(inner, torch.Tensor):
        return inner.detach()
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ArgumentTypeError(f"reduce_to/batch_reduce_to take tensors, numbers or Keras variables; got "
                                f"{type(value).__name__}.") from exc
