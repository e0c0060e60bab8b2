"""The arguments of a Keras ``fit`` / ``evaluate`` call read as Keras reads them, for
:class:`allgpu.keras.replica.KerasReplica`: whether batch logs are shown, a batch's size, ``(x, y, sample_weight)``
unpacked, ``validation_split`` cut off."""

from __future__ import annotations


def shows_batch_logs(verbose, callbacks, *hooks: str) -> bool:
    """Whether a progress bar (``verbose`` 1 or "auto") or a callback overriding one of ``hooks`` reads each
    batch's logs, on this replica (:meth:`~allgpu.keras.replica.KerasReplica._agreed` makes it one answer for all)."""
    return verbose in (1, "auto", True) or overrides_any(callbacks, hooks)


def overrides_any(callbacks, hooks) -> bool:
    """Whether a callback in ``callbacks`` (a list, or Keras's ``CallbackList``) overrides one of ``hooks``."""
    from keras.src.utils.python_utils import is_default

    listed = callbacks.callbacks if hasattr(callbacks, "callbacks") else list(callbacks or [])
    return any(not is_default(getattr(cb, hook)) for cb in listed for hook in hooks)


def leading(x) -> int:
    from keras import tree

    return int(next(a for a in tree.flatten(x) if a is not None).shape[0])


def unpack(data) -> tuple:
    if isinstance(data, tuple) and 1 <= len(data) <= 3:
        return tuple(data) + (None,) * (3 - len(data))
    return data, None, None


def split_validation(x, y, sample_weight, fraction):
    """The last ``fraction`` of the arrays for validation, before any shuffling (as Keras's validation_split)."""
    from keras.src.trainers.data_adapters.array_slicing import train_validation_split

    return train_validation_split((x, y, sample_weight), validation_split=fraction)
