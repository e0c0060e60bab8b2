"""``model.save_pretrained(d)`` of a mirrored Hugging Face model written once, as one program writes it.

A Hugging Face model (transformers' ``PreTrainedModel``, diffusers' ``ModelMixin``, PEFT's ``PeftModel``) saves
into a folder with ``save_pretrained``. Called on every replica, as an Accelerate script ported to allgpu calls it
(``save_pretrained(d, is_main_process=strategy.is_chief)``), transformers 5 writes from ``torch.distributed`` rank 0
only and returns at once elsewhere: a replica that loads the folder right after
(``from_pretrained(d)``) found no weights, now and then (1 of 4 runs here, ``OSError: Error no file named
model.safetensors``); transformers 4 and diffusers write from every replica into the same files.

:func:`offer` gives a mirrored root with such a method an instance ``save_pretrained``
(:class:`SavePretrained`): replica 0 runs the model's own method into the folder, in place (the folder keeps
its other files: a tokenizer's, checkpoints), and the others, calling it too, return once it is complete
(:class:`allgpu.core.one_writer.OneWriter`); a replica naming its own folder runs the method there itself. Its
class is untouched; pickling and ``copy.deepcopy`` drop it (:mod:`allgpu.core.plain_pickle`). Under
``FullyShardedStrategy`` every replica's call first gathers the weights (a collective) for replica 0 to save:
the model's own method stopped at safetensors' bare ``RuntimeError: Attempted to access the data pointer on an
invalid python storage`` on the shards. The reason is in
``docs/architecture.md``.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from torch import nn

from allgpu.core.plain_pickle import pickle_plain


def offer(root: nn.Module, writer, full_state: Callable[[nn.Module], dict] | None = None) -> None:
    """Give ``root``, and without ``full_state`` each of its submodules (``self.bert = AutoModel...`` inside a
    module of the user's, saved as ``model.bert.save_pretrained(d)``), the write-once ``save_pretrained`` if its
    class has a Hugging Face one; idempotent. ``full_state`` (``FullyShardedStrategy.full_state_dict``, a
    collective) gathers a sharded root's weights for replica 0 to save, unless the call passes its own
    ``state_dict``."""
    for module in [root] if full_state is not None else root.modules():
        cls = type(module)
        if "save_pretrained" not in module.__dict__ and callable(getattr(cls, "save_pretrained", None)) \
                and callable(getattr(cls, "from_pretrained", None)):
            module.__dict__["save_pretrained"] = SavePretrained(module, writer, full_state)
            pickle_plain(module)  # torch.save(model) / copy.deepcopy: without it (it holds the job's store)


class SavePretrained:
    """The instance ``save_pretrained``: same arguments as the class's; a collective-free wait on replicas but 0
    (replica 0 never waits). Raises what the model's own method raises, on replica 0, and a
    :class:`~allgpu.errors.CheckpointError` naming it on the others."""

    def __init__(self, module: nn.Module, writer, full_state: Callable[[nn.Module], dict] | None = None):
        self._ref = weakref.ref(module)  # no cycle through the module's __dict__
        self._writer, self._full_state = writer, full_state
        self.__doc__ = type(module).save_pretrained.__doc__

    def __call__(self, save_directory, *args: Any, **kwargs: Any):
        module = self._ref()
        method = type(module).save_pretrained
        if self._full_state is not None and kwargs.get("state_dict") is None:
            kwargs["state_dict"] = self._full_state(module)  # a collective: every replica is here
        return self._writer.write(save_directory, lambda target: method(module, target, *args, **kwargs),
                                  "save_pretrained", in_place=True)
