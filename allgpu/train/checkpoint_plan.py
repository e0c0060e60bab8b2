"""Checkpointing inside ``fit``: save every N optimizer steps and at each epoch end; resume automatically.

A resumed run continues from the input position saved with the model (epoch, step within the epoch, shuffling
seed) and the RNG states, so with the same or a different number of replicas it trains on exactly the examples
not yet seen that epoch: none skipped, none repeated. This is what makes ``allgpu run --max-restarts`` recover
a job whose replica was killed, without user code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from allgpu.data import DistributedDataset


@dataclass
class ResumePoint:
    """Where training continues: the epoch, the optimizer steps done, and the history so far."""

    epoch: int = 0
    global_step: int = 0
    history: dict = field(default_factory=dict)
    history_epochs: list = field(default_factory=list)
    path: str | None = None


class CheckpointPlan:
    """Saves and restores ``fit``'s state in ``directory`` (see :mod:`allgpu.checkpoint`).

    Args:
        directory: checkpoint folder; None turns checkpointing off.
        every: save after every this many optimizer steps; None saves at epoch ends only.
        keep: newest verified checkpoints to keep.
    """

    def __init__(self, directory, *, every: int | None, keep: int, strategy, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, data):
        if every is not None and every < 1:
            raise ValueError(f"checkpoint_every={every}; expected a positive number of optimizer steps, or None.")
        self.directory = directory
        self.every = every
        self.keep = keep
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.data = data

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def restore(self) -> ResumePoint:
        """Load the newest verified checkpoint, if any; otherwise start from scratch."""
        if not self.enabled:
            return ResumePoint()
        from allgpu import checkpoint

        if checkpoint.latest_checkpoint(self.directory) is None:
            return ResumePoint()
        state = checkpoint.restore(self.directory, model=self.model, optimizer=self.optimizer,
                                   map_location=self.strategy.device)
        checkpoint.restore_rng(state, self.strategy.replica_id_in_sync)
        epoch = state.epoch
        if state.data_state and isinstance(self.data, DistributedDataset):
            self.data.load_state_dict(state.data_state)
            epoch = int(state.data_state["epoch"])
        extra = state.extra or {}
        return ResumePoint(epoch, state.step, dict(extra.get("history", {})), list(extra.get("history_epochs", [])),
                           str(state.path))

    def after_step(self, epoch: int, global_step: int, history) -> None:
        if self.enabled and self.every and global_step % self.every == 0:
            self.save(epoch, global_step, history)

    def save(self, epoch: int, global_step: int, history) -> None:
        from allgpu import checkpoint

        data_state = self.data.state_dict() if isinstance(self.data, DistributedDataset) else None
        checkpoint.save(self.directory, model=self.model, optimizer=self.optimizer, epoch=epoch, step=global_step,
                        data_state=data_state, keep=self.keep,
                        extra={"history": history.history, "history_epochs": history.epoch})
