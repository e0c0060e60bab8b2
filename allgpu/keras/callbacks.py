"""Keras callbacks on several replicas: files are written by replica 0 only; restores happen on every replica.

Every replica runs the same callbacks with the same (global) logs, so decisions such as ``EarlyStopping``'s are
identical everywhere. For a model sharded across replicas (``FullyShardedStrategy``), saving gathers the shards,
a collective, so ``ModelCheckpoint`` and ``BackupAndRestore`` run on every replica instead
(:class:`EveryReplicaSaves`: replica 0 writes where asked, the others into a temporary folder). Callbacks that write files (``ModelCheckpoint``, ``BackupAndRestore``, ``CSVLogger``,
``TensorBoard``) are wrapped in :class:`ChiefWrites`: on replicas other than 0 their hooks are not called, except
``BackupAndRestore.on_train_begin``, which restores the backup on every replica. A barrier after each epoch's
writes (and before a restore) means no replica reads a file replica 0 is still writing. This is
``tf.distribute``'s rule for Keras callbacks under ``MultiWorkerMirroredStrategy`` (the chief writes).

Scripts moved from Horovod or DDP give a writer to replica 0 only (``if hvd.rank() == 0:
callbacks.append(ModelCheckpoint(...))``): the barriers are :class:`Meet` callbacks added when replica 0 has a
writer, the same on every replica whatever each one was given (before, each wrapper had its own barriers, and a
writer on replica 0 alone hung the job at the end of the first epoch). What cannot be one-sided is refused before
training (:func:`agree_writers`): a ``BackupAndRestore`` some replicas lack (each replica restores), and any
difference under a sharded model (saving gathers from every replica).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import shutil
import tempfile

import keras
import torch

from allgpu.errors import UnsupportedError
from allgpu.keras.stopping import AgreeStop, stop_hooks_per_batch

WRITERS = (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore, keras.callbacks.CSVLogger,
           keras.callbacks.TensorBoard)
SAVERS = (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)


_COORDINATED: contextvars.ContextVar[bool] = contextvars.ContextVar("allgpu_keras_coordinated", default=False)


def coordinated() -> bool:
    """Whether this call runs inside a hook of :class:`ChiefWrites` / :class:`EveryReplicaSaves`, which arrange
    their writes themselves; a ``model.save`` elsewhere during ``fit`` (your own callback, on every replica) is
    written once, by replica 0 (``KerasReplica.save``)."""
    return _COORDINATED.get()


def _coordinating(hook):
    @functools.wraps(hook)
    def run(self, *args, **kwargs):
        token = _COORDINATED.set(True)
        try:
            return hook(self, *args, **kwargs)
        finally:
            _COORDINATED.reset(token)
    return run


@contextlib.contextmanager
def chief_prints(rank: int):
    """Keras's own messages (``EarlyStopping`` / ``ReduceLROnPlateau`` / ``BackupAndRestore`` with ``verbose=1``,
    anything through ``keras.utils.io_utils.print_msg``) are printed by replica 0 only, as a ``tf.distribute``
    program prints them once: on other replicas Keras's interactive logging is off (its messages go to absl's
    INFO log) for the duration of the call, then restored. Your own ``print`` is untouched."""
    if rank == 0 or not keras.config.is_interactive_logging_enabled():
        yield
        return
    keras.config.disable_interactive_logging()
    try:
        yield
    finally:
        keras.config.enable_interactive_logging()


class _Wrapping(keras.callbacks.Callback):
    """A callback that drives ``inner`` (a file-writing Keras callback) for the replicas of ``strategy``."""

    def __init__(self, inner: keras.callbacks.Callback, strategy):
        super().__init__()
        self.inner = inner
        self.strategy = strategy
        self.chief = strategy.is_chief

    def set_model(self, model):
        super().set_model(model)
        self.inner.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.inner.set_params(params)


class ChiefWrites(_Wrapping):
    """Calls ``inner``'s hooks on replica 0 only (restores everywhere); the replicas meet around them (:class:`Meet`).

    Args:
        inner: a file-writing Keras callback.
        strategy: the allgpu strategy (its ``is_chief`` and ``barrier()``).
    """

    def set_model(self, model):
        keras.callbacks.Callback.set_model(self, model)
        if self.chief or isinstance(self.inner, keras.callbacks.BackupAndRestore):
            self.inner.set_model(model)  # TensorBoard's writes its graph summary there: replica 0 only

    def on_train_begin(self, logs=None):  # after Meet's barrier: a backup replica 0 wrote before is complete
        if self.chief or isinstance(self.inner, keras.callbacks.BackupAndRestore):
            self.inner.on_train_begin(logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.chief:
            self.inner.on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        if self.chief:
            self.inner.on_train_end(logs)


class EveryReplicaSaves(_Wrapping):
    """A saving callback on a sharded model: every replica runs it, replica 0 writes where it was told.

    Reading a sharded variable gathers it from every replica (a collective), so replica 0 cannot save alone. The
    other replicas run the same hooks with the same logs (so the same saves, in the same order) but write into a
    private temporary folder, removed at the end of training; ``BackupAndRestore`` restores from replica 0's
    folder on every replica (each keeps its shard of the restored weights).
    """

    def __init__(self, inner: keras.callbacks.Callback, strategy):
        super().__init__(inner, strategy)
        self._real: dict[str, str] = {}
        self._scratch: str | None = None

    def on_train_begin(self, logs=None):
        self.strategy.barrier()  # a backup written by a previous fit on replica 0 is complete
        self.inner.on_train_begin(logs)  # restores (BackupAndRestore) from replica 0's files, everywhere
        if not self.chief:
            self._redirect()

    def on_epoch_end(self, epoch, logs=None):
        self.inner.on_epoch_end(epoch, logs)
        self.strategy.barrier()

    def on_train_end(self, logs=None):
        self.inner.on_train_end(logs)
        self.strategy.barrier()
        if self._real:
            for name, value in self._real.items():
                setattr(self.inner, name, value)
            self._real = {}
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _redirect(self) -> None:
        self._scratch = tempfile.mkdtemp(prefix="allgpu-keras-replica-")
        inner = self.inner
        if isinstance(inner, keras.callbacks.ModelCheckpoint):
            self._real = {"filepath": inner.filepath}
            inner.filepath = os.path.join(self._scratch, os.path.basename(inner.filepath))
            return
        names = ("backup_dir", "_weights_path", "_training_metadata_path", "_prev_weights_path",
                 "_prev_training_metadata_path")
        self._real = {name: getattr(inner, name) for name in names}
        real_dir = inner.backup_dir
        for name in names:  # the same files, under the scratch folder
            setattr(inner, name, self._scratch + self._real[name][len(real_dir):])


def _passed_on(name):
    def hook(self, *args, **kwargs):
        getattr(self.inner, name)(*args, **kwargs)
    hook.__name__ = name
    return hook


def _chief_only(name):
    def hook(self, *args, **kwargs):
        if self.chief:
            getattr(self.inner, name)(*args, **kwargs)
    hook.__name__ = name
    return hook


for _name in ("on_epoch_begin", "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
              "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
              "on_predict_batch_begin", "on_predict_batch_end"):
    setattr(ChiefWrites, _name, _chief_only(_name))
    setattr(EveryReplicaSaves, _name, _passed_on(_name))
for _cls in (ChiefWrites, EveryReplicaSaves):
    for _name in [name for name in vars(_cls) if name.startswith("on_")]:
        setattr(_cls, _name, _coordinating(getattr(_cls, _name)))


class Meet(keras.callbacks.Callback):
    """Every replica meets replica 0 around its writes: first, before any restore at the start of training; last,
    after each epoch's writes and after the final ones (so no replica reads a file being written)."""

    def __init__(self, strategy, first: bool):
        super().__init__()
        self.strategy = strategy
        self.first = first

    def on_train_begin(self, logs=None):
        if self.first:
            self.strategy.barrier()

    def on_epoch_end(self, epoch, logs=None):
        if not self.first:
            self.strategy.barrier()

    def on_train_end(self, logs=None):
        if not self.first:
            self.strategy.barrier()


