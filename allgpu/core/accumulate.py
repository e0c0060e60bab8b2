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

import functools
import weakref

from torch.optim.optimizer import register_optimizer_step_pre_hook

from allgpu.errors import ArgumentError, UnsupportedError
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
        self._hook = None

    def __enter__(self) -> "Accumulation":
        if self._hook is None:  # from the first micro-batch on: an optimizer step inside a cycle is refused
            self._hook = register_optimizer_step_pre_hook(functools.partial(_refuse_open_step, weakref.ref(self)))
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

    def close(self) -> None:
        """Remove the optimizer-step check (the strategy's ``close`` calls it)."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def _refuse_open_step(ref: weakref.ref, optimizer, args, kwargs) -> None:
    """Optimizer step pre-hook: raise when ``optimizer`` is about to update parameters whose gradients are local,
    in the middle of an accumulation cycle. Accelerate's ``with accelerator.accumulate(model):`` loop calls
    ``optimizer.step()`` / ``zero_grad()`` on every micro-batch because its wrapped optimizer skips them between
    sync steps; a plain optimizer would step each replica with its own gradients, and the replicas drift apart."""
    acc = ref()
    if acc is None or not acc.open_micro_batches:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not any(p.grad is not None and acc._sync.synchronises(p) for p in params):
        return
    raise UnsupportedError(
        f"{type(optimizer).__name__}.step() after micro-batch {acc.open_micro_batches} of {acc.k} of "
        f"strategy.accumulate({acc.k}): the gradients are all-reduced on micro-batch {acc.k} of each cycle only, so "
        "this step would update each replica with its own gradients (the replicas drift apart) and accumulate "
        "nothing. Fix: step when the cycle completes, "
        "`if acc.sync_step: optimizer.step(); scheduler.step(); optimizer.zero_grad()` "
        "(Accelerate's optimizer skips those calls itself inside accelerator.accumulate; a torch optimizer does not).")
