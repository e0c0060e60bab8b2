"""Checkpointing inside ``fit``: save every N optimizer steps and at each epoch end; resume automatically.

A resumed run continues from the input position saved with the model (epoch, step within the epoch, shuffling
seed) and the RNG states, so with the same or a different number of replicas it trains on exactly the examples
not yet seen that epoch: none skipped, none repeated. This is what makes ``allgpu run --max-restarts`` recover
a job whose replica was killed, without user code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from allgpu.errors import ArgumentError, warn_user
from allgpu.core.data import DistributedDataset
from allgpu.runtime.interrupt import note_checkpoints


@dataclass
class ResumePoint:
    """Where training continues: the epoch, the optimizer steps done, and the history so far."""

    epoch: int = 0
    global_step: int = 0
    history: dict = field(default_factory=dict)
    history_epochs: list = field(default_factory=list)
    path: str | None = None
    summary: str = ""  # what was resumed or why training starts from scratch, and what was skipped

    def announce(self, epochs: int, strategy, verbose: bool) -> None:
        """On every start with a checkpoint_dir, say (replica 0) what was resumed or why not; warn when the
        checkpoint already holds ``epochs`` or more, since ``fit`` will then train nothing."""
        if strategy.is_chief and verbose and self.summary:
            print(f"allgpu: {self.summary}", flush=True)
        if self.path and self.epoch >= epochs and strategy.is_chief:
            warn_user(f"fit(epochs={epochs}) has nothing to train: {self.path} already holds {self.epoch} "
                          "epochs. Fix: raise epochs, use another checkpoint_dir, or resume=False to start over.",
                          RuntimeWarning)


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
            raise ArgumentError(f"checkpoint_every={every}; expected a positive number of optimizer steps, or None.")
        self.directory = directory
        self.every = every
        self.keep = keep
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.data = data
        if directory is not None:  # before any training: a run that could not save must not start
            from allgpu.checkpoint import collective
            from allgpu.checkpoint.preflight import check_directory

            error = None
            if collective.rank() == 0:
                try:
                    check_directory(directory)
                except Exception as exc:
                    error = exc
            collective.agree(error, f"checking checkpoint_dir={str(directory)!r}")
            from allgpu.checkpoint.api import newest_on_disk

            note_checkpoints(lambda: newest_on_disk(directory))  # an interrupt names the newest one

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def restore(self) -> ResumePoint:
        """Load the newest verified checkpoint, if any; otherwise start from scratch. ``summary`` says which.

        Raises:
            CheckpointError: the newest verified checkpoint does not fit the model or optimizer (naming the keys):
                a different model is never resumed from, and never silently trained over.
        """
        if not self.enabled:
            return ResumePoint()
        from allgpu import checkpoint
        from allgpu.checkpoint import store
        from allgpu.checkpoint.format import CorruptCheckpointError
        from allgpu.errors import CheckpointError

        skipped, found = [], None
        for entry in store.entries(self.directory):
            try:
                store.verify(entry.path, use_cache=True)
                found = entry.path
                break
            except CorruptCheckpointError as exc:
                skipped.append(f"skipped {entry.path.name}: {str(exc).removeprefix(str(entry.path) + ': ')}")
        skip_note = "".join(f"; {s} (it will be moved to {store.CORRUPT_FOLDER}/ at the next save)" for s in skipped)
        if found is None:
            return ResumePoint(summary=f"no checkpoint to resume in {self.directory}: starting from scratch{skip_note}")
        try:
            state = checkpoint.restore(found, model=self.model, optimizer=self.optimizer,
                                       map_location=self.strategy.device)
        except CheckpointError as exc:
            raise CheckpointError(
                f"fit(checkpoint_dir={str(self.directory)!r}) found {found.name}, which was not saved from this model "
                f"and optimizer, so it cannot be resumed: {exc} Fix: a new checkpoint_dir for a different model, or "
                "resume=False to start over in this folder.") from exc
        checkpoint.restore_rng(state, self.strategy.replica_id_in_sync)
        epoch = state.epoch
        position = ""
        if state.data_state and isinstance(self.data, DistributedDataset):
            self.data.load_state_dict(state.data_state)
            epoch = int(state.data_state["epoch"])
            if state.data_state.get("step"):
                position = f", {state.data_state['step']} batches into epoch {epoch + 1}"
        extra = state.extra or {}
        summary = (f"resumed from {state.path} (saved by {state.world_size_at_save} replica"
                   f"{'s' if state.world_size_at_save != 1 else ''}): {epoch} epochs done{position}, "
                   f"{state.step} optimizer steps{skip_note}")
        return ResumePoint(epoch, state.step, dict(extra.get("history", {})), list(extra.get("history_epochs", [])),
                           str(state.path), summary)

    def after_step(self, epoch: int, global_step: int, history) -> None:
        if self.enabled and self.every and global_step % self.every == 0:
            self.save(epoch, global_step, history)

    def save(self, epoch: int, global_step: int, history) -> None:
        from allgpu import checkpoint

        data_state = self.data.state_dict() if isinstance(self.data, DistributedDataset) else None
        checkpoint.save(self.directory, model=self.model, optimizer=self.optimizer, epoch=epoch, step=global_step,
                        data_state=data_state, keep=self.keep,
                        extra={"history": history.history, "history_epochs": history.epoch})