def agree_writers(listed: list, strategy, sharded: bool) -> bool:
    """Whether replica 0 was given a file-writing callback (then the replicas meet around its writes). A
    collective (one all-gather of each replica's count of each writer class).

    Raises:
        UnsupportedError: a ``BackupAndRestore`` given to some replicas only (each replica restores from it), or,
            under a sharded model, saving callbacks that differ between replicas (saving gathers from all).
    """
    mine = torch.tensor([[sum(isinstance(cb, kind) for cb in listed) for kind in WRITERS]], dtype=torch.int64)
    counts = strategy.gather(mine.to(strategy.device), axis=0).cpu()
    differs = [r for r in range(counts.shape[0]) if not torch.equal(counts[r], counts[0])]
    restore = WRITERS.index(keras.callbacks.BackupAndRestore)
    unequal = [r for r in differs if sharded or bool(counts[r, restore]) != bool(counts[0, restore])]
    if unequal:
        what = "saving callbacks (saving a sharded model gathers it from every replica)" if sharded else \
            "BackupAndRestore (every replica restores from it)"
        raise UnsupportedError(
            f"replicas 0 and {unequal[0]} were given different {what}: {counts[0].tolist()} and "
            f"{counts[unequal[0]].tolist()} of {[k.__name__ for k in WRITERS]}. Fix: pass them on every replica "
            "(allgpu writes their files from replica 0 only); only ModelCheckpoint, CSVLogger and TensorBoard may be "
            "given to replica 0 alone.")
    return bool(counts[0].sum())


