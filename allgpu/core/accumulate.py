"""Gradient accumulation: k micro-batches, one all-reduce round.

Usage, in a custom loop::

    acc = strategy.accumulate(4)
    for x, y in dataset:
        with acc:                       # all-reduces only on every 4th micro-batch
            loss_fn(model(x), y).backward()
        if acc.sync_step:
            optimizer.step()
            optimizer.zero_grad()

On the k-th micro-batch the summed local gradients are divided by ``k * num_replicas`` and all-reduced once,
so the result equals one batch k times the size (for losses that average over the batch). This is the
all-reduce count that DDP's ``no_sync`` gives, without the user juggling contexts.
"""

from __future__ import annotations

from allgpu.errors import ArgumentError
from allgpu.core.sync import GradientSync


class Accumulation:
    """Counts micro-batches; lets gradients sync only on every ``k``-th.

    Attributes:
        k: micro-batches per optimizer step.
        micro_step: micro-batches entered so far.
        sync_step: True inside (and after) the micro-batch whose backward all-reduces.
    """

    def __init__(self, sync: GradientSync, k: int):
        if not isinstance(k, int) or k < 1:
            raise ArgumentError(f"accumulate(k={k!r}): k is the number of micro-batches per step, a positive integer.")
        self._sync = sync
        self.k = k
        self.micro_step = 0
        self.sync_step = False

    def __enter__(self) -> "Accumulation":
        self.micro_step += 1
        self.sync_step = self.micro_step % self.k == 0
        self._saved = (self._sync.enabled, self._sync.divisor)
        self._sync.enabled = self.sync_step
        if self.sync_step:
            self._sync.divisor = float(self._sync.group.world_size * self.k)
        return self

    def __exit__(self, *exc) -> None:
        self._sync.enabled, self._sync.divisor = self._saved

    @property
    def open_micro_batches(self) -> int:
        """Micro-batches whose gradients sit in ``.grad`` waiting for the k-th (0 at a step boundary)."""
        return self.micro_step % self.k

    def reset(self) -> None:
        """Start counting afresh (e.g. at an epoch boundary with leftover micro-batches)."""
        self.micro_step = 0
        self.sync_step = False
