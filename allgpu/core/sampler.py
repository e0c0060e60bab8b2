"""Which examples each replica takes at each step: disjoint, contiguous shares of every global batch.

The order of an epoch is ``torch.randperm(length)`` seeded with ``seed + epoch`` (the same on every replica,
without communication). Each global batch of B examples is split into N contiguous shares: B / N each for a full
batch, near-equal (:func:`share_bounds`) for a short last one, where a replica may get none; :meth:`weight` says
how much each replica's gradient then counts, so N replicas equal one replica at batch B.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import Sampler

from allgpu.errors import InputError


def per_replica_batch_size(global_batch_size: int, num_replicas: int) -> int:
    """Split a global batch evenly. Raises ValueError naming both numbers and the nearest valid sizes."""
    if not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise InputError(f"global_batch_size={global_batch_size!r}; expected a positive integer, the examples per "
                         "step across all replicas (e.g. 64).")
    if global_batch_size % num_replicas:
        lower = global_batch_size // num_replicas * num_replicas
        raise InputError(
            f"global_batch_size={global_batch_size} is not divisible by the {num_replicas} replicas in sync, so the "
            f"replicas would get unequal batches. Fix: use a multiple of {num_replicas}, e.g. "
            f"{lower or num_replicas} or {lower + num_replicas}."
        )
    return global_batch_size // num_replicas


def share_bounds(n: int, num_replicas: int, rank: int) -> tuple[int, int]:
    """Replica ``rank``'s ``[lo, hi)`` of a global batch of ``n`` examples: contiguous, sizes differing by at most
    one, the first ``n % N`` replicas one larger; with ``n < N`` the last replicas get none (``lo == hi``)."""
    base, extra = divmod(n, num_replicas)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class ShardSampler(Sampler):
    """Yields this replica's index list for each step of an epoch.

    Args:
        length: examples in the dataset.
        global_batch_size: B, examples per step across all replicas.
        num_replicas / rank: N and this replica's index.
        shuffle / seed: order is ``torch.randperm(length)`` seeded with ``seed + epoch`` when shuffling.
        drop_remainder: drop the last partial global batch; otherwise it is split unevenly, never padded: replica
            r gets its near-equal contiguous part (:func:`share_bounds`), possibly none, and :meth:`weight` says
            how much its gradient counts, so N replicas equal one replica at the same global batch.
    """

    def __init__(self, length, global_batch_size, num_replicas, rank, *, shuffle=True, seed=0, drop_remainder=True):
        self.length = length
        self.global_batch_size = global_batch_size
        self.per_replica = per_replica_batch_size(global_batch_size, num_replicas)
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_remainder = drop_remainder
        self.epoch = 0
        self.start_step = 0
        self.requested_epoch: int | None = None  # set_epoch's, read by the DistributedDataset at its next iteration
        if length == 0:
            raise InputError("the dataset is empty (0 examples), so there is nothing to train on. Fix: check what "
                             "built it (a path, a filter, a split that selected nothing).")
        if self.steps_per_epoch() == 0:
            raise InputError(
                f"the dataset has {length} examples, fewer than one global batch of {global_batch_size} with "
                "drop_remainder=True, so an epoch would have no step. Fix: a smaller global_batch_size or "
                "drop_remainder=False."
            )

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration of the distributed dataset epoch ``epoch``: DistributedSampler's spelling, kept by
        a DDP or Ray Train port (``loader.sampler.set_epoch(epoch)``); the same as ``dataset.set_epoch(epoch)``."""
        self.requested_epoch = int(epoch)

    def steps_per_epoch(self) -> int:
        full, rest = divmod(self.length, self.global_batch_size)
        return full + (1 if rest and not self.drop_remainder else 0)

    def order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.length))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.length, generator=generator).tolist()

    def global_batch(self, order: list[int], step: int) -> list[int]:
        return order[step * self.global_batch_size : (step + 1) * self.global_batch_size]

    def sizes(self, step: int) -> tuple[int, int]:
        """``(examples of this replica, examples of the global batch)`` at ``step`` of an epoch."""
        total = min(self.global_batch_size, self.length - step * self.global_batch_size)
        lo, hi = share_bounds(total, self.num_replicas, self.rank)
        return hi - lo, total

    def weight(self, step: int) -> float:
        """This replica's gradient weight at ``step``: its share of the global batch times N (1.0 for a full
        batch; 0.0 for a replica with no example of a short last batch). Averaging ``weight * grad`` over the
        replicas gives the gradient of the mean loss over the global batch, as one replica computes it."""
        mine, total = self.sizes(step)
        return mine * self.num_replicas / total

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order(self.epoch)
        for step in range(self.start_step, self.steps_per_epoch()):
            batch = self.global_batch(order, step)
            lo, hi = share_bounds(len(batch), self.num_replicas, self.rank)
            # An empty share still runs a step (it joins the all-reduce): one example is loaded as a template
            # and the batch is cut to zero rows on delivery (DistributedDataset.__iter__).
            yield batch[lo:hi] if hi > lo else batch[:1]

    def __len__(self) -> int:
        return self.steps_per_epoch() - self.start_step
