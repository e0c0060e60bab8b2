"""What ``iter(distributed_dataset)`` returns: a ``tf.distribute.DistributedIterator``.

TensorFlow's distributed iterators have ``get_next()`` and ``get_next_as_optional()`` beside ``next()``; TensorFlow's
input tutorial ends a loop of ``steps_per_loop`` steps with ``optional = iterator.get_next_as_optional()`` then
``if not optional.has_value(): break``. Here the iterator wraps this replica's batches (already on its device):

- ``next(it)`` / ``it.get_next()``: the next batch; at the end ``StopIteration`` (``get_next`` raises
  :class:`~allgpu.errors.OutOfRangeError`, a ``StopIteration``, as TensorFlow raises ``OutOfRangeError``);
- ``it.get_next_as_optional()``: an :class:`Optional` holding the next batch, or none at the end. When replicas may
  reach the end at different steps (each reads its own pipeline: ``distribute_datasets_from_function``), every
  replica first agrees (one small all-reduce) whether all still have a batch, so all leave the loop at the same
  step instead of one waiting in the next collective for a replica that left: the iteration ends for every replica
  when the first runs out (a batch the others had is then not delivered), as under ``AutoShardPolicy.FILE``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from allgpu.errors import InputError, OutOfRangeError

_NONE = object()


class Optional:
    """``tf.experimental.Optional``: a value or none. ``has_value()`` is a Python bool here (eager)."""

    def __init__(self, value: Any = _NONE):
        self._value = value

    @staticmethod
    def empty(element_spec=None) -> "Optional":
        """An Optional holding no value."""
        return Optional()

    @staticmethod
    def from_value(value: Any) -> "Optional":
        """An Optional holding ``value``."""
        return Optional(value)

    def has_value(self, name: str | None = None) -> bool:
        """Whether a value is held."""
        return self._value is not _NONE

    def get_value(self, name: str | None = None) -> Any:
        """The value. Raises InputError when none is held (TensorFlow raises ``InvalidArgumentError``)."""
        if self._value is _NONE:
            raise InputError("Optional.get_value() on an empty Optional: the iterator had reached its end. Fix: "
                             "check has_value() first.")
        return self._value


class DistributedIterator:
    """An iterator over this replica's batches with TensorFlow's ``get_next`` / ``get_next_as_optional``.

    Args:
        batches: the replica's batch iterator (one epoch).
        agree: None when every replica reaches the end at the same step (a dataset split by the strategy); else
            ``agree(has_batch) -> bool``, a collective returning whether every replica has one.
    """

    def __init__(self, batches: Iterator, agree: Callable[[bool], bool] | None = None):
        self._batches = batches
        self._agree = agree

    def __iter__(self) -> "DistributedIterator":
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def get_next(self) -> Any:
        """The next batch. Local. Raises OutOfRangeError (a StopIteration) at the end."""
        try:
            return next(self._batches)
        except StopIteration:
            raise OutOfRangeError("get_next(): the distributed dataset has no more batches (end of sequence). Fix: "
                                  "stop after the epoch's steps, or use get_next_as_optional().") from None

    def get_next_as_optional(self) -> Optional:
        """The next batch in an :class:`Optional`, empty at the end. A collective when replicas read their own
        pipelines (see the module docstring); local otherwise."""
        value = next(self._batches, _NONE)
        if self._agree is not None and not self._agree(value is not _NONE):
            value = _NONE
        return Optional(value)


def every_replica_has_one(strategy) -> Callable[[bool], bool] | None:
    """``get_next_as_optional``'s agreement for pipelines each replica reads alone (None for one replica): a
    collective answering whether every replica still has a batch."""
    if strategy.num_replicas_in_sync == 1:
        return None
    return lambda mine: bool(strategy.reduce("min", torch.tensor([int(mine)], dtype=torch.int64)).item())
