"""Keras inputs split across replicas: each global batch of ``batch_size`` examples becomes N disjoint slices.

What ``model.fit(x, y, batch_size=B)`` is given (NumPy arrays, torch tensors, nested dicts/lists of them, a
``torch.utils.data.Dataset`` or ``DataLoader``, a ``keras.utils.PyDataset``, a Python generator) becomes a
:class:`ShardedInput`, a Keras ``DataAdapter`` (Keras's own extension point: ``get_data_adapter`` returns an
adapter it is handed unchanged). Step s of an epoch delivers, on replica r, the r-th of N contiguous, near-equal
slices of global batch s, so N replicas together see exactly the examples one replica sees at batch B, in the same
order (``tf.distribute``'s global-batch contract). The order is a permutation seeded with ``seed + epoch``
(identical on every replica without communication), reshuffled every epoch when ``shuffle=True``.

Where examples can be indexed (arrays, map-style datasets) each replica loads only its own slice; PyDatasets and
generators can only produce whole batches, so every replica produces each global batch and keeps its slice
(``tf.data``'s ``AutoShardPolicy.DATA``).
"""

from __future__ import annotations

import abc

import itertools
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from keras import tree
from keras.src.trainers.data_adapters.data_adapter import DataAdapter
from keras.src.trainers.data_adapters.py_dataset_adapter import PyDataset
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler

from allgpu.core.data import to_device
from allgpu.core.data_rng import seeded
from allgpu.core.one_program import fingerprint
from allgpu.errors import DatasetTypeError, InputError, warn_user
from allgpu.keras.tf_data.split import slice_bounds


def leading_size(batch: Any) -> int:
    """Examples in a batch: the first dimension of its first array/tensor leaf."""
    for leaf in tree.flatten(batch):
        if leaf is not None and hasattr(leaf, "shape") and len(leaf.shape):
            return int(leaf.shape[0])
    raise InputError(f"a batch with no array or tensor in it: {type(batch).__name__}. Fix: yield (x, y) batches of "
                     "arrays or tensors.")


def _as_tuple(batch: Any) -> Any:
    # DataLoader's default collate turns (x, y) examples into [X, Y]; Keras unpacks tuples.
    return tuple(batch) if isinstance(batch, list) else batch


def _slice(batch: Any, lo: int, hi: int) -> Any:
    return tree.map_structure(lambda a: None if a is None else a[lo:hi], batch)


def _to_torch(batch: Any) -> Any:
    return tree.map_structure(lambda a: torch.as_tensor(a) if isinstance(a, np.ndarray) else a, batch)


class _Source(abc.ABC):
    """Where global batches come from. ``epoch(e)`` yields ``(global_batch_size, this replica's slice)``."""

    num_batches: int | None = None
    global_batch_size: int | None = None
    partial: int = 0

    @abc.abstractmethod
    def epoch(self, epoch: int) -> Iterator[tuple[int, Any]]:
        """This epoch's ``(global batch size, this replica's slice)`` pairs."""

    @abc.abstractmethod
    def peek(self) -> Any:
        """One per-replica batch (for building the model from its shapes); consumes nothing."""


