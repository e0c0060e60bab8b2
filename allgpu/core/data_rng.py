"""Randomness inside ``__getitem__`` that survives a restart: each example's draws are seeded by its identity.

Augmentation written the usual way (``torch.rand``, ``np.random``, ``random`` inside ``Dataset.__getitem__``)
draws from the process-global generators. Across a restart those streams cannot be replayed exactly: loader
workers are new processes, the device feed fetches one batch ahead, and the examples a worker gets depend on the
number of workers and replicas. So :class:`SeededExamples` runs each ``__getitem__(i)`` with torch (CPU),
numpy and ``random`` seeded from ``(seed, epoch, i)`` and then puts the caller's generator states back. An
example's augmentation therefore depends only on the dataset's seed, the epoch and its index: the same at any
number of replicas or loader workers, before and after a resume, and the training loop's own stream (Dropout)
is untouched by data loading. The cost is three seedings per example (tens of microseconds); datasets that
draw nothing (``TensorDataset``) are not wrapped. Same idea as ``tf.data``'s deterministic seeded ops.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

_MASK63 = (1 << 63) - 1


def example_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for example ``index`` in ``epoch`` (Python's int-tuple hash: the same in every process)."""
    return hash((int(seed), int(epoch), int(index), 0x5EED)) & _MASK63


def loader_generator(seed: int, epoch: int) -> torch.Generator:
    """A generator for ``DataLoader(generator=...)``: its worker base seed then comes from (seed, epoch), not from
    the global torch stream, so creating a loader draws nothing the training loop would otherwise have drawn."""
    return torch.Generator().manual_seed(hash((int(seed), int(epoch), 0x10AD)) & _MASK63)


class SeededExamples(Dataset):
    """``dataset`` whose ``__getitem__(i)`` runs with the global RNGs seeded by ``(seed, epoch, i)``.

    Set ``epoch`` before creating each epoch's loader (workers copy the object when the loader starts).
    """

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset = dataset
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        s = example_seed(self.seed, self.epoch, index)
        torch_state = torch.get_rng_state()
        numpy_state = np.random.get_state()
        python_state = random.getstate()
        try:
            torch.default_generator.manual_seed(s)  # CPU only: CUDA generators are not touched
            np.random.seed(s & 0xFFFFFFFF)
            random.seed(s)
            return self.dataset[index]
        finally:
            torch.set_rng_state(torch_state)
            np.random.set_state(numpy_state)
            random.setstate(python_state)


def seeded(dataset: Dataset, seed: int) -> Dataset:
    """Wrap ``dataset`` in :class:`SeededExamples` unless its items draw no randomness (``TensorDataset``)."""
    if isinstance(dataset, TensorDataset):
        return dataset
    return SeededExamples(dataset, seed)
