"""One epoch of ``fit``: take each batch, forward and backward on this replica, step the optimizer.

Gradients are averaged across replicas by the strategy's gradient sync during ``backward()``; with
accumulation the all-reduce runs once per ``k`` micro-batches. Each step is timed by the step monitor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from allgpu.errors import InputError, warn_user
from allgpu.train.metrics import MetricSums

_END = object()


def split_batch(batch: Any) -> tuple[Any, torch.Tensor]:
    """``(inputs, targets)`` of a batch. Raises ValueError naming the fix for any other shape."""
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    keys = f" with keys {sorted(batch)}" if isinstance(batch, dict) else ""
    raise InputError(f"fit/evaluate expect batches of (inputs, targets); got a {type(batch).__name__}{keys} "
                     f"of length {len(batch) if hasattr(batch, '__len__') else '?'}. Fix: make the dataset's "
                     "__getitem__ return (x, y), or write your own loop over strategy.distribute_dataset(...).")


@dataclass
class EpochRunner:
    """Everything a training step needs, fixed for the whole of ``fit``.

    ``timer`` is a :class:`allgpu.monitor.StepMonitor` (possibly disabled), ``plan`` the
    :class:`allgpu.train.checkpoint_plan.CheckpointPlan`, ``progress`` the replica-0 display.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable
    strategy: Any
    precision: Any
    accumulation: Any
    timer: Any
    plan: Any
    progress: Any
    callbacks: Sequence
    max_steps: int | None
    step_in_backward: bool = False  # optimizer-in-backward: the strategy's gradient sync already stepped
    _warned: bool = False

    def run(self, epoch: int, data, sums: MetricSums, global_step: int, history) -> tuple[int, int, float]:
        """Train one epoch. Returns ``(examples seen on this replica, optimizer steps so far, seconds)``."""
        start, seen, step = time.perf_counter(), 0, 0
        if hasattr(data, "start_epoch"):
            data.start_epoch(epoch)  # fit's epoch e is the data's epoch e (unless resuming inside it)
        batches = iter(data)
        self.timer.start_epoch(epoch)
        while self.max_steps is None or step < self.max_steps:
            self.timer.start_step()
            with self.timer.phase("input"):
                batch = next(batches, _END)
            if batch is _END:
                self.timer.abandon_step()
                break
            x, y = split_batch(batch)
            loss, outputs = self._forward_backward(x, y)
            if self.accumulation.sync_step:
                with self.timer.phase("optimizer"):
                    if not self.step_in_backward:
                        self.precision.step(self.optimizer)
                    self.optimizer.zero_grad(set_to_none=True)
                global_step += 1
                self.plan.after_step(epoch, global_step, history)
            sums.update(loss, outputs, y)
            seen += y.shape[0]
            self.timer.end_step(samples=y.shape[0])
            self.progress.advance()
            for cb in self.callbacks:
                cb.on_train_batch_end(step, {"loss": loss.detach()})
            step += 1
        self._drop_partial_accumulation(epoch)
        return seen, global_step, time.perf_counter() - start

    def _forward_backward(self, x, y) -> tuple[torch.Tensor, Any]:
        with self.timer.phase("compute"), self.accumulation, self.strategy._in_replica_context():
            with self.precision.autocast():  # get_replica_context() answers in the model and loss_fn, as in TF
                outputs = self.model(x)
                loss = self.loss_fn(outputs, y)
            self.precision.backward(loss)
        self.timer.add_sync_wait(self.strategy.gradient_sync)
        return loss, outputs

    def _drop_partial_accumulation(self, epoch: int) -> None:
        k, acc = self.accumulation.k, self.accumulation
        if acc.micro_step % k:
            if not self._warned and self.strategy.is_chief:
                warn_user(f"epoch {epoch}: {acc.micro_step % k} trailing micro-batches did not fill a step of "
                              f"accumulation_steps={k}; their gradients were dropped. Fix: choose "
                              "accumulation_steps dividing the steps per epoch.", RuntimeWarning)
                self._warned = True
            self.optimizer.zero_grad(set_to_none=True)
        acc.reset()
