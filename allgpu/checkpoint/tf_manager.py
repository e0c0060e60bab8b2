"""``allgpu.checkpoint.CheckpointManager``: TensorFlow's ``tf.train.CheckpointManager`` (numbered saves in one
directory, the newest ``max_to_keep`` kept, the ``checkpoint`` state file kept current)."""

from __future__ import annotations

import os
from pathlib import Path

from allgpu.checkpoint import collective, tf_layout
from allgpu.checkpoint.tf_checkpoint import Checkpoint
from allgpu.errors import ArgumentError, ArgumentTypeError, UnsupportedError


class CheckpointManager:
    """Saves ``checkpoint`` as ``{directory}/{checkpoint_name}-{n}`` and deletes all but the newest ``max_to_keep``.

    Args:
        checkpoint: an :class:`allgpu.checkpoint.Checkpoint`.
        directory: where checkpoints and the ``checkpoint`` state file go (created by the first save).
        max_to_keep: newest checkpoints kept, an int >= 1; None keeps all.
        checkpoint_name: the file name before ``-n``, ``"ckpt"`` by default.
        step_counter / checkpoint_interval: with both, ``save()`` writes only when ``step_counter`` (an int or a
            0-d tensor read at save time) has advanced by ``checkpoint_interval`` since the last save.
        init_fn: called by :meth:`restore_or_initialize` when there is no checkpoint.

    A directory already holding checkpoints from an earlier run is picked up: ``checkpoints`` lists them and the
    numbering goes on after the restored ``save_counter``.

    Raises:
        TypeError / ValueError: bad arguments. UnsupportedError: ``keep_checkpoint_every_n_hours`` (not implemented).
    """

    def __init__(self, checkpoint: Checkpoint, directory: str | os.PathLike, max_to_keep: int | None,
                 keep_checkpoint_every_n_hours: float | None = None, checkpoint_name: str = "ckpt",
                 step_counter=None, checkpoint_interval: int | None = None, init_fn=None):
        if not isinstance(checkpoint, Checkpoint):
            raise ArgumentTypeError(f"CheckpointManager(checkpoint=...) got a {type(checkpoint).__name__}; expected an "
                                    "allgpu.checkpoint.Checkpoint(model=..., optimizer=...).")
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int)
                                        or max_to_keep < 1):
            raise ArgumentError(f"CheckpointManager(max_to_keep={max_to_keep!r}): expected an int >= 1, or None to "
                                "keep every checkpoint.")
        if keep_checkpoint_every_n_hours is not None:
            raise UnsupportedError("CheckpointManager(keep_checkpoint_every_n_hours=...) is not implemented in "
                                   "allgpu. Fix: max_to_keep=None keeps every checkpoint.")
        if (step_counter is None) != (checkpoint_interval is None):
            raise ArgumentError("CheckpointManager: step_counter and checkpoint_interval go together; give both or "
                                "neither.")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._name = checkpoint_name
        self._step_counter, self._interval, self._init_fn = step_counter, checkpoint_interval, init_fn
        self._last_step = None
        _, listed = tf_layout.read_state(Path(self._directory))
        self._checkpoints = [p for p in listed if Path(p).is_file()]

    @property
    def directory(self) -> str:
        """The directory given."""
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        """The Checkpoint given."""
        return self._checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints' paths, oldest first."""
        return list(self._checkpoints)

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in ``directory`` that verifies (a corrupt newer one is skipped with a warning),
        or None."""
        return tf_layout.latest(self._directory)

    def save(self, checkpoint_number: int | None = None, check_interval: bool = True, options=None) -> str | None:
        """Write the next checkpoint, drop the oldest beyond ``max_to_keep``, update the state file.

        A collective: every replica calls it; replica 0 writes and deletes, the others wait for it (a replica
        whose ``directory`` replica 0 does not write, such as a non-chief worker's temporary one, keeps its own
        copies there).

        Args:
            checkpoint_number: the ``n`` of the file name; default: the Checkpoint's ``save_counter`` after
                this save.

        Returns:
            the path written (a str), or None when ``step_counter`` has not advanced by ``checkpoint_interval``.
        """
        if self._interval is not None and check_interval:
            step = int(self._step_counter)
            if self._last_step is not None and step < self._last_step + self._interval:
                return None
            self._last_step = step
        self._checkpoint.save_counter += 1
        number = self._checkpoint.save_counter if checkpoint_number is None else int(checkpoint_number)
        path = os.path.join(self._directory, f"{self._name}-{number}")
        kept = [p for p in self._checkpoints if p != path] + [path]
        dropped = kept[:-self._max_to_keep] if self._max_to_keep is not None else []
        kept = kept[len(dropped):]
        self._checkpoint._write(path, record=True, keep=kept)
        if collective.rank() == 0 or self._checkpoint._wrote_copy:  # a copy of this replica's own is its to prune
            for old in dropped:
                Path(old).unlink(missing_ok=True)
        self._checkpoints = kept
        return path

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint and return its path; with none, call ``init_fn`` (if given), return None."""
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
            return latest
        if self._init_fn is not None:
            self._init_fn()
        return None