class EpochSync(keras.callbacks.Callback):
    """Tells the sharded input which epoch starts, so its shuffle order is ``seed + epoch`` on every replica
    (also after ``BackupAndRestore`` resumes at a later epoch)."""

    def __init__(self, data):
        super().__init__()
        self.data = data

    def on_epoch_begin(self, epoch, logs=None):
        self.data.set_epoch(epoch)


def wrap_callbacks(callbacks, strategy, train_input,
                   sharded: bool = False) -> list | keras.callbacks.CallbackList | None:
    """The user's callbacks with file writers wrapped (several replicas), the epoch sync added first and
    :class:`~allgpu.keras.stopping.AgreeStop` last (training). A collective with several replicas
    (:func:`agree_writers`, :func:`~allgpu.keras.stopping.stop_hooks_per_batch`).

    A ``CallbackList`` (Keras passes one from ``fit`` to ``evaluate``) is returned unchanged.

    ``sharded``: the model's variables are sharded across replicas, so ``ModelCheckpoint`` and
    ``BackupAndRestore`` run on every replica (:class:`EveryReplicaSaves`) instead of replica 0 alone.
    """
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    wrapped = []
    many = strategy.num_replicas_in_sync > 1
    listed = list(callbacks or [])
    meet = many and agree_writers(listed, strategy, sharded)
    for cb in listed:
        if sharded and isinstance(cb, SAVERS) and many:
            wrapped.append(EveryReplicaSaves(cb, strategy))
            continue
        wrapped.append(ChiefWrites(cb, strategy) if many and isinstance(cb, WRITERS) else cb)
    if meet:
        wrapped = [Meet(strategy, first=True), *wrapped, Meet(strategy, first=False)]
    if train_input is not None:
        wrapped.insert(0, EpochSync(train_input))
        if many:  # last: after every callback that may set model.stop_training
            wrapped.append(AgreeStop(strategy, stop_hooks_per_batch(listed, strategy)))
    return wrapped
