"""A ``tf.data`` dataset given to a Keras model's ``fit`` / ``evaluate`` / ``predict`` under an allgpu strategy.

:func:`tf_data_source` checks the call as Keras and ``tf.distribute`` would (no ``batch_size``, ``y`` or
``sample_weight`` beside a dataset; an infinite dataset needs ``steps_per_epoch`` / ``steps``) and returns a
:class:`~allgpu.keras.shard.ShardedInput` source reading this replica's share through
:class:`~allgpu.keras.tf_data.split.ReplicaStream`. A partial last global batch is split near-equally and each
replica's gradient is weighted by its share (as for arrays), so N replicas equal one at the same global batch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from allgpu.errors import InputError
from allgpu.keras.shard import _Source
from allgpu.keras.tf_data.distributed import to_torch
from allgpu.keras.tf_data.facts import check_finite, read_facts
from allgpu.keras.tf_data.runtime import limit_tensorflow
from allgpu.keras.tf_data.split import ReplicaStream


class TFDataSource(_Source):
    """This replica's ``(global batch size, slice)`` pairs from a ``tf.data`` dataset; each epoch a new pass
    (so the pipeline's ``shuffle`` reshuffles, as in Keras)."""

    def __init__(self, stream: ReplicaStream):
        self.stream = stream
        self.num_batches = stream.num_batches
        self.global_batch_size = stream.global_batch_size
        self.partial = 0  # a partial last batch is only known when read; Keras counts it as a step either way

    def epoch(self, epoch: int) -> Iterator[tuple[int, Any]]:
        return ((size, to_torch(batch)) for size, batch in self.stream.epoch())

    def peek(self) -> Any:
        return to_torch(self.stream.peek())


def tf_data_source(dataset, y, sample_weight, batch_size, *, steps, steps_argument: str, what: str,
                   num_replicas: int, rank: int, local_replicas: int, all_reduce: Callable,
                   policy: str | None = None) -> TFDataSource:
    """Build the Keras source for ``dataset`` on this replica (a collective under ``FILE``/``AUTO``).

    Args:
        steps / steps_argument / what: the call's ``steps_per_epoch`` or ``steps`` and its name, and what would
            not end (``"fit"``), for the infinite-dataset error.
        policy: overrides the dataset's auto-shard policy (``predict`` reads ``"DATA"``: outputs in input order).

    Raises:
        InputError: ``y``, ``sample_weight`` or ``batch_size`` passed beside a dataset; an infinite dataset without
            steps; an unbatched dataset; a global batch that does not divide among the replicas.
    """
    if y is not None or sample_weight is not None:
        raise InputError(f"y / sample_weight cannot be passed with a tf.data.Dataset as x (as in Keras): the dataset "
                         "must yield (x, y) or (x, y, sample_weight) batches itself.")
    if batch_size is not None:
        raise InputError(f"batch_size={batch_size} cannot be passed with a tf.data.Dataset (as in Keras): its "
                         ".batch(B) is the global batch, which allgpu splits across the replicas. Fix: drop "
                         "batch_size=.")
    facts = read_facts(dataset)
    check_finite(facts, steps, what, steps_argument)
    threads = limit_tensorflow(local_replicas)
    return TFDataSource(ReplicaStream(dataset, facts, num_replicas, rank, all_reduce=all_reduce, threads=threads,
                                      policy=policy))