class IndexSource(_Source):
    """Examples addressable by index: arrays (``fetch(indices)`` slices them) or a map-style dataset (loaded by a
    DataLoader over this replica's index lists, with the user's ``collate_fn`` and ``num_workers``)."""

    def __init__(self, length: int, global_batch_size: int, num_replicas: int, rank: int, *, shuffle: bool,
                 seed: int, drop_remainder: bool = False, fetch: Callable | None = None,
                 dataset: Dataset | None = None, loader_kwargs: dict | None = None):
        if length == 0:
            raise InputError("the training data has no examples.")
        self.length, self.global_batch_size = length, global_batch_size
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_remainder = shuffle, seed, drop_remainder
        self.fetch, self.dataset, self.loader_kwargs = fetch, dataset, loader_kwargs or {}
        full, self.partial = divmod(length, global_batch_size)
        if drop_remainder:
            self.partial = 0
        self.num_batches = full + (1 if self.partial else 0)
        if self.num_batches == 0:
            raise InputError(f"{length} examples are fewer than one global batch of {global_batch_size} and the "
                             "DataLoader has drop_last=True: an epoch would have no step.")

    def _plan(self, epoch: int) -> list[tuple[int, list[int]]]:
        if self.shuffle:
            order = torch.randperm(self.length, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
        else:
            order = list(range(self.length))
        plan = []
        for step in range(self.num_batches):
            batch = order[step * self.global_batch_size:(step + 1) * self.global_batch_size]
            lo, hi = slice_bounds(len(batch), self.num_replicas, self.rank)
            plan.append((len(batch), batch[lo:hi]))
        return plan

    def epoch(self, epoch):
        plan = self._plan(epoch)
        if self.fetch is not None:
            for size, indices in plan:
                yield size, self.fetch(indices)
            return
        loader = DataLoader(self.dataset, batch_sampler=[indices for _, indices in plan], **self.loader_kwargs)
        for (size, _), batch in zip(plan, loader):
            yield size, _as_tuple(batch)

    def peek(self):
        _, indices = self._plan(0)[0]
        if self.fetch is not None:
            return self.fetch(indices)
        collate = self.loader_kwargs.get("collate_fn") or torch.utils.data.default_collate
        return _as_tuple(collate([self.dataset[i] for i in indices]))


class BatchSource(_Source):
    """A ``keras.utils.PyDataset`` of known length: batch i is produced whole and sliced; with ``shuffle`` the
    batch order is permuted each epoch (as Keras's own ``PyDatasetAdapter`` does)."""

    def __init__(self, dataset: PyDataset, num_replicas: int, rank: int, *, shuffle: bool, seed: int):
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.num_batches = int(dataset.num_batches)

    def _get(self, index: int) -> tuple[int, Any]:
        batch = _as_tuple(self.dataset[index])
        size = leading_size(batch)
        lo, hi = slice_bounds(size, self.num_replicas, self.rank)
        return size, _slice(batch, lo, hi)

    def epoch(self, epoch):
        order = range(self.num_batches)
        if self.shuffle:
            order = torch.randperm(self.num_batches, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
        for index in order:
            yield self._get(index)

    def peek(self):
        return self._get(0)[1]


class StreamSource(_Source):
    """Global batches that can only be read in order (a generator, an iterable dataset, an infinite PyDataset):
    every replica reads each one and keeps its slice. A one-shot iterator is consumed across epochs, as Keras
    does; a re-iterable source restarts each epoch."""

    def __init__(self, iterable: Iterable, num_replicas: int, rank: int, *, restart_each_epoch: bool):
        self.iterable, self.num_replicas, self.rank = iterable, num_replicas, rank
        self.restart = restart_each_epoch
        self._iterator: Iterator | None = None
        self._first: list = []

    def _slices(self, iterator: Iterator) -> Iterator[tuple[int, Any]]:
        for batch in iterator:
            batch = _as_tuple(batch)
            size = leading_size(batch)
            lo, hi = slice_bounds(size, self.num_replicas, self.rank)
            yield size, _slice(batch, lo, hi)

    def epoch(self, epoch):
        if not self._first and (self._iterator is None or self.restart):
            self._iterator = iter(self.iterable)
        first, self._first = self._first, []  # a batch read by peek() starts the epoch
        yield from self._slices(itertools.chain(first, self._iterator))

    def peek(self):
        if not self._first:
            self._iterator = iter(self.iterable)
            self._first = [next(self._iterator)]
        return next(self._slices(iter(self._first)))[1]


class ShardedInput(DataAdapter):
    """This replica's share of the input, as a Keras ``DataAdapter``: iterating it runs one epoch.

    Each batch is ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)`` with leading dimension about
    ``global_batch_size / N``, already on the replica's device. ``global_size`` is the size of the global batch
    the last delivered slice came from (fit weights this replica's gradient by its share of it).
    """

    def __init__(self, source: _Source, device: torch.device, on_epoch: tuple[Callable, Callable] | None = None):
        self.source = source
        self.device = device
        self.global_size: int | None = None
        self.delivered: list[tuple[int, int]] = []  # (global batch size, examples here) per step, last epoch
        self.next_epoch = 0
        self._hooks = on_epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (its shuffle order depends only on seed and epoch)."""
        self.next_epoch = epoch

    def __iter__(self):
        epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        self.delivered = []
        for size, batch in self.source.epoch(epoch):
            self.global_size = size
            self.delivered.append((size, leading_size(batch)))
            yield to_device(_to_torch(batch), self.device)

    def peek(self) -> Any:
        return _to_torch(self.source.peek())

    # -- the DataAdapter interface (Keras's TorchEpochIterator calls get_torch_dataloader) ----------------------
    def get_torch_dataloader(self):
        return self

    def get_numpy_iterator(self):
        for batch in self:
            yield tree.map_structure(lambda a: None if a is None else np.asarray(a.cpu()), batch)

    def get_jax_iterator(self):
        return self.get_numpy_iterator()

    @property
    def num_batches(self):
        return self.source.num_batches

    @property
    def batch_size(self):
        return self.source.global_batch_size

    @property
    def has_partial_batch(self):
        return bool(self.source.partial)

    @property
    def partial_batch_size(self):
        return self.source.partial or None

    def on_epoch_begin(self):
        if self._hooks:
            self._hooks[0]()

    def on_epoch_end(self):
        if self._hooks:
            self._hooks[1]()


def check_same_data(data: ShardedInput, strategy, what: str) -> None:
    """Compare the examples' fingerprint across replicas (:meth:`allgpu.core.one_program.OneProgram.same_data`)
    for inputs addressable by index (arrays, map-style datasets); whole-batch sources are read alike. Collective."""
    source = getattr(data, "source", None)
    if not isinstance(source, IndexSource):
        return
    get = (lambda i: source.fetch([i])) if source.fetch is not None else seeded(source.dataset, 0).__getitem__
    strategy._one_program.same_data(("keras", source.length), lambda: fingerprint(source.length, get), what)


def _as_arrays(x: Any) -> Any:
    """Array-likes Keras takes as arrays (a TensorFlow tensor, such as a batch taken from a ``tf.data`` dataset
    in keras-io's timeseries example; a pandas DataFrame or Series; a JAX array) as NumPy arrays; else ``x``."""
    def convert(a):
        module = type(a).__module__ or ""
        if module.startswith("tensorflow") and hasattr(a, "numpy") and hasattr(a, "shape"):
            return a.numpy()
        if module.startswith("pandas") and hasattr(a, "to_numpy"):
            return a.to_numpy()
        if module.startswith(("jax", "jaxlib")) and hasattr(a, "__array__"):
            return np.asarray(a)
        return a
    return tree.map_structure(convert, x)


def _is_arrays(x: Any) -> bool:
    leaves = tree.flatten(x)
    return bool(leaves) and all(isinstance(a, (np.ndarray, torch.Tensor)) or a is None for a in leaves)


def _array_fetch(arrays: tuple) -> Callable[[list[int]], tuple]:
    def fetch(indices: list[int]):
        np_index = np.asarray(indices, dtype=np.int64)
        torch_index = torch.as_tensor(np_index)
        return tree.map_structure(
            lambda a: None if a is None else a[torch_index if isinstance(a, torch.Tensor) else np_index], arrays)
    return fetch


def _arrays_input(x, y, sample_weight, class_weight, batch_size, shuffle, seed, num_replicas, rank) -> _Source:
    if class_weight is not None:
        if y is None or sample_weight is not None:
            raise InputError("class_weight needs y and no sample_weight (as in Keras).")
        from keras.src.trainers.data_adapters.data_adapter_utils import class_weight_to_sample_weights
        sample_weight = class_weight_to_sample_weights(y, class_weight)
    if y is None and sample_weight is not None:
        raise InputError("sample_weight needs y.")
    arrays = (x,) if y is None else (x, y) if sample_weight is None else (x, y, sample_weight)
    lengths = {int(a.shape[0]) for a in tree.flatten(arrays) if a is not None}
    if len(lengths) != 1:
        raise InputError(f"x, y and sample_weight have different numbers of examples {sorted(lengths)}; expected "
                         "arrays with the same first dimension.")
    return IndexSource(lengths.pop(), batch_size, num_replicas, rank, shuffle=shuffle, seed=seed,
                       fetch=_array_fetch(arrays))


def _loader_input(loader: DataLoader, num_replicas: int, rank: int, seed: int) -> _Source:
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__") or loader.batch_size is None:
        return StreamSource(loader, num_replicas, rank, restart_each_epoch=True)
    sampler = loader.sampler
    kwargs = {"collate_fn": loader.collate_fn, "num_workers": loader.num_workers, "pin_memory": loader.pin_memory}
    if loader.num_workers:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    return IndexSource(len(dataset), loader.batch_size, num_replicas, rank, shuffle=isinstance(sampler, RandomSampler),
                       seed=seed, drop_remainder=loader.drop_last, dataset=dataset, loader_kwargs=kwargs)


def make_input(x, y=None, sample_weight=None, *, batch_size: int | None, shuffle: bool, class_weight=None,
               num_replicas: int, rank: int, device: torch.device, seed: int = 0) -> ShardedInput:
    """Turn what ``fit``/``evaluate`` accept into this replica's :class:`ShardedInput`.

    Args:
        x, y, sample_weight, class_weight: as ``keras.Model.fit`` takes them.
        batch_size: the global batch (default 32, Keras's); ignored for a DataLoader (its ``batch_size`` is the
            global batch), a PyDataset or a generator (their batches are global batches).
        shuffle: reshuffle arrays / map-style datasets / PyDataset batch order each epoch. A DataLoader is shuffled
            when its sampler is a ``RandomSampler`` (``shuffle=True`` when it was built).
        seed: the shuffle seed, identical on every replica.

    Raises:
        ValueError / TypeError: inputs Keras would reject, with the reason (a ``tf.data`` dataset is read by
            :mod:`allgpu.keras.tf_data`, before this).
    """
    if isinstance(x, ShardedInput):
        return x
    hooks = None
    nonarray = isinstance(x, (PyDataset, Dataset, DataLoader)) or (hasattr(x, "__next__") and hasattr(x, "__iter__"))
    if nonarray and (y is not None or sample_weight is not None):
        raise InputError(f"y / sample_weight cannot be passed with a {type(x).__name__} as x (as in Keras): it must "
                         "yield (x, y) or (x, y, sample_weight) batches itself.")
    batch_size = batch_size or 32
    if isinstance(x, PyDataset):
        hooks = (x.on_epoch_begin, x.on_epoch_end)
        if getattr(x, "num_batches", None) is None:
            source = StreamSource(x, num_replicas, rank, restart_each_epoch=False)
        else:
            source = BatchSource(x, num_replicas, rank, shuffle=shuffle, seed=seed)
    elif isinstance(x, DataLoader):
        source = _loader_input(x, num_replicas, rank, seed)
    elif isinstance(x, IterableDataset):
        source = StreamSource(DataLoader(x, batch_size=batch_size), num_replicas, rank, restart_each_epoch=True)
    elif isinstance(x, Dataset):
        if not hasattr(x, "__len__"):
            raise DatasetTypeError(f"{type(x).__name__} has no __len__; a map-style dataset needs one.")
        source = IndexSource(len(x), batch_size, num_replicas, rank, shuffle=shuffle, seed=seed, dataset=x)
    elif hasattr(x, "__next__") and hasattr(x, "__iter__"):
        source = StreamSource(x, num_replicas, rank, restart_each_epoch=False)
    elif _is_arrays(x := _as_arrays(x)):
        y, sample_weight = _as_arrays(y), _as_arrays(sample_weight)
        source = _arrays_input(x, y, sample_weight, class_weight, batch_size, shuffle, seed, num_replicas, rank)
    else:
        raise DatasetTypeError(f"cannot split a {type(x).__name__} across replicas. Fix: pass NumPy arrays or torch tensors "
                        "(or dicts/lists of them), a torch Dataset or DataLoader, a keras.utils.PyDataset or a "
                        "Python generator of (x, y) batches.")
    if class_weight is not None and not isinstance(source, IndexSource):
        warn_user("class_weight is applied to arrays only; yield sample weights from the dataset instead.",
                      UserWarning)
    return ShardedInput(source, device, hooks)
