"""Distributed datasets: disjoint per-replica shards of each global batch, loader workers, device prefetch.

``strategy.distribute_dataset(dataset, global_batch_size=B)`` follows ``tf.distribute``'s
``experimental_distribute_dataset``: each step, the B examples of one global batch are split into N contiguous
per-replica batches of B / N, so N replicas see exactly the examples one replica would see at batch B, in the
same order (the equivalence invariant). The order is a permutation seeded by ``seed + epoch``: reshuffled each
epoch, identical on every replica without communication. As with ``tf.data``'s ``reshuffle_each_iteration``,
every iteration is a new epoch, and so is a *new* ``distribute_dataset`` object over the same data: the strategy
counts the epochs already drawn for each (seed, length, global batch) and a new object continues from there, so
``for epoch ...: for batch in strategy.distribute_dataset(data, B)`` reshuffles every epoch (the same order on
every replica, since every replica creates the same objects in the same order). The position (epoch, step) is part of
:meth:`DistributedDataset.state_dict`, so a resumed run, with any number of replicas, continues with exactly the
examples not yet seen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from allgpu.devices.advice import workers_here
from allgpu.core.dist_iterator import DistributedIterator
from allgpu.core.data_rng import SeededExamples, loader_generator, seeded
from allgpu.core.one_program import fingerprint
from allgpu.core.element_spec import spec_of_example
from allgpu.core.sampler import ShardSampler, per_replica_batch_size
from allgpu.errors import ArgumentError, DatasetTypeError, InputError, UnsupportedError, warn_user


@dataclass(frozen=True)
class InputContext:
    """What an input function needs to know about its replica (``tf.distribute.InputContext``).

    Attributes:
        num_input_pipelines: number of input pipelines (one per replica here).
        input_pipeline_id: this pipeline's index (the replica's rank).
        num_replicas_in_sync: replicas in the job.
    """

    num_input_pipelines: int
    input_pipeline_id: int
    num_replicas_in_sync: int

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size / num_replicas_in_sync``. Raises ValueError when it does not divide."""
        return per_replica_batch_size(global_batch_size, self.num_replicas_in_sync)


def empty_like(batch: Any) -> Any:
    """``batch`` with zero examples: every tensor cut to ``[:0]`` along its first dimension, lists emptied."""
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, tuple):
        parts = [empty_like(b) for b in batch]
        return type(batch)(*parts) if hasattr(batch, "_fields") else tuple(parts)
    if isinstance(batch, list):
        return [empty_like(b) for b in batch] if batch and isinstance(batch[0], (torch.Tensor, tuple, list, dict)) \
            else []
    if isinstance(batch, dict):
        return {k: empty_like(v) for k, v in batch.items()}
    return batch


