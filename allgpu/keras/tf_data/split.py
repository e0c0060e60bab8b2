"""This replica's batches of a ``tf.data`` dataset, split as ``tf.distribute`` splits it (NumPy; no torch, no Keras).

:class:`ReplicaStream` turns a batched dataset into ``(global batch size, this replica's batch)`` pairs, per the
dataset's auto-shard policy (see :mod:`allgpu.keras.tf_data`). ``DATA`` and ``OFF`` cut each global batch into
N contiguous slices with :func:`slice_bounds`; ``FILE`` applies TensorFlow's own file-sharding rewrite
(``tensorflow.python.distribute.input_ops.auto_shard_dataset``, what ``tf.distribute`` calls) and ``rebatch``.

Replicas stay in step: under ``DATA``/``OFF`` every replica reads the same global batches, so all see the same
number of steps; under ``FILE`` they read different files, so every step the replicas agree (one small all-reduce)
whether all still have a batch, and the epoch ends for all when the first runs out, never leaving one waiting.
"""

from __future__ import annotations

import warnings
import zlib
from typing import Any, Callable, Iterator

import numpy as np

from allgpu.errors import InputError
from allgpu.keras.tf_data.facts import DatasetFacts, check_divisible
from allgpu.keras.tf_data.runtime import import_tensorflow, with_thread_limit

AllReduce = Callable[[list, str], list]  # (integers, "sum" | "max") -> the same integers reduced over replicas
_NOT_FILE_BASED, _TOO_FEW_FILES = "unshardable source", "Could not apply FILE based sharding"
_MAY_READ_FILES = ("Record", "TextLine", "Interleave", "FlatMap", "Load", "Snapshot")  # dataset class names
_warned: set[str] = set()


def may_read_files(dataset) -> bool:
    """Whether any stage of the pipeline could read files (a reader, or an interleave/flat_map that may open them).

    A pipeline of in-memory sources (``from_tensor_slices``, ``range``, ``from_generator``) cannot be sharded by
    file; knowing it spares asking TensorFlow's rewrite, which logs an error from C++ before it gives up.
    """
    try:
        stages, seen = [dataset], []
        while stages:
            stage = stages.pop()
            seen.append(type(stage).__name__)
            stages.extend(stage._inputs())  # tf.data's own walk of a pipeline's input datasets
    except (AttributeError, TypeError):
        return True  # cannot tell: let TensorFlow's rewrite decide
    return any(marker in name for name in seen for marker in _MAY_READ_FILES)


def slice_bounds(n: int, num_replicas: int, rank: int) -> tuple[int, int]:
    """Replica ``rank``'s ``[lo, hi)`` of a global batch of ``n`` examples: contiguous, sizes differing by at most 1.

    With fewer examples than replicas the replicas past the end get one example again (``rank % n``), as
    ``DistributedSampler`` pads, so every replica has a batch to run.
    """
    if n < num_replicas:
        i = rank % n
        return i, i + 1
    base, extra = divmod(n, num_replicas)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def leading_size(batch: Any) -> int:
    """Examples in a (nested) NumPy batch: the first dimension of its first array with one."""
    tf = import_tensorflow()
    for leaf in tf.nest.flatten(batch):
        if getattr(leaf, "ndim", 0):
            return int(leaf.shape[0])
    raise InputError("a tf.data element with no batch dimension: only scalars. Fix: .batch(global_batch_size).")


def _slice(batch: Any, lo: int, hi: int) -> Any:
    tf = import_tensorflow()
    return tf.nest.map_structure(lambda a: a[lo:hi] if getattr(a, "ndim", 0) else a, batch)


def _fingerprint(batch: Any) -> int:
    tf = import_tensorflow()
    crc = 0
    for leaf in tf.nest.flatten(batch):
        crc = zlib.crc32(np.ascontiguousarray(leaf).tobytes() if isinstance(leaf, np.ndarray) else repr(leaf).encode(), crc)
    return crc


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=4)


