"""The default strategy: what ``allgpu.get_strategy()`` returns outside any strategy, as TensorFlow's.

TensorFlow's default strategy is one replica with no distribution: ``scope()`` does nothing, ``run(fn)`` calls
``fn``, ``reduce`` and ``gather`` return this process's value. Code written to run with or without a strategy
(``strategy = tf.distribute.get_strategy()`` in a library) works the same here. It starts no process group, mirrors
nothing and is not an :class:`allgpu.Strategy`: it never communicates.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_map

from allgpu.core.data import InputContext
from allgpu.core.replica_group import ReplicaGroup
from allgpu.errors import ArgumentTypeError
from allgpu.strategies.base.extended import StrategyExtended
from allgpu.strategies.base.replica_context import ReplicaContext
from allgpu.strategies.base.checks import as_tensor, is_nest, op_name
from allgpu.strategies.base.tf_names import ValueContext


class DefaultStrategy:
    """One replica on this process's default device (``torch.get_default_device()``), nothing mirrored."""

    num_replicas_in_sync = 1
    replica_id_in_sync = 0
    is_chief = True

    @property
    def device(self) -> torch.device:
        return torch.get_default_device()

    def __repr__(self) -> str:
        return "DefaultStrategy(one replica, no distribution)"

    @contextlib.contextmanager
    def scope(self) -> Iterator["DefaultStrategy"]:
        """Does nothing (TensorFlow's default ``scope()``); ``has_strategy()`` stays False inside. Local."""
        yield self

    @property
    def extended(self) -> StrategyExtended:
        """``strategy.extended`` of one replica: its reductions return the value, ``update`` applies ``fn``. Local."""
        return StrategyExtended(self)

    def replica_context(self) -> ReplicaContext:
        """A replica context of one: its ``all_reduce`` and ``all_gather`` return the value. Local."""
        return ReplicaContext(self, ReplicaGroup.single(self.device))

    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """``fn(*args, **kwargs)``. Local."""
        if not callable(fn):
            raise ArgumentTypeError(f"run(fn, ...) needs a callable fn; got {type(fn).__name__}.")
        return fn(*args, **(kwargs or {}))

    def reduce(self, op, value: Any, axis: int | None = None) -> torch.Tensor:
        """``value`` as a tensor (one replica: nothing to combine); with ``axis``, reduced along it; a dict or a
        list/tuple holding tensors gives the same structure. Local."""
        op = op_name(op)
        if is_nest(value):
            return tree_map(lambda v: self.reduce(op, v, axis), value)
        tensor = as_tensor(value, None, "strategy.reduce")
        if axis is None:
            return tensor
        if op == "mean" and not tensor.is_floating_point():
            tensor = tensor.double()
        return {"sum": tensor.sum, "mean": tensor.mean, "max": tensor.amax, "min": tensor.amin}[op](axis)

    def gather(self, value: Any, axis: int = 0) -> torch.Tensor:
        """``value`` as a tensor (a number becomes shape ``(1,)``; a dict or a list/tuple holding tensors gives the
        same structure). Local."""
        if is_nest(value):
            return tree_map(lambda v: self.gather(v, axis), value)
        tensor = as_tensor(value, None, "strategy.gather")
        return tensor.reshape(1) if tensor.dim() == 0 else tensor

    def experimental_local_results(self, value: Any) -> tuple:
        """``(value,)``."""
        return (value,)

    def experimental_distribute_dataset(self, dataset, global_batch_size: int | None = None, **kwargs):
        """The dataset itself, as TensorFlow's default strategy returns it."""
        return dataset

    distribute_dataset = experimental_distribute_dataset

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], Any]):
        """``dataset_fn(InputContext(1, 0, 1))``."""
        return dataset_fn(InputContext(1, 0, 1))

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def experimental_distribute_values_from_function(self, value_fn: Callable) -> Any:
        """``value_fn(ValueContext(0, 1))``."""
        return value_fn(ValueContext(0, 1))

    def barrier(self) -> None:
        """Nothing to wait for."""


_DEFAULT: list = []
_LOCK = threading.Lock()


def default_strategy() -> DefaultStrategy:
    """The process's one default strategy (TensorFlow's is one object too)."""
    with _LOCK:
        if not _DEFAULT:
            _DEFAULT.append(DefaultStrategy())
        return _DEFAULT[0]
