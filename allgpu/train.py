"""``fit`` and ``evaluate``: a Keras-like training loop on any strategy.

``fit`` distributes the data, runs forward and backward on each replica (gradients are averaged by the
strategy's gradient sync during backward), steps the optimizer, reduces metrics across replicas once per epoch,
and shows progress on replica 0. With ``accumulation_steps=k`` it all-reduces once per k micro-batches.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from allgpu.data import (DistributedDataset, PerReplicaInput, as_map_dataset, evaluation_shard,
                         per_replica_batch_size)
from allgpu.metrics import MetricSums, resolve
from allgpu.monitor import StepMonitor, session as monitor_session
from allgpu.progress import Callback, EpochProgress
from allgpu.resume import CheckpointPlan, ResumePoint
from allgpu.strategies.base import Strategy
from allgpu.strategies.memory_advice import warn_if_too_large
from allgpu.strategies.one_device import OneDeviceStrategy

PRECISIONS = (None, "bf16", "fp16")
_END = object()


@dataclass
class History:
    """What ``fit`` returns (``tf.keras.callbacks.History``): ``history[name]`` is a list, one value per epoch.

    ``samples_per_second`` is global throughput (examples of all replicas per wall-clock second) per epoch.
    """

    history: dict[str, list[float]] = field(default_factory=dict)
    epoch: list[int] = field(default_factory=list)
    monitor_reports: list = field(default_factory=list)

    def append(self, epoch: int, logs: dict[str, float]) -> None:
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)


def _autocast(device: torch.device, mixed_precision: str | None):
    if mixed_precision not in PRECISIONS:
        raise ValueError(f"mixed_precision={mixed_precision!r}; expected None, 'bf16' or 'fp16'.")
    if mixed_precision is None:
        return contextlib.nullcontext()
    if mixed_precision == "fp16" and device.type != "cuda":
        raise ValueError("mixed_precision='fp16' needs a CUDA device (loss scaling); on CPU use 'bf16'.")
    dtype = torch.bfloat16 if mixed_precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def _split(batch: Any) -> tuple[Any, torch.Tensor]:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(f"fit/evaluate expect batches of (inputs, targets); got a {type(batch).__name__} "
                     f"of length {len(batch) if hasattr(batch, '__len__') else '?'}. Fix: make the dataset's "
                     "__getitem__ return (x, y).")


def _default_strategy(model: torch.nn.Module) -> Strategy:
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    return OneDeviceStrategy(str(device))


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, train_data, *,
        epochs: int, global_batch_size: int, strategy: Strategy | None = None, metrics: Sequence = ("accuracy",),
        validation_data=None, accumulation_steps: int = 1, mixed_precision: str | None = None,
        callbacks: Iterable[Callback] = (), shuffle: bool = True, seed: int = 0, num_workers: int | str = "auto",
        verbose: bool = True, max_steps_per_epoch: int | None = None, checkpoint_dir=None,
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = True,
        monitor: bool = False, report_dir=None) -> History:
    """Train ``model`` for ``epochs`` epochs on every replica of ``strategy``.

    Args:
        model, optimizer: built inside ``strategy.scope()`` (a MirroredStrategy raises NotMirroredError otherwise).
        loss_fn: ``loss_fn(outputs, targets) -> scalar`` averaged over the batch (e.g. ``nn.CrossEntropyLoss()``).
        train_data: a map-style dataset of ``(x, y)`` examples (or a ``(x, y)`` tuple of tensors, or a DataLoader
            whose dataset is used), or the result of ``strategy.distribute_dataset``.
        global_batch_size: examples per micro-step across all replicas; must divide by ``num_replicas_in_sync``.
            With ``accumulation_steps=k`` the optimizer sees ``k * global_batch_size`` examples a step.
        metrics: names (``"accuracy"``) or callables ``fn(outputs, targets) -> (total, count)``.
        validation_data: a map-style dataset evaluated after each epoch (``val_`` metrics).
        accumulation_steps: micro-batches per optimizer step; one all-reduce per step, not per micro-batch.
        mixed_precision: None, ``"bf16"`` (autocast) or ``"fp16"`` (autocast and loss scaling, CUDA only).
        callbacks: :class:`allgpu.progress.Callback` objects, called on every replica.
        max_steps_per_epoch: stop each epoch early after this many micro-steps (smoke runs, benchmarks).
        checkpoint_dir: save model, optimizer, input position and RNG states here at each epoch end (and every
            ``checkpoint_every`` optimizer steps); with ``resume=True`` a run finding a checkpoint there continues
            from it exactly (the way ``allgpu run --max-restarts`` recovers from a killed replica).
        keep_checkpoints: newest checkpoints kept.
        monitor: time every step's phases on every replica and, each epoch, print (replica 0) a per-replica table
            and the diagnosis of why a device idles (:class:`allgpu.monitor.StepMonitor`); reports are in
            ``history.monitor_reports``.
        report_dir: with ``monitor``, write ``monitor.json`` and ``monitor.png`` here at the end (replica 0).

    Returns:
        :class:`History` with ``loss``, each metric, ``val_*`` and ``samples_per_second`` per epoch.

    Raises:
        ValueError: a bad argument (the message names it). NotMirroredError: see above.
    """
    strategy = strategy or _default_strategy(model)
    warn_if_too_large(strategy, model, optimizer)  # on CUDA: would not fit mirrored, would sharded
    session = monitor_session.current()
    if session is not None:  # allgpu doctor --run: monitor a bounded run
        session.fit_calls += 1
        monitor, epochs, report_dir = True, 1, report_dir or session.report_dir
        max_steps_per_epoch = min(max_steps_per_epoch or session.max_steps, session.max_steps)
    if epochs < 1:
        raise ValueError(f"epochs={epochs}; expected a positive number of epochs.")
    data = train_data if isinstance(train_data, (DistributedDataset, PerReplicaInput)) else \
        strategy.distribute_dataset(train_data, global_batch_size, shuffle=shuffle, seed=seed, num_workers=num_workers)
    fns = resolve(metrics)
    autocast = _autocast(strategy.device, mixed_precision)
    scaler = torch.amp.GradScaler("cuda") if mixed_precision == "fp16" else None
    acc = strategy.accumulate(accumulation_steps)
    acc.reset()
    plan = CheckpointPlan(checkpoint_dir, every=checkpoint_every, keep=keep_checkpoints, strategy=strategy,
                          model=model, optimizer=optimizer, data=data)
    point = plan.restore() if resume else ResumePoint()
    history = History(point.history, point.history_epochs)
    global_step = point.global_step
    steps = len(data) if hasattr(data, "__len__") else None
    if max_steps_per_epoch is not None and steps is not None:
        steps = min(steps, max_steps_per_epoch)
    progress = EpochProgress(verbose and strategy.is_chief, epochs, steps)
    timer = StepMonitor(strategy, num_workers=getattr(data, "num_workers", None), enabled=bool(monitor))
    for cb in callbacks:
        cb.on_train_begin({})
    warned = False
    for epoch in range(point.epoch, epochs):
        model.train()
        for cb in callbacks:
            cb.on_epoch_begin(epoch, {})
        sums = MetricSums(fns, strategy.device)
        progress.start_epoch(epoch)
        start, seen = time.perf_counter(), 0
        batches, step = iter(data), 0
        timer.start_epoch(epoch)
        while max_steps_per_epoch is None or step < max_steps_per_epoch:
            timer.start_step()
            with timer.phase("input"):
                batch = next(batches, _END)
            if batch is _END:
                timer.abandon_step()
                break
            x, y = _split(batch)
            with timer.phase("compute"), acc:
                with autocast:
                    outputs = model(x)
                    loss = loss_fn(outputs, y)
                (scaler.scale(loss) if scaler else loss).backward()
            timer.add_sync_wait(strategy.gradient_sync)
            if acc.sync_step:
                with timer.phase("optimizer"):
                    if scaler:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                global_step += 1
                plan.after_step(epoch, global_step, history)
            sums.update(loss, outputs, y)
            seen += y.shape[0]
            timer.end_step(samples=y.shape[0])
            progress.advance()
            for cb in callbacks:
                cb.on_train_batch_end(step, {"loss": loss.detach()})
            step += 1
        if acc.micro_step % accumulation_steps:
            if not warned and strategy.is_chief:
                warnings.warn(f"epoch {epoch}: {acc.micro_step % accumulation_steps} trailing micro-batches did not "
                              f"fill a step of accumulation_steps={accumulation_steps}; their gradients were dropped. "
                              "Fix: choose accumulation_steps dividing the steps per epoch.", RuntimeWarning)
                warned = True
            optimizer.zero_grad(set_to_none=True)
        acc.reset()
        # The slowest replica's time, so every replica reports the same throughput.
        elapsed = float(strategy.reduce("max", time.perf_counter() - start))
        logs = sums.result(strategy)
        logs["samples_per_second"] = float(strategy.reduce("sum", float(seen))) / max(elapsed, 1e-9)
        if validation_data is not None:
            logs.update(evaluate(model, loss_fn, validation_data, global_batch_size=global_batch_size,
                                 strategy=strategy, metrics=metrics, mixed_precision=mixed_precision, prefix="val_"))
        history.append(epoch, logs)
        report = timer.end_epoch()
        if report is not None:
            history.monitor_reports.append(report)
            if strategy.is_chief and verbose:
                report.print(progress.console)
        if plan.enabled:
            plan.save(epoch + 1, global_step, history)
        progress.end_epoch("  ".join(f"{k} {v:.4g}" for k, v in logs.items()))
        for cb in callbacks:
            cb.on_epoch_end(epoch, logs)
    for cb in callbacks:
        cb.on_train_end(history.history)
    if monitor and report_dir:
        timer.write_report(report_dir)
    timer.close()
    if session is not None:
        session.reports.extend(history.monitor_reports)
    return history


def evaluate(model: torch.nn.Module, loss_fn: Callable, data, *, global_batch_size: int,
             strategy: Strategy | None = None, metrics: Sequence = ("accuracy",),
             mixed_precision: str | None = None, prefix: str = "") -> dict[str, float]:
    """Loss and metrics of ``model`` over every example of ``data`` exactly once, across all replicas.

    ``data`` is a map-style dataset of ``(x, y)``; replica r evaluates examples r, r + N, ... and the sums are
    reduced once at the end, so the result equals a single-replica evaluation. Returns ``{name: mean}``.
    """
    strategy = strategy or _default_strategy(model)
    data = as_map_dataset(data)
    per_replica = per_replica_batch_size(global_batch_size, strategy.num_replicas_in_sync)
    feed = evaluation_shard(data, per_replica_batch_size=per_replica, num_replicas=strategy.num_replicas_in_sync,
                            rank=strategy.replica_id_in_sync, device=strategy.device)
    sums = MetricSums(resolve(metrics), strategy.device)
    was_training = model.training
    model.eval()
    x = None
    with torch.no_grad(), _autocast(strategy.device, mixed_precision):
        for batch in feed:
            x, y = _split(batch)
            outputs = model(x)
            sums.update(loss_fn(outputs, y), outputs, y)
        # A sharded model's forward all-gathers: replicas with a batch fewer run a discarded one to stay in step.
        for _ in range(_lockstep_padding(strategy, len(data), per_replica)):
            model(x if x is not None else _split(next(iter(evaluation_shard(
                data, per_replica_batch_size=1, num_replicas=1, rank=0, device=strategy.device))))[0])
    model.train(was_training)
    return sums.result(strategy, prefix)


def _lockstep_padding(strategy: Strategy, examples: int, per_replica: int) -> int:
    """Forward passes this replica must add so that it runs as many as replica 0 (which has the most)."""
    if not getattr(strategy, "forward_is_collective", False):
        return 0
    n, rank = strategy.num_replicas_in_sync, strategy.replica_id_in_sync
    most = -(-len(range(0, examples, n)) // per_replica)
    return most - -(-len(range(rank, examples, n)) // per_replica)
