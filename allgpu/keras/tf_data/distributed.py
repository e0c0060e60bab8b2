"""``strategy.distribute_dataset`` / ``experimental_distribute_dataset`` and ``distribute_datasets_from_function``
given a ``tf.data`` dataset: this replica's batches as torch tensors on its device.

``distribute_dataset(dataset)`` splits as ``tf.distribute.Strategy.experimental_distribute_dataset`` does (see
:mod:`allgpu.keras.tf_data` for the auto-shard policies): each step a replica gets ``B / N`` examples of the
global batch B that ``dataset.batch(B)`` declares. A partial last global batch (``batch(B)`` without
``drop_remainder=True``) is split near-equally, sizes differing by at most one, as TensorFlow splits it; with a
per-replica *mean* loss that last step weighs replicas' examples slightly unequally, so for exact one-replica
equivalence use ``drop_remainder=True`` or ``allgpu.compute_average_loss(per_example_loss, B)``.
``distribute_datasets_from_function(fn)``: ``fn(input_context)`` returns this replica's pipeline, already
sharded and batched per replica (as in TensorFlow); its batches are delivered unchanged.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from allgpu.core.data import InputContext, PerReplicaInput
from allgpu.errors import ArgumentError, DatasetTypeError
from allgpu.keras.tf_data.facts import read_facts
from allgpu.keras.tf_data.runtime import limit_tensorflow, with_thread_limit
from allgpu.keras.tf_data.split import ReplicaStream


def to_torch(batch: Any) -> Any:
    """Nested NumPy arrays -> torch tensors (CPU, sharing memory where NumPy allows); dicts, tuples, lists and
    named tuples keep their shape; strings (object arrays, bytes) stay as they are."""
    if isinstance(batch, np.ndarray):
        return batch if batch.dtype.kind in "OSU" else torch.from_numpy(batch if batch.flags.writeable else batch.copy())
    if isinstance(batch, np.generic):
        return torch.as_tensor(batch) if batch.dtype.kind not in "OSU" else batch
    if isinstance(batch, dict):
        return {k: to_torch(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        items = [to_torch(v) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


class _SplitBatches:
    """Iterating runs one epoch of a :class:`ReplicaStream`, as torch batches; ``len`` is its steps per epoch."""

    def __init__(self, stream: ReplicaStream):
        self.stream = stream

    def __iter__(self) -> Iterator:
        return (to_torch(batch) for _, batch in self.stream.epoch())

    def __len__(self) -> int:
        if self.stream.num_batches is None:
            raise DatasetTypeError("this tf.data dataset has no known length (infinite, filtered or sharded by file)")
        return self.stream.num_batches


class _WholeBatches(_SplitBatches):
    """A replica's own pipeline (``distribute_datasets_from_function``): its batches unchanged, as torch."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self) -> Iterator:
        return (to_torch(batch) for batch in self.dataset.as_numpy_iterator())

    def __len__(self) -> int:
        count = int(self.dataset.cardinality())
        if count < 0:
            raise DatasetTypeError("this tf.data dataset has no known length (it is infinite or filtered)")
        return count


def _all_reduce(strategy):
    return lambda values, op: strategy.reduce(op, torch.tensor(values, dtype=torch.int64)).tolist()


def distribute_tf_dataset(strategy, dataset, global_batch_size, options: dict) -> PerReplicaInput:
    """``strategy.distribute_dataset(dataset)`` for a ``tf.data`` dataset; a collective under ``FILE``/``AUTO``.

    Args:
        global_batch_size: None, TensorFlow's ``tf.distribute.InputOptions`` (accepted, as the second argument of
            ``experimental_distribute_dataset``), or the dataset's own batch size.
        options: the torch-dataset options of ``distribute_dataset`` (``shuffle``, ``seed``, ...): all must be unset.

    Returns:
        A :class:`~allgpu.core.data.PerReplicaInput` (iterate once per epoch; each iteration is a new pass of the
        pipeline) with ``global_batch_size`` and ``per_replica_batch_size`` attributes.

    Raises:
        ArgumentError: an option that belongs in the pipeline, or a ``global_batch_size`` other than the dataset's.
        InputError: not batched, or a batch that does not divide among the replicas.
    """
    given = {k: v for k, v in options.items() if v is not None and not (k == "seed" and v == 0)}
    if given:
        raise ArgumentError(f"distribute_dataset({', '.join(f'{k}={v!r}' for k, v in given.items())}) with a "
                            "tf.data.Dataset: the pipeline decides these (.shuffle(buffer, seed=...), "
                            ".batch(B, drop_remainder=...), num_parallel_calls). Fix: drop the arguments.")
    facts = read_facts(dataset)
    if isinstance(global_batch_size, int) and global_batch_size != facts.global_batch_size:
        raise ArgumentError(f"global_batch_size={global_batch_size}, but the tf.data dataset is batched by "
                            f"{facts.global_batch_size}, which tf.distribute takes as the global batch. Fix: "
                            f".batch({global_batch_size}) in the pipeline and no global_batch_size=.")
    threads = limit_tensorflow(strategy._local_replicas())
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    stream = ReplicaStream(dataset, facts, n, rank, all_reduce=_all_reduce(strategy), threads=threads)
    result = PerReplicaInput(_SplitBatches(stream), strategy.device, InputContext(n, rank, n))
    result.global_batch_size = stream.global_batch_size
    result.per_replica_batch_size = None if stream.global_batch_size is None else stream.global_batch_size // n
    return result


def per_replica_tf_dataset(strategy, dataset, context: InputContext) -> PerReplicaInput:
    """What ``distribute_datasets_from_function`` returns when ``dataset_fn`` gives a ``tf.data`` dataset."""
    threads = limit_tensorflow(strategy._local_replicas())
    return PerReplicaInput(_WholeBatches(with_thread_limit(dataset, threads)), strategy.device, context)
