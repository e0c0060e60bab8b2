"""TensorFlow's other names for strategy methods, so code written for ``tf.distribute`` runs unchanged.

Each replica is a process here (not a thread of one process, as in TensorFlow's MirroredStrategy), so a
"per-replica" value is simply this replica's value: ``experimental_local_results(v)`` is ``(v,)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from allgpu.strategies.base.extended import StrategyExtended

class TFNames:
    """Aliases mixed into :class:`allgpu.strategies.base.strategy.Strategy`; each says which method it stands for."""

    @property
    def extended(self) -> StrategyExtended:
        """``tf.distribute.Strategy.extended``: ``update``, ``reduce_to``, ``batch_reduce_to`` (collectives),
        ``worker_devices``, ``should_checkpoint`` ... (:class:`allgpu.strategies.base.extended.StrategyExtended`)."""
        return StrategyExtended(self)

    def experimental_distribute_dataset(self, dataset, global_batch_size: int | None = None, *, options=None,
                                        **kwargs):
        """Alias of :meth:`distribute_dataset`, under ``tf.distribute``'s name. ``options`` (TensorFlow's
        ``InputOptions``) must be None: allgpu prefetches each replica's batches to its device itself.

        Raises:
            UnsupportedError: ``options`` given (``allgpu migrate`` writes ``InputOptions(...)`` as None).
        """
        if options is not None:
            from allgpu.errors import UnsupportedError

            raise UnsupportedError(f"experimental_distribute_dataset(..., options={type(options).__name__}(...)): "
                                   "TensorFlow's InputOptions steer its own input pipeline; allgpu prefetches each "
                                   "replica's batches to its device with pinned memory. Fix: remove options= "
                                   "(`allgpu migrate` writes InputOptions(...) as None).")
        return self.distribute_dataset(dataset, global_batch_size, **kwargs)

    def experimental_distribute_datasets_from_function(self, dataset_fn: Callable):
        """Alias of :meth:`distribute_datasets_from_function` (TensorFlow 2.2-2.3's name)."""
        return self.distribute_datasets_from_function(dataset_fn)

    def experimental_run_v2(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Alias of :meth:`run` (TensorFlow 2.0-2.1's name)."""
        return self.run(fn, args=args, kwargs=kwargs)

    def experimental_local_results(self, value: Any) -> tuple:
        """The values of ``value`` held by this process: ``(value,)``, one replica per process.

        ``tf.distribute.Strategy.experimental_local_results`` returns one entry per local replica; allgpu runs one
        replica per process, so the tuple has one entry. For every replica's value use :meth:`gather`
        (a collective) or :meth:`reduce`.
        """
        return (value,)

    def experimental_distribute_values_from_function(self, value_fn: Callable) -> Any:
        """``value_fn(ValueContext)`` for this replica: TensorFlow's way of giving each replica its own value.

        The context has ``replica_id_in_sync_group`` and ``num_replicas_in_sync``
        (``tf.distribute.experimental.ValueContext``). Local: nothing is communicated.
        """
        return value_fn(ValueContext(self.replica_id_in_sync, self.num_replicas_in_sync))


@dataclass(frozen=True)
class ValueContext:
    """This replica's place, for :meth:`TFNames.experimental_distribute_values_from_function`."""

    replica_id_in_sync_group: int
    num_replicas_in_sync: int