class ReplicaStream:
    """This replica's share of a batched ``tf.data`` dataset; ``epoch()`` runs one pass over it.

    Args:
        dataset: a batched ``tf.data.Dataset``; each element is one global batch (nested tuples/dicts of tensors).
        facts: what :func:`~allgpu.keras.tf_data.facts.read_facts` read from it.
        num_replicas / rank: N and this replica's index.
        all_reduce: combines integers across replicas (a collective); None for one replica.
        threads: the tf.data thread pool of this replica (:func:`~allgpu.keras.tf_data.runtime.limit_tensorflow`).
        policy: overrides ``facts.policy`` (``predict`` reads ``DATA`` to return outputs in input order).
        bounds: ``(n, N, r) -> (lo, hi)``, replica r's slice of a global batch of n: :func:`slice_bounds` (Keras,
            at least one example each) or :func:`allgpu.core.sampler.share_bounds` (a replica may get none).

    Building it is a collective when the policy is ``FILE`` or ``AUTO`` on several replicas (the replicas agree
    whether file sharding works); so is each step under ``FILE``, and the first step of each epoch under ``DATA``
    (a checksum of the first global batch, to warn when replicas' pipelines differ).

    Raises:
        InputError: the global batch does not divide among the replicas; ``FILE`` asked of a pipeline that does
            not read files, or of fewer files than replicas.
    """

    def __init__(self, dataset, facts: DatasetFacts, num_replicas: int, rank: int, *,
                 all_reduce: AllReduce | None = None, threads: int | None = None, policy: str | None = None,
                 bounds: Callable[[int, int, int], tuple[int, int]] = slice_bounds):
        self.facts, self.num_replicas, self.rank, self.bounds = facts, num_replicas, rank, bounds
        self.all_reduce = all_reduce if num_replicas > 1 else None
        self.dataset = with_thread_limit(dataset, threads) if threads else dataset
        self.global_batch_size = facts.global_batch_size
        self._pending: list = []  # batches read ahead (by peek or the FILE probe), delivered first
        self._iterator: Iterator | None = None
        self.mode = "DATA" if num_replicas == 1 else self._mode(policy or facts.policy)
        if self.global_batch_size is not None and num_replicas > 1:
            check_divisible(self.global_batch_size, num_replicas)
        per_pass = facts.num_batches
        self.num_batches = None if self.mode == "FILE" or per_pass is None else per_pass * (
            num_replicas if self.mode == "OFF" else 1)

    # -- choosing how to shard ---------------------------------------------------------------------------------
    def _mode(self, policy: str) -> str:
        if policy in ("DATA", "OFF") or (policy == "AUTO" and not may_read_files(self.dataset)):
            return "DATA" if policy == "AUTO" else policy
        code, failure, error = 0, "", None
        try:
            self._iterator = self._file_sharded().as_numpy_iterator()
            self._pending = [next(self._iterator)]
        except StopIteration:
            pass  # no file for this replica: the agreement below ends its epochs with the others'
        except Exception as exc:  # noqa: BLE001 - any failure must reach the agreement, or the others would wait
            failure = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            code = 1 if _NOT_FILE_BASED in failure else 2 if _TOO_FEW_FILES in failure else 3
            error = exc if code == 3 else None
            for marker in (_NOT_FILE_BASED, _TOO_FEW_FILES):
                failure = failure[failure.find(marker):] if marker in failure else failure
        worst = self.all_reduce([code * self.num_replicas + self.rank if code else 0], "max")[0]
        if worst // self.num_replicas == 3:
            if error is not None:
                raise error
            raise InputError(f"replica {worst % self.num_replicas} failed reading the tf.data pipeline (its error "
                             "is in its log); this replica stops with it.")
        if worst == 0:
            return "FILE"
        self._iterator, self._pending = None, []
        if policy == "FILE":
            raise InputError(f"AutoShardPolicy.FILE cannot shard this tf.data pipeline by file across "
                             f"{self.num_replicas} replicas ({failure or 'seen on replica ' + str(worst % self.num_replicas)}"
                             "): it needs a file-reading source (TFRecordDataset, TextLineDataset, list_files + "
                             "interleave) with at least one file per replica. Fix: AutoShardPolicy.DATA (or AUTO, "
                             "which falls back to it).")
        if worst // self.num_replicas == 2:  # files, but fewer than replicas (TensorFlow raises here)
            _warn_once("auto", f"AutoShardPolicy.AUTO: the tf.data pipeline reads fewer files than the "
                       f"{self.num_replicas} replicas, so it is sharded by element (DATA), not by file.")
        return "DATA"

    def _file_sharded(self):
        from tensorflow.python.distribute import input_ops  # tf.distribute's own auto-shard rewrite

        tf = import_tensorflow()
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
        sharded = input_ops.auto_shard_dataset(self.dataset.with_options(options), self.num_replicas, self.rank,
                                               self.num_replicas)
        if self.global_batch_size is None:  # not known statically: each batch cut in N, as tf.distribute does then
            from tensorflow.python.data.experimental.ops.distribute import _LegacyRebatchDataset

            return _LegacyRebatchDataset(sharded, self.num_replicas)
        return sharded.rebatch(self.global_batch_size // self.num_replicas)

    # -- reading -----------------------------------------------------------------------------------------------
    def _source(self) -> Iterator:
        if self._iterator is None:
            self._iterator = (self._file_sharded() if self.mode == "FILE" else self.dataset).as_numpy_iterator()
        iterator, pending = self._iterator, self._pending
        self._iterator, self._pending = None, []
        yield from pending
        yield from iterator

    def peek(self) -> Any:
        """This replica's first batch (to build a model from its shapes); consumes nothing."""
        if not self._pending:
            self._iterator = (self._file_sharded() if self.mode == "FILE" else self.dataset).as_numpy_iterator()
            self._pending = [next(self._iterator)]
        batch = self._pending[0]
        if self.mode == "FILE":
            return batch
        size = leading_size(batch)
        lo, hi = slice_bounds(size, self.num_replicas, self.rank)  # at least one example: shapes to build from
        return _slice(batch, lo, hi)

    def epoch(self) -> Iterator[tuple[int, Any]]:
        """One pass: ``(global batch size, this replica's batch)`` pairs; the batch is nested NumPy arrays."""
        if self.mode == "FILE":
            yield from self._file_epoch()
            return
        for step, batch in enumerate(self._source()):
            size = leading_size(batch)
            if step == 0 and self.mode == "DATA":
                self._check_same_data(batch)
            if self.global_batch_size is None and self.num_replicas > 1:
                self.global_batch_size = size
                check_divisible(size, self.num_replicas)
            if self.mode == "OFF":
                for piece in range(self.num_replicas):
                    lo, hi = self.bounds(size, self.num_replicas, piece)
                    if hi > lo:  # every replica has this piece (an empty one of a short batch is skipped by all)
                        yield (hi - lo) * self.num_replicas, _slice(batch, lo, hi)
            else:
                lo, hi = self.bounds(size, self.num_replicas, self.rank)
                yield size, _slice(batch, lo, hi)

    def _file_epoch(self) -> Iterator[tuple[int, Any]]:
        source = self._source()
        while True:
            batch = next(source, None)
            have = 0 if batch is None else leading_size(batch)
            replicas_with_data, global_size = self.all_reduce([int(batch is not None), have], "sum")
            if replicas_with_data < self.num_replicas:
                if replicas_with_data:
                    _warn_once("file", "AutoShardPolicy.FILE: the replicas' files hold different numbers of batches; "
                               "each epoch ends for all when the first replica runs out, so the others' last batches "
                               "are skipped. Fix: files of equal size, a multiple of the replica count, or DATA.")
                return
            yield global_size, batch

    def _check_same_data(self, batch: Any) -> None:
        if self.all_reduce is None:
            return
        mine = _fingerprint(batch)
        high, low = self.all_reduce([mine, -mine], "max")
        if high != -low and self.rank == 0:
            _warn_once("data", "the replicas' tf.data pipelines produced different first global batches, so each "
                       "replica trains on a slice of its own data, not on one common dataset (AutoShardPolicy.DATA "
                       "needs the same elements in the same order on every replica). Cause: an unseeded shuffle or "
                       "random data made in each process. Fix: shuffle(buffer, seed=S), tf.random.set_seed(S) / "
                       "np.random.seed(S) before building the data, or AutoShardPolicy.FILE.")
