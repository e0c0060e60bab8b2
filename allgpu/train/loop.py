"""``fit`` and ``evaluate``: a Keras-like training loop on any strategy.

``fit`` distributes the data, runs forward and backward on each replica (gradients are averaged by the
strategy's gradient sync during backward), steps the optimizer, reduces metrics across replicas once per epoch,
and shows progress on replica 0. With ``accumulation_steps=k`` it all-reduces once per k micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from allgpu.errors import ArgumentError
from allgpu.keras.tf_data import is_tf_dataset
from allgpu.core.data import (DistributedDataset, PerReplicaInput, as_map_dataset, evaluation_shard,
                         per_replica_batch_size)
from allgpu.core.data_rng import seeded
from allgpu.core.one_program import fingerprint
from allgpu.runtime.live import check_supported, mirror_pending
from allgpu.monitor import StepMonitor, session as monitor_session
from allgpu.strategies.base.context import get_strategy, has_strategy
from allgpu.strategies.base.strategy import Strategy
from allgpu.core.memory_fit import warn_if_too_large
from allgpu.strategies.one_device import OneDeviceStrategy
from allgpu.train.checkpoint_plan import CheckpointPlan, ResumePoint
from allgpu.train.epoch import EpochRunner, split_batch
from allgpu.train.metrics import MetricSums, resolve
from allgpu.train.precision import Precision
from allgpu.train.progress import Callback, EpochProgress

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


def _default_strategy(model: torch.nn.Module) -> Strategy:
    if has_strategy():  # fit called inside strategy.scope() without strategy=: that strategy, as Keras' fit in TF
        return get_strategy()
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    return OneDeviceStrategy(str(device))


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, train_data, *,
        epochs: int, global_batch_size: int, strategy: Strategy | None = None, metrics: Sequence = ("accuracy",),
        validation_data=None, accumulation_steps: int = 1, mixed_precision: str | None = None,
        callbacks: Iterable[Callback] = (), shuffle: bool = True, seed: int = 0, num_workers: int | str = "auto",
        verbose: int = 1, max_steps_per_epoch: int | None = None, checkpoint_dir=None,
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = True,
        monitor: bool = False, report_dir=None, compile: bool | dict = False,
        optimizer_in_backward: bool = False) -> History:
    """Train ``model`` for ``epochs`` epochs on every replica of ``strategy``.

    Args:
        model, optimizer: built inside ``strategy.scope()`` (a MirroredStrategy raises NotMirroredError otherwise).
        loss_fn: ``loss_fn(outputs, targets) -> scalar`` averaged over the batch (e.g. ``nn.CrossEntropyLoss()``).
        train_data: a map-style dataset of ``(x, y)`` examples (or a ``(x, y)`` tuple of tensors, or a DataLoader
            whose dataset is used, keeping its drop_last), the result of ``strategy.distribute_dataset``, or a ``tf.data`` dataset
            batched by ``global_batch_size`` (split as ``tf.distribute`` splits it; ``shuffle``, ``seed`` and
            ``num_workers`` are then the pipeline's own).
        global_batch_size: examples per micro-step across all replicas; must divide by ``num_replicas_in_sync``.
            With ``accumulation_steps=k`` the optimizer sees ``k * global_batch_size`` examples a step.
        strategy: the strategy to train on; default the one whose ``scope()`` is open here
            (``allgpu.get_strategy()``), else a ``OneDeviceStrategy`` on the model's device.
        metrics: names (``"accuracy"``: of the outputs, or of their ``logits`` for a Hugging Face model's
            ``ModelOutput``, a dict or a tuple's first element) or callables ``fn(outputs, targets) -> (total, count)``.
        validation_data: a map-style dataset evaluated after each epoch (``val_`` metrics).
        accumulation_steps: micro-batches per optimizer step; one all-reduce per step, not per micro-batch.
        mixed_precision: None, ``"bf16"`` (autocast) or ``"fp16"`` (autocast and loss scaling, CUDA only).
        callbacks: :class:`allgpu.train.Callback` objects, called on every replica.
        max_steps_per_epoch: stop each epoch early after this many micro-steps (smoke runs, benchmarks).
        checkpoint_dir: save model, optimizer, input position and RNG states here at each epoch end (and every
            ``checkpoint_every`` optimizer steps); with ``resume=True`` a run finding a checkpoint there continues
            from it exactly (the way ``allgpu run --max-restarts`` recovers from a killed replica).
        keep_checkpoints: newest checkpoints kept.
        verbose: as Keras's: 0 silent; 1 (or True) one line per epoch, the monitor's table once at the end (and
            when a finding first appears or changes), each finding on one line naming ``allgpu doctor --explain
            ID``; 2 the table and every finding's full text after each epoch.
        monitor: time every step's phases on every replica and print (replica 0, see ``verbose``) a per-replica
            table and the diagnosis of why a device idles (:class:`allgpu.monitor.StepMonitor`); reports are in
            ``history.monitor_reports``.
        report_dir: with ``monitor``, write ``monitor.json`` and ``monitor.png`` here at the end (replica 0).
        compile: True to train through ``strategy.compile(model)`` (``torch.compile`` with the graph split at
            gradient-bucket boundaries, so all-reduce overlaps backward); a dict passes ``torch.compile``
            arguments (``{"backend": "aot_eager", "mode": "max-autotune"}``). Evaluation stays eager.
        optimizer_in_backward: step the optimizer on each gradient bucket as soon as its all-reduce completes,
            inside backward (see :meth:`Strategy.optimizer_in_backward`); parameters equal the ordinary step.

    Returns:
        :class:`History` with ``loss``, each metric, ``val_*`` and ``samples_per_second`` per epoch.

    Raises:
        ValueError: a bad argument (the message names it). NotMirroredError: see above.
    """
    strategy = strategy or _default_strategy(model)
    check_supported("fit", strategy)
    mirror_pending()  # training inside an open scope() trains mirrored parameters
    warn_if_too_large(strategy, model, optimizer)  # on CUDA: would not fit mirrored, would sharded
    session = monitor_session.current()
    if session is not None:  # allgpu doctor --run: the session bounds the run and turns the monitor on
        monitor = True
        epochs, max_steps_per_epoch, report_dir = session.bound(max_steps_per_epoch, report_dir)
    if epochs < 1:
        raise ArgumentError(f"epochs={epochs}; expected a positive number of epochs.")
    if optimizer_in_backward and mixed_precision == "fp16":
        raise ArgumentError("optimizer_in_backward=True with mixed_precision='fp16': the loss scaler must see every "
                            "gradient before any step. Fix: mixed_precision='bf16' or optimizer_in_backward=False.")
    data = _distributed(strategy, train_data, global_batch_size, shuffle, seed, num_workers)
    precision = Precision(strategy.device, mixed_precision)
    acc = strategy.accumulate(accumulation_steps)
    acc.reset()
    plan = CheckpointPlan(checkpoint_dir, every=checkpoint_every, keep=keep_checkpoints, strategy=strategy,
                          model=model, optimizer=optimizer, data=data)
    point = plan.restore() if resume else ResumePoint()
    point.announce(epochs, strategy, verbose)
    history = History(point.history, point.history_epochs)
    progress = EpochProgress(verbose and strategy.is_chief, epochs, _steps_per_epoch(data, max_steps_per_epoch))
    timer = StepMonitor(strategy, num_workers=getattr(data, "num_workers", None), enabled=bool(monitor),
                        model=model, optimizer=optimizer,
                        device_memory=session.device_memory if session is not None else None)
    runner = EpochRunner(_compiled(model, strategy, compile), optimizer, loss_fn, strategy, precision, acc, timer,
                         plan, progress,
                         list(callbacks), max_steps_per_epoch,
                         step_in_backward=bool(optimizer_in_backward))
    end = _EpochEnd(strategy, model, loss_fn, validation_data, global_batch_size, metrics, mixed_precision,
                    plan, progress, verbose)
    for cb in runner.callbacks:
        cb.on_train_begin({})
    if optimizer_in_backward:
        strategy.optimizer_in_backward(optimizer)
    try:
        global_step = _train(runner, end, data, metrics, progress, timer, history, point, epochs)
    finally:
        if optimizer_in_backward:
            strategy.optimizer_in_backward(None)
    end.finish(history)
    if monitor and report_dir:
        timer.write_report(report_dir)
    timer.close()
    if session is not None:
        session.reports.extend(history.monitor_reports)
    return history


def _train(runner, end, data, metrics, progress, timer, history, point, epochs) -> int:
    """The epochs of ``fit``; returns the optimizer steps done. Collective (every replica runs it)."""
    strategy, model, global_step = runner.strategy, end.model, point.global_step
    for epoch in range(point.epoch, epochs):
        model.train()
        for cb in runner.callbacks:
            cb.on_epoch_begin(epoch, {})
        sums = MetricSums(resolve(metrics), strategy.device)
        progress.start_epoch(epoch)
        seen, global_step, elapsed = runner.run(epoch, data, sums, global_step, history)
        logs = end(epoch, sums, seen, elapsed, global_step, history, timer.end_epoch())
        for cb in runner.callbacks:
            cb.on_epoch_end(epoch, logs)
    for cb in runner.callbacks:
        cb.on_train_end(history.history)
    return global_step


def _compiled(model: torch.nn.Module, strategy: Strategy, compile: bool | dict) -> torch.nn.Module:
    if compile is False or compile is None:
        return model
    if compile is True:
        return strategy.compile(model)
    if isinstance(compile, dict):
        return strategy.compile(model, **compile)
    raise ArgumentError(f"compile={compile!r}; expected True, False or a dict of torch.compile arguments.")


def _distributed(strategy, train_data, global_batch_size, shuffle, seed, num_workers):
    if isinstance(train_data, (DistributedDataset, PerReplicaInput)):
        return train_data
    if is_tf_dataset(train_data):  # its batch(B) is the global batch; the pipeline shuffles (docs/tf_data.md)
        return strategy.distribute_dataset(train_data, global_batch_size)
    # A DataLoader's drop_last=False keeps its short last batch, split unevenly and weighted by share (sampler.py).
    drop = train_data.drop_last if isinstance(train_data, torch.utils.data.DataLoader) else None
    return strategy.distribute_dataset(train_data, global_batch_size, shuffle=shuffle, seed=seed,
                                       num_workers=num_workers, drop_remainder=drop)


def _steps_per_epoch(data, max_steps: int | None) -> int | None:
    try:
        steps = len(data)
    except TypeError:  # an iterable of unknown length (a generator, a filtered or infinite tf.data pipeline)
        steps = None
    if max_steps is not None and steps is not None:
        steps = min(steps, max_steps)
    return steps


@dataclass
class _EpochEnd:
    """What happens once an epoch's steps are done: reduce metrics and throughput, validate, print the monitor's
    report, save a checkpoint, close the progress bar. Collective: every replica calls it."""

    strategy: Strategy
    model: torch.nn.Module
    loss_fn: Callable
    validation_data: object
    global_batch_size: int
    metrics: Sequence
    mixed_precision: str | None
    plan: CheckpointPlan
    progress: EpochProgress
    verbose: int
    _shown: frozenset = frozenset()  # the finding ids printed so far
    _last_printed: bool = False

    def __call__(self, epoch: int, sums: MetricSums, seen: int, elapsed: float, global_step: int, history,
                 report) -> dict[str, float]:
        strategy = self.strategy
        # The slowest replica's time, so every replica reports the same throughput.
        elapsed = float(strategy.reduce("max", elapsed))
        logs = sums.result(strategy)
        logs["samples_per_second"] = float(strategy.reduce("sum", float(seen))) / max(elapsed, 1e-9)
        if self.validation_data is not None:
            logs.update(evaluate(self.model, self.loss_fn, self.validation_data,
                                 global_batch_size=self.global_batch_size, strategy=strategy, metrics=self.metrics,
                                 mixed_precision=self.mixed_precision, prefix="val_"))
        history.append(epoch, logs)
        self.progress.end_epoch("  ".join(f"{v:,.0f} samples/s" if k == "samples_per_second" else f"{k} {v:.4g}"
                                          for k, v in logs.items()))
        if report is not None:  # after the epoch's progress line, which it explains
            history.monitor_reports.append(report)
            self._show(report)
        if self.plan.enabled:
            self.plan.save(epoch + 1, global_step, history)
        return logs


    def _show(self, report) -> None:
        """verbose=2: every epoch's table and full diagnosis; verbose=1: a finding's line when it first appears
        (a finding that comes and goes is shown once), the table once at the end (:meth:`finish`)."""
        self._last_printed = False
        if not (self.strategy.is_chief and self.verbose):
            return
        ids = frozenset(f.id for f in report.diagnosis)
        if int(self.verbose) >= 2:
            report.print(self.progress.console)
        else:
            for finding, line in zip(report.diagnosis, report.findings_lines()):
                if finding.id not in self._shown:
                    self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        self._shown = self._shown | ids
        self._last_printed = int(self.verbose) >= 2

    def finish(self, history) -> None:
        """At the end of ``fit`` (verbose=1): the last epoch's table and findings, unless just printed."""
        reports = history.monitor_reports
        if reports and self.strategy.is_chief and int(self.verbose) == 1 and not self._last_printed:
            reports[-1].print(self.progress.console, detailed=False)


def evaluate(model: torch.nn.Module, loss_fn: Callable, data, *, global_batch_size: int,
             strategy: Strategy | None = None, metrics: Sequence = ("accuracy",),
             mixed_precision: str | None = None, prefix: str = "") -> dict[str, float]:
    """Loss and metrics of ``model`` over every example of ``data`` exactly once, across all replicas.

    ``data`` is a map-style dataset of ``(x, y)``; replica r evaluates examples r, r + N, ... and the sums are
    reduced once at the end, so the result equals a single-replica evaluation. Returns ``{name: mean}``.
    """
    strategy = strategy or _default_strategy(model)
    mirror_pending()
    data = as_map_dataset(data)
    examples = seeded(data, 0)
    strategy._one_program.same_data((type(data).__name__, len(data)),
                                    lambda: fingerprint(len(examples), examples.__getitem__), "evaluate")
    per_replica = per_replica_batch_size(global_batch_size, strategy.num_replicas_in_sync)
    feed = evaluation_shard(data, per_replica_batch_size=per_replica, num_replicas=strategy.num_replicas_in_sync,
                            rank=strategy.replica_id_in_sync, device=strategy.device)
    sums = MetricSums(resolve(metrics), strategy.device)
    was_training = model.training
    model.eval()
    x = None
    with torch.no_grad(), Precision(strategy.device, mixed_precision).autocast():
        for batch in feed:
            x, y = split_batch(batch)
            outputs = model(x)
            sums.update(loss_fn(outputs, y), outputs, y)
        # A sharded model's forward all-gathers: replicas with a batch fewer run a discarded one to stay in step.
        for _ in range(_lockstep_padding(strategy, len(data), per_replica)):
            model(x if x is not None else split_batch(next(iter(evaluation_shard(
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
