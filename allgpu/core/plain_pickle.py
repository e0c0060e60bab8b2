"""A module carrying allgpu's hooks pickles as the module without them.

``torch.save(model, f)`` (pytorch/examples' word_language_model saves its best model so, then loads it with
``torch.load(f)`` under ``torch.serialization.safe_globals([its classes])``) and ``copy.deepcopy(model)`` (an EMA
copy, a "best model" snapshot) pickle the module's ``__dict__``, hook dictionaries included. A mirrored module
carries allgpu's hooks (the ``load_state_dict(assign=True)`` pair on its root, a scope's first-use hook), which
are closures or bound methods: pickling failed with ``Can't pickle local object 'watch_assign.<locals>.remember'``,
and a stream holding them would not load with ``weights_only=True`` (torch's default) or without allgpu anyway.

:func:`pickle_plain` gives such a module an instance ``__getstate__`` (pickle and ``copy`` look it up on the
instance, before ``nn.Module``'s): its class's state without allgpu's hook entries, without ``_allgpu_*``
attributes and the ``no_sync`` a mirrored root is given, and without itself, so the file is what torch saves for
the module never mirrored, and a deep copy is a plain, unmirrored module (mirror it with ``strategy.mirror`` to
train it). The live module keeps its hooks. A model ``FullyShardedStrategy`` sharded cannot be pickled (FSDP2's
generated class, shards): ``torch.save(model)`` of it is an ``UnsupportedError`` naming ``strategy.full_state_dict``.
The reason and the scope are in ``docs/architecture.md``.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict

from torch import nn

from allgpu.errors import UnsupportedError

_KEY = "__getstate__"


def pickle_plain(module: nn.Module) -> None:
    """Make ``module`` pickle (and deep-copy) without allgpu's hooks and attributes; idempotent."""
    if _KEY not in module.__dict__:
        module.__dict__[_KEY] = _PlainState(weakref.ref(module))


class _PlainState:
    """The instance ``__getstate__``: holds its module weakly (no cycle through the module's ``__dict__``)."""

    def __init__(self, ref: weakref.ref):
        self._ref = ref

    def __call__(self):
        module = self._ref()
        if _sharded(module):
            raise UnsupportedError(
                f"torch.save(model) of a model FullyShardedStrategy sharded: its class {type(module).__name__} is one "
                "FSDP2 generated and its parameters are shards, which PyTorch cannot pickle (a bare PicklingError). "
                "Fix: torch.save(strategy.full_state_dict(model), path) on every replica (replica 0 writes a plain "
                "state dict) and load it into a model built the same way; or allgpu.checkpoint.save for a sharded "
                "checkpoint.")
        state = type(module).__getstate__(module)
        if not isinstance(state, dict):
            return state  # a class's own state format: not ours to edit
        state = dict(state)  # nn.Module's is a copy; a class may return its __dict__ itself
        state.pop(_KEY, None)
        ours = {key for value in state.values() if _is_hook_dict(value)
                for key, hook in value.items() if _is_ours(hook)}
        for name, value in list(state.items()):
            if name.startswith("_allgpu_") or (callable(value) and not isinstance(value, nn.Module)
                                               and _is_ours(value)):
                del state[name]  # allgpu's attributes; model.no_sync, the strategy's
            elif ours and _is_hook_dict(value) and ours & value.keys():
                state[name] = OrderedDict((k, v) for k, v in value.items() if k not in ours)
        return state


def _sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def _is_hook_dict(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, int) for k in value)  # RemovableHandle ids


def _is_ours(hook) -> bool:
    """True for a hook allgpu registered: a function or bound method defined in an ``allgpu`` module, possibly
    in torch's ``_WrappedHook`` (``register_load_state_dict_pre_hook``) or a ``functools.partial``."""
    for _ in range(4):
        if isinstance(hook, functools.partial):
            hook = hook.func
        elif hasattr(hook, "hook") and type(hook).__name__ == "_WrappedHook":
            hook = hook.hook
        else:
            break
    fn = getattr(hook, "__func__", hook)
    return (getattr(fn, "__module__", None) or "").startswith("allgpu.")
