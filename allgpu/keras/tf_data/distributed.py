"""``strategy.distribute_dataset`` / ``experimental_distribute_dataset`` and ``distribute_datasets_from_function``
given a ``tf.data`` dataset: this replica's batches as torch tensors on its device.

``distribute_dataset(dataset)`` splits as ``tf.distribute.Strategy.experimental_distribute_dataset`` does (see
:mod:`allgpu.keras.tf_data` for the auto-shard policies): each step a replica gets ``B / N`` examples of the
global batch B that ``dataset.batch(B)`` declares. A short last global batch (``batch(B)`` without
``drop_remainder=True``) is split near-equally (a replica may get none, as in TensorFlow) and, as for torch
datasets (:class:`allgpu.core.data.DistributedDataset`), the gradient synchroniser's ``weight`` is set for each
delivered batch to the replica's share, so a per-replica mean loss still averages to one replica's.
``distribute_datasets_from_function(fn)``: ``fn(input_context)`` returns this replica's pipeline, already
sharded and batched per replica (as in TensorFlow); its batches are delivered unchanged.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from allgpu.core.data import InputContext, PerReplicaInput, _DeviceFeed
from allgpu.core.element_spec import TensorSpec
from allgpu.core.dist_iterator import DistributedIterator, every_replica_has_one
from allgpu.core.sampler import share_bounds
from allgpu.errors import ArgumentError, DatasetTypeError
from allgpu.keras.tf_data.facts import is_batched, read_facts
from allgpu.keras.tf_data.runtime import limit_tensorflow, with_thread_limit
from allgpu.keras.tf_data.split import ReplicaStream, leading_size


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
    """Iterating runs one epoch of a :class:`ReplicaStream`: ``(gradient weight, torch batch)`` pairs, the weight
    being this replica's share of the global batch times N; ``len`` is its steps per epoch."""

    def __init__(self, stream: ReplicaStream):
        self.stream = stream

    def __iter__(self) -> Iterator:
        n = self.stream.num_replicas
        for size, batch in self.stream.epoch():
            mine = leading_size(batch) if size else 0
            yield (n * mine / size if size else 1.0), to_torch(batch)

    def __len__(self) -> int:
        if self.stream.num_batches is None:
            raise DatasetTypeError("this tf.data dataset has no known length (infinite, filtered or sharded by file)")
        return self.stream.num_batches


class _WholeBatches(_SplitBatches):
    """A replica's own pipeline (``distribute_datasets_from_function``): its batches unchanged, as torch."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self) -> Iterator:
        return ((1.0, to_torch(batch)) for batch in self.dataset.as_numpy_iterator())

    def __len__(self) -> int:
        count = int(self.dataset.cardinality())
        if count < 0:
            raise DatasetTypeError("this tf.data dataset has no known length (it is infinite or filtered)")
        return count


def spec_of_tf(element_spec: Any, num_replicas: int | None) -> Any:
    """A ``tf.data`` ``element_spec`` as :class:`~allgpu.core.element_spec.TensorSpec` with torch dtypes (NumPy's for
    strings); with ``num_replicas`` (a split global batch) the leading dimension is divided among the replicas, as
    ``tf.distribute`` rebatches it (None stays None: the last batch may be short)."""
    import tensorflow as tf

    def convert(spec):
        if not isinstance(spec, tf.TensorSpec):
            return spec
        shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else None
        if num_replicas and shape:
            shape = (None if shape[0] is None else shape[0] // num_replicas, *shape[1:])
        numpy_dtype = np.dtype(spec.dtype.as_numpy_dtype)
        return TensorSpec(shape, numpy_dtype if numpy_dtype.kind in "OSU" else torch.from_numpy(
            np.zeros(0, numpy_dtype)).dtype)

    return tf.nest.map_structure(convert, element_spec)


class TFDataInput(PerReplicaInput):
    """This replica's batches of a ``tf.data`` dataset on its device; iterate once per epoch (each iteration a new
    pass of the pipeline). Each delivered batch sets the gradient synchroniser's ``weight`` for its backward."""

    def __init__(self, batches: _SplitBatches, device, context: InputContext, sync, agree=None, dataset=None):
        super().__init__(batches, device, context, agree)
        self._sync = sync
        self._dataset = dataset  # the pipeline as given, for element_spec
        self._split = isinstance(batches, _SplitBatches) and not isinstance(batches, _WholeBatches)
        self.global_batch_size: int | None = None
        self.per_replica_batch_size: int | None = None

    @property
    def element_spec(self) -> Any:
        """This replica's batches' structure: the pipeline's ``element_spec`` as
        :class:`~allgpu.core.element_spec.TensorSpec` (torch dtypes), the batch dimension this replica's share
        when every global batch has the same size (``batch(B, drop_remainder=True)``), else None. Local."""
        return spec_of_tf(self._dataset.element_spec, self.context.num_replicas_in_sync if self._split else None)

    def __iter__(self) -> DistributedIterator:
        self.feed = _DeviceFeed(self.source, self.device)
        return DistributedIterator(self._deliver(self.feed), self.agree)

    def _deliver(self, feed) -> Iterator:
        try:
            for weight, batch in feed:
                if self._sync is not None:
                    self._sync.weight = weight
                yield batch
        finally:
            if self._sync is not None:
                self._sync.weight = 1.0


