"""``tf.distribute.ReplicaContext``: one replica's view inside ``strategy.run``, with differentiable collectives
(:mod:`allgpu.core.replica_collectives`). ``allgpu.get_replica_context()`` returns it
(:mod:`allgpu.strategies.base.context`)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from allgpu.core import replica_collectives
from allgpu.core.replica_group import ReplicaGroup
from allgpu.errors import ArgumentTypeError, UnsupportedError
from allgpu.strategies.base import current
from allgpu.strategies.base.checks import op_name


class ReplicaContext:
    """One replica's view inside ``strategy.run`` (``tf.distribute.ReplicaContext``).

    Attributes:
        strategy: the strategy running this replica.
        replica_id_in_sync_group: this replica's index, ``0 <= id < num_replicas_in_sync`` (its rank).
        num_replicas_in_sync: replicas in the job (world size).
    """

    def __init__(self, strategy, group: ReplicaGroup, refuse: str | None = None):
        self.strategy = strategy
        self._group = group
        self._refuse = refuse  # why this strategy's replicas cannot meet in a collective (asynchronous workers)

    @property
    def replica_id_in_sync_group(self) -> int:
        return self.strategy.replica_id_in_sync

    @property
    def num_replicas_in_sync(self) -> int:
        return self.strategy.num_replicas_in_sync

    def __repr__(self) -> str:
        return f"ReplicaContext(replica {self.replica_id_in_sync_group} of {self.num_replicas_in_sync})"

    def all_reduce(self, reduce_op, value: Any) -> Any:
        """``value`` combined across replicas: a tensor or number, or a list/tuple/dict of them (one all-reduce per
        tensor), each the same shape on every replica; returns the same structure of tensors on this replica's
        device, identical on every replica.

        ``reduce_op``: ``"sum" | "mean" | "max" | "min"`` or ``allgpu.ReduceOp`` / ``tf.distribute.ReduceOp``.
        Differentiable as TensorFlow's (:mod:`allgpu.core.replica_collectives`): sync batch-norm moments
        all-reduced here train as one replica over the global batch. A collective, and so is its backward: every
        replica must call it, in the same order.

        Raises:
            ArgumentError: unknown ``reduce_op``. CollectiveTimeoutError: a replica did not call it in time.
            UnsupportedError: ``ParameterServerStrategy``, whose workers are asynchronous.
        """
        op = op_name(reduce_op)
        self._check_collective("all_reduce")
        return tree_map(lambda v: replica_collectives.all_reduce(self._group, self._tensor(v), op), value)

    def all_gather(self, value: Any, axis: int) -> Any:
        """Every replica's ``value`` concatenated along ``axis`` in replica order: for a tensor of shape
        ``(b, d)`` and ``axis=0``, shape ``(sum of every replica's b, d)``; a list/tuple/dict of tensors gives the
        same structure. Sizes along ``axis`` may differ; other dimensions must match. Differentiable (the
        gradient of a replica's slice is the sum of every replica's incoming gradient for it, as TensorFlow's):
        SimCLR's negatives gathered across replicas give the gradients of one replica at the global batch.
        A collective (two all-gathers; its backward one all-reduce).

        Raises:
            ArgumentTypeError: ``axis`` not an int. CollectiveTimeoutError: a replica did not call it in time.
            UnsupportedError: ``ParameterServerStrategy``, whose workers are asynchronous.
        """
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise ArgumentTypeError(f"all_gather(value, axis): axis must be an int, e.g. axis=0; got {axis!r}.")
        self._check_collective("all_gather")
        return tree_map(lambda v: replica_collectives.all_gather(self._group, self._tensor(v), axis), value)

    def merge_call(self, merge_fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """``merge_fn(strategy, *args, **kwargs)`` in the cross-replica context, returning its result
        (``tf.distribute.ReplicaContext.merge_call``).

        Inside ``merge_fn`` ``allgpu.in_cross_replica_context()`` is True and ``get_replica_context()`` None, as
        in TensorFlow; the replica context comes back when it returns. TensorFlow runs ``merge_fn`` once with
        every replica's ``args``; here each replica is a process, so every replica runs it with its own ``args``,
        and the cross-replica reductions inside (``strategy.reduce``, ``strategy.extended.reduce_to`` /
        ``batch_reduce_to``) meet the other replicas' calls: an EMA written as TensorFlow's
        ``merge_call(fn)`` -> ``extended.reduce_to(MEAN, value, var)`` -> ``extended.update(var, ...)`` keeps
        every replica's copy identical. Local itself; every replica must call it, since ``merge_fn``'s
        collectives are collectives.

        Raises:
            ArgumentTypeError: ``merge_fn`` not callable, or ``args`` not a tuple/list.
        """
        if not callable(merge_fn):
            raise ArgumentTypeError(f"merge_call(merge_fn, ...) needs a callable; got {type(merge_fn).__name__}.")
        if not isinstance(args, (tuple, list)):
            raise ArgumentTypeError(f"merge_call(merge_fn, args=...) takes a tuple of arguments; got "
                                    f"{type(args).__name__}. Fix: args=(value,) with a trailing comma.")
        with current.entered(self.strategy, replica=False):
            return merge_fn(self.strategy, *args, **(kwargs or {}))

    def _check_collective(self, name: str) -> None:
        if self._refuse:
            raise UnsupportedError(f"ReplicaContext.{name} under {type(self.strategy).__name__}: {self._refuse}")

    def _tensor(self, value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value if value.device == self._group.device else value.to(self._group.device)
        try:
            return torch.as_tensor(value, device=self._group.device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(f"ReplicaContext collectives take tensors or numbers; got "
                                    f"{type(value).__name__}.") from exc