def auto_num_workers(local_replicas: int) -> int:
    """Loader workers per replica for ``num_workers="auto"``: :func:`allgpu.devices.advice.suggest_workers` on this
    process's cores (affinity, lowered by a cgroup quota), the number ``allgpu doctor`` prints."""
    return workers_here(max(1, local_replicas)).workers


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor in a (nested tuple / list / dict) batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [to_device(b, device, non_blocking) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


class _DeviceFeed:
    """Iterates ``source`` one batch ahead, copying the next batch to the device while the current one trains.

    ``wait_s`` accumulates the seconds spent waiting for input (the step monitor's "input wait").
    """

    def __init__(self, source: Iterable, device: torch.device):
        self.device = device
        self.wait_s = 0.0
        self.batches = 0
        self._it = iter(source)
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._next = self._fetch()

    def _fetch(self):
        start = time.perf_counter()
        try:
            batch = next(self._it)
        except StopIteration:
            return StopIteration
        finally:
            self.wait_s += time.perf_counter() - start
        if self._stream is None:
            return to_device(batch, self.device)
        with torch.cuda.stream(self._stream):
            return to_device(batch, self.device, non_blocking=True)

    def __iter__(self):
        return self

    def __next__(self):
        batch = self._next
        if batch is StopIteration:
            raise StopIteration
        if self._stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
        self._next = self._fetch()
        self.batches += 1
        return batch


def as_map_dataset(data):
    """Accept what PyTorch users hand over: a map-style dataset as is; a ``DataLoader``'s dataset (its sampler and
    batch size are replaced, with a warning); a tuple of equally long tensors as a ``TensorDataset``."""
    if isinstance(data, DataLoader):
        warn_user(f"distributing the DataLoader's dataset ({type(data.dataset).__name__}): its sampler and "
                      f"batch_size={data.batch_size} are replaced by allgpu's shards of the global batch.",
                      UserWarning)
        return data.dataset
    if isinstance(data, (tuple, list)) and data and all(isinstance(t, torch.Tensor) for t in data):
        if len({t.shape[0] for t in data}) != 1:
            raise InputError(f"tensors of lengths {[t.shape[0] for t in data]} cannot be zipped into examples; "
                             "expected tensors with the same first dimension, e.g. (x, y).")
        return TensorDataset(*data)
    return data


def batched_loader_settings(dataset, global_batch_size: int | None, options: dict,
                            num_replicas: int | None = None) -> tuple[int, dict]:
    """``(global_batch_size, options)`` for ``distribute_dataset``, taking what a batching ``DataLoader`` says.

    A ``DataLoader`` passed without ``global_batch_size`` is read as ``tf.distribute`` reads a batched
    ``tf.data`` dataset: its ``batch_size`` is the global batch, and its shuffling (a ``RandomSampler``),
    ``drop_last``, ``collate_fn`` and ``num_workers`` carry over unless given in ``options`` (None there means
    "not given"). A loader on a ``DistributedSampler`` (a DDP port, Ray Train's ``prepare_data_loader``) is
    DDP's: its ``batch_size`` is per replica, so the global batch is ``batch_size * sampler.num_replicas`` and the
    sampler's ``shuffle`` carries over (its sharding is the strategy's to do). Raises ArgumentError when there is
    no global batch size to use, or when that sampler was made for another number of replicas than
    ``num_replicas`` (the strategy's).
    """
    from torch.utils.data import default_collate

    loader = dataset if isinstance(dataset, DataLoader) else None
    if global_batch_size is None:
        if loader is None or loader.batch_size is None:
            raise ArgumentError("distribute_dataset needs global_batch_size= (the batch of all replicas together), "
                                "unless the dataset is a DataLoader with a batch_size, which is then the global batch "
                                "(as for a batched tf.data dataset).")
        global_batch_size, shuffled = _loader_global_batch(loader, num_replicas)
        taken = {"shuffle": shuffled, "drop_remainder": loader.drop_last,
                 "num_workers": loader.num_workers,
                 "collate_fn": None if loader.collate_fn is default_collate else loader.collate_fn}
        options = {k: taken.get(k) if v is None else v for k, v in options.items()}
    defaults = {"shuffle": True, "drop_remainder": True, "num_workers": "auto"}
    return global_batch_size, {k: defaults.get(k) if v is None else v for k, v in options.items()}


def _loader_global_batch(loader: DataLoader, num_replicas: int | None) -> tuple[int, bool]:
    """``(global batch, shuffled)`` a batching DataLoader stands for: tf.data's reading, or DDP's on a
    DistributedSampler (per-replica batch; the numbers were silently halved at 2 replicas when read as global)."""
    from torch.utils.data import DistributedSampler, RandomSampler

    sampler = loader.sampler
    if not isinstance(sampler, DistributedSampler):
        return loader.batch_size, isinstance(sampler, RandomSampler)
    if num_replicas is not None and sampler.num_replicas != num_replicas:
        raise ArgumentError(
            f"the DataLoader's DistributedSampler splits the data {sampler.num_replicas} ways, but the strategy has "
            f"{num_replicas} replicas. Fix: pass the DataLoader without the DistributedSampler (or its dataset, "
            "with global_batch_size=): the strategy gives each replica its share.")
    return loader.batch_size * sampler.num_replicas, bool(sampler.shuffle)


class EpochCounter:
    """Epochs already drawn per dataset key, kept by the strategy so a new dataset object does not restart at 0."""

    def __init__(self):
        self._next: dict[tuple, int] = {}

    def next_epoch(self, key: tuple) -> int:
        return self._next.get(key, 0)

    def drawn(self, key: tuple, epoch: int) -> None:
        self._next[key] = max(self._next.get(key, 0), epoch + 1)


class DistributedDataset:
    """This replica's view of a dataset distributed across replicas; iterate it once per epoch.

    Each iteration yields per-replica batches (``(B / N, ...)`` tensors, already on the replica's device) and
    advances the epoch, so the next iteration is reshuffled. With ``drop_remainder=False`` the short last global
    batch is split unevenly (a replica may get zero rows) and ``sync.weight`` is set for each batch's backward,
    so every replica's gradient counts by its share. Built by ``Strategy.distribute_dataset``.
    """

    def __init__(self, dataset: Dataset, *, global_batch_size: int, num_replicas: int, rank: int,
                 device: torch.device, shuffle: bool = True, seed: int = 0, num_workers: int | str = "auto",
                 drop_remainder: bool = True, local_replicas: int | None = None, collate_fn: Callable | None = None,
                 epochs: EpochCounter | None = None, sync: Any = None, verify: Callable | None = None):
        dataset = as_map_dataset(dataset)
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise DatasetTypeError(
                f"distribute_dataset needs a map-style dataset (with __len__ and __getitem__); got "
                f"{type(dataset).__name__}. Fix: wrap tensors in torch.utils.data.TensorDataset, or build a per-replica "
                "pipeline with strategy.distribute_datasets_from_function(fn)."
            )
        self.dataset = dataset
        self._examples = seeded(dataset, seed)  # augmentation seeded per (seed, epoch, index): see data_rng.py
        self.device = device
        self.global_batch_size = global_batch_size
        self.sampler = ShardSampler(len(dataset), global_batch_size, num_replicas, rank, shuffle=shuffle,
                                    seed=seed, drop_remainder=drop_remainder)
        self.per_replica_batch_size = self.sampler.per_replica
        workers = auto_num_workers(local_replicas or num_replicas) if num_workers == "auto" else int(num_workers)
        self.num_workers = workers
        self._loader_kwargs = dict(
            num_workers=workers,
            pin_memory=device.type == "cuda",
            persistent_workers=False,
            **({"prefetch_factor": 4} if workers else {}),
            **({"collate_fn": collate_fn} if collate_fn else {}),
        )
        self._resume: tuple[int, int] | None = None
        self._sync = sync  # the gradient synchroniser, whose ``weight`` each delivered batch sets
        self._verify = verify  # OneProgram.same_data: replicas compare the data's fingerprint at the first epoch
        self._counter = epochs
        self._key = (seed, len(dataset), global_batch_size, shuffle)
        self._next_epoch = epochs.next_epoch(self._key) if epochs is not None else 0
        self.epoch = 0
        self.step = 0
        self.feed: _DeviceFeed | None = None

    def __len__(self) -> int:
        """Steps per epoch."""
        return self.sampler.steps_per_epoch()

    @property
    def element_spec(self) -> Any:
        """This replica's batches' structure, shapes and dtypes (``tf.distribute.DistributedDataset.element_spec``):
        a nest of :class:`~allgpu.core.element_spec.TensorSpec` read from example 0 (its randomness seeded, as in
        an epoch), batch dimension ``B / N`` with ``drop_remainder=True``, else None. Local."""
        batch = self.per_replica_batch_size if self.sampler.drop_remainder else None
        return spec_of_example(self._examples[0], batch, self._loader_kwargs.get("collate_fn"))

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (the order of each epoch depends only on seed and epoch)."""
        self._next_epoch = epoch
        self._resume = None

    def start_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch``, unless a loaded state resumes inside an epoch (``fit`` uses it)."""
        if self._resume is None:
            self._next_epoch = epoch

    def __iter__(self) -> DistributedIterator:
        """One epoch of this replica's batches (a :class:`~allgpu.core.dist_iterator.DistributedIterator`)."""
        return DistributedIterator(self._epoch())

    def _epoch(self) -> Iterator:
        if self._verify is not None:
            examples = seeded(self.dataset, self.sampler.seed)  # augmentation as at epoch 0 on every replica
            self._verify((type(self.dataset).__name__, len(self.dataset)),
                         lambda: fingerprint(len(examples), examples.__getitem__), "distribute_dataset")
            self._verify = None
        if self.sampler.requested_epoch is not None:  # loader.sampler.set_epoch(e), a DDP port's spelling
            self.set_epoch(self.sampler.requested_epoch)
            self.sampler.requested_epoch = None
        epoch, start = self._resume if self._resume else (self._next_epoch, 0)
        self._resume = None
        self.sampler.epoch, self.sampler.start_step = epoch, start
        self.epoch, self.step = epoch, start
        self._next_epoch = epoch + 1
        if self._counter is not None:
            self._counter.drawn(self._key, epoch)
        if isinstance(self._examples, SeededExamples):
            self._examples.epoch = epoch
        # Own generator: creating the loader must not draw from the global stream (Dropout's), or a resumed run
        # would see different masks from the run it continues.
        loader = DataLoader(self._examples, batch_sampler=self.sampler, generator=loader_generator(self.sampler.seed, epoch),
                            **self._loader_kwargs)
        self.feed = _DeviceFeed(loader, self.device)
        try:
            for batch in self.feed:
                weight = self.sampler.weight(self.step)
                if self._sync is not None:  # the backward of this batch weighs its gradient by the batch's share
                    self._sync.weight = weight
                self.step += 1  # counted on delivery: a state saved after this step's update resumes after it
                yield batch if weight else empty_like(batch)
        finally:
            if self._sync is not None:
                self._sync.weight = 1.0

    def state_dict(self) -> dict:
        """Input position: the epoch in progress and the global batches of it already consumed."""
        steps = len(self)
        if self.step >= steps:  # the epoch is finished: resume at the start of the next one
            return {"epoch": self.epoch + 1, "step": 0, "seed": self.sampler.seed,
                    "global_batch_size": self.global_batch_size}
        return {"epoch": self.epoch, "step": self.step, "seed": self.sampler.seed,
                "global_batch_size": self.global_batch_size}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position; any number of replicas may load it (positions count global batches).

        Raises:
            ValueError: the saved global batch size or seed differs, so the position would not mean the same.
        """
        for key in ("global_batch_size", "seed"):
            mine = self.global_batch_size if key == "global_batch_size" else self.sampler.seed
            if state.get(key, mine) != mine:
                raise ArgumentError(
                    f"the saved input position was taken with {key}={state[key]}, this dataset has {key}={mine}; "
                    f"resuming would skip or repeat examples. Fix: distribute the dataset with {key}={state[key]}."
                )
        self._resume = (int(state["epoch"]), int(state["step"]))
        self._next_epoch = int(state["epoch"])


class PerReplicaInput:
    """The result of ``distribute_datasets_from_function``: the replica's own iterable, fed to its device."""

    def __init__(self, source: Iterable, device: torch.device, context: InputContext,
                 agree: Callable[[bool], bool] | None = None):
        self.source = source
        self.device = device
        self.context = context
        self.agree = agree  # get_next_as_optional's "does every replica still have a batch?" (a collective)
        self.feed: _DeviceFeed | None = None

    def __iter__(self) -> DistributedIterator:
        self.feed = _DeviceFeed(self.source, self.device)
        return DistributedIterator(self.feed, self.agree)

    def __len__(self) -> int:
        return len(self.source)  # raises TypeError for sources without a length, as iterables do

    @property
    def element_spec(self) -> Any:
        """The structure of this replica's batches (see :attr:`DistributedDataset.element_spec`), read from a
        ``DataLoader`` source's example 0. Raises UnsupportedError for other iterables (nothing to read it from
        without taking a batch)."""
        if not isinstance(self.source, DataLoader) or isinstance(self.source.dataset, IterableDataset) or \
                self.source.batch_size is None:
            raise UnsupportedError(
                f"element_spec of distribute_datasets_from_function's {type(self.source).__name__}: allgpu reads it "
                "from a batching map-style DataLoader or a tf.data dataset only. Fix: return one of those from dataset_fn, or "
                "read the shapes from a first batch.")
        batch = self.source.batch_size if self.source.drop_last else None
        return spec_of_example(seeded(self.source.dataset, 0)[0], batch, self.source.collate_fn)


def evaluation_shard(dataset: Dataset, *, per_replica_batch_size: int, num_replicas: int, rank: int,
                     device: torch.device, num_workers: int = 0) -> Iterable:
    """Examples ``rank, rank + N, ...`` in order, batched: every example exactly once across replicas, no padding.

    Replicas may get one batch more or less than each other, so evaluation must not issue collectives per batch.
    """
    indices = list(range(rank, len(dataset), num_replicas))
    batches = [indices[i : i + per_replica_batch_size] for i in range(0, len(indices), per_replica_batch_size)]
    loader = DataLoader(dataset, batch_sampler=batches, num_workers=num_workers, pin_memory=device.type == "cuda")
    return _DeviceFeed(loader, device)
