"""One decision to stop ``fit`` for every replica: ``model.stop_training`` agreed across replicas.

Keras's ``fit`` ends when a callback sets ``model.stop_training = True``; it checks after each batch's callbacks and
after each epoch's. Under ``tf.distribute``'s ``MirroredStrategy`` one program runs the callbacks once, so there is
one decision. Here every replica runs them: with the same global logs, ``EarlyStopping`` decides the same
everywhere, but a callback deciding from anything else (a time budget such as TensorFlow Addons'
``TimeStopping``, a stop file, a signal handler, a callback given to replica 0 alone as in Horovod's examples)
can stop one replica and not the other, which then waited in the next gradient all-reduce until the timeout and
was told a collective had been called on some replicas only. :class:`AgreeStop`, the last callback, makes every
replica stop when any replica asked to.
"""

from __future__ import annotations

import keras
import torch

from allgpu.keras.fit_args import overrides_any

_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


class AgreeStop(keras.callbacks.Callback):
    """Sets ``model.stop_training`` on every replica when it is set on any (a collective at each epoch's end, and
    at each batch's end when ``per_batch``).

    Args:
        strategy: the allgpu strategy (its ``reduce``).
        per_batch: also agree after every batch (a callback may set ``stop_training`` there: Keras then ends the
            epoch at once). The same value on every replica (:func:`stop_hooks_per_batch`).
    """

    def __init__(self, strategy, per_batch: bool):
        super().__init__()
        self.strategy = strategy
        if per_batch:
            self.on_train_batch_end = self._agree_after_batch

    def _agree(self) -> None:
        mine = torch.tensor(int(bool(self.model.stop_training)), dtype=torch.int64, device=self.strategy.device)
        if int(self.strategy.reduce("max", mine)):
            self.model.stop_training = True

    def _agree_after_batch(self, batch, logs=None):
        self._agree()

    def on_epoch_end(self, epoch, logs=None):
        self._agree()


def stop_hooks_per_batch(callbacks: list, strategy) -> bool:
    """Whether any replica was given a callback with a batch hook of training (where it could set
    ``stop_training`` mid-epoch). A collective: every replica gets the same answer."""
    mine = overrides_any([getattr(cb, "inner", cb) for cb in callbacks], _BATCH_HOOKS)  # a writer's own, unwrapped
    flag = torch.tensor(int(mine), dtype=torch.int64, device=strategy.device)
    return bool(int(strategy.reduce("max", flag)))