def _all_reduce(strategy):
    return lambda values, op: strategy.reduce(op, torch.tensor(values, dtype=torch.int64)).tolist()


def distribute_tf_dataset(strategy, dataset, global_batch_size, options: dict) -> TFDataInput:
    """``strategy.distribute_dataset(dataset)`` for a ``tf.data`` dataset; a collective under ``FILE``/``AUTO``.

    Args:
        global_batch_size: None, TensorFlow's ``tf.distribute.InputOptions`` (accepted, as the second argument of
            ``experimental_distribute_dataset``), or the dataset's own batch size.
        options: the torch-dataset options of ``distribute_dataset`` (``shuffle``, ``seed``, ...): all must be unset.

    Returns:
        A :class:`TFDataInput` (a :class:`~allgpu.core.data.PerReplicaInput`) with ``global_batch_size`` and
        ``per_replica_batch_size``.

    Raises:
        ArgumentError: an option that belongs in the pipeline, or a ``global_batch_size`` other than the dataset's.
        InputError: not batched (on more than one replica: at one, TensorFlow's default too, the elements are
            delivered as they are), or a batch that does not divide among the replicas.
    """
    given = {k: v for k, v in options.items() if v is not None and not (k == "seed" and v == 0)}
    if given:
        raise ArgumentError(f"distribute_dataset({', '.join(f'{k}={v!r}' for k, v in given.items())}) with a "
                            "tf.data.Dataset: the pipeline decides these (.shuffle(buffer, seed=...), "
                            ".batch(B, drop_remainder=...), num_parallel_calls). Fix: drop the arguments.")
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    threads = limit_tensorflow(strategy._local_replicas())
    if n == 1 and not isinstance(global_batch_size, int) and not is_batched(dataset):
        # one replica: TensorFlow delivers an unbatched dataset's elements as they are; there is nothing to split
        return TFDataInput(_WholeBatches(with_thread_limit(dataset, threads)), strategy.device, InputContext(1, 0, 1),
                           strategy.gradient_sync, dataset=dataset)
    facts = read_facts(dataset)
    if isinstance(global_batch_size, int) and global_batch_size != facts.global_batch_size:
        raise ArgumentError(f"global_batch_size={global_batch_size}, but the tf.data dataset is batched by "
                            f"{facts.global_batch_size}, which tf.distribute takes as the global batch. Fix: "
                            f".batch({global_batch_size}) in the pipeline and no global_batch_size=.")
    stream = ReplicaStream(dataset, facts, n, rank, all_reduce=_all_reduce(strategy), threads=threads,
                           bounds=share_bounds)
    result = TFDataInput(_SplitBatches(stream), strategy.device, InputContext(n, rank, n), strategy.gradient_sync,
                         dataset=dataset)
    result.global_batch_size = stream.global_batch_size
    result.per_replica_batch_size = None if stream.global_batch_size is None else stream.global_batch_size // n
    return result


def per_replica_tf_dataset(strategy, dataset, context: InputContext) -> TFDataInput:
    """What ``distribute_datasets_from_function`` returns when ``dataset_fn`` gives a ``tf.data`` dataset."""
    threads = limit_tensorflow(strategy._local_replicas())
    return TFDataInput(_WholeBatches(with_thread_limit(dataset, threads)), strategy.device, context, None,
                       every_replica_has_one(strategy), dataset=dataset)

