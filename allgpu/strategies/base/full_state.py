"""``strategy.full_state_dict(model)`` and ``torch.save`` of it called on every replica, as one program does.

``torch.save(strategy.full_state_dict(model), "model.pt")`` written the one-program way runs on every replica;
N replicas writing one file interleave into a corrupt one. ``torch.save`` has no hook for where it writes, so
:func:`install_torch_save` replaces ``torch.save`` (once, when a strategy of several replicas starts: Python
looks ``torch.save`` up before it evaluates the call's arguments) with a wrapper
that passes every call through unchanged, except one whose object is a :class:`FullStateDict` (or a dict holding
one at its top level) and whose target is a path: that one is written once, by replica 0, through the strategy's
:class:`allgpu.core.one_writer.OneWriter` (the others return once the file is complete), and as a plain ``dict``,
so ``torch.load(weights_only=True)`` reads it without allgpu. The reason and the scope are in
``docs/architecture.md``. A ``save`` bound before the strategy started (``from torch import save``) is not
wrapped: every replica then writes, as before.
"""

from __future__ import annotations

import functools
import os

import torch

_ORIGINAL: list = []  # torch.save as it was before install_torch_save
_WRITER: list = []  # the OneWriter of the strategy that made the newest full state dict (one strategy a process)


class FullStateDict(dict):
    """A model's complete state dict (parameter name -> CPU tensor), made by ``strategy.full_state_dict``:
    ``torch.save`` of it on every replica writes the file once. No attributes of its own (it is saved as a
    plain ``dict``)."""


def full_state(state: dict, writer) -> FullStateDict:
    """``state`` as a :class:`FullStateDict` written through ``writer``; installs the ``torch.save`` wrapper."""
    _WRITER[:] = [writer]
    install_torch_save()
    return FullStateDict(state)


def install_torch_save() -> None:
    """Replace ``torch.save`` by :func:`_save` (once per process)."""
    if _ORIGINAL:
        return
    _ORIGINAL.append(torch.save)
    torch.save = functools.wraps(torch.save)(_save)


def _save(obj, f, *args, **kwargs):
    original = _ORIGINAL[0]
    full = _full_in(obj)
    if full is None or not _WRITER or not isinstance(f, (str, os.PathLike)):
        return original(_plain(obj) if full is not None else obj, f, *args, **kwargs)
    plain = _plain(obj)
    return _WRITER[0].write(f, lambda target: original(plain, target, *args, **kwargs), "torch.save")


def _full_in(obj) -> FullStateDict | None:
    if isinstance(obj, FullStateDict):
        return obj
    if isinstance(obj, dict):
        return next((v for v in obj.values() if isinstance(v, FullStateDict)), None)
    return None


def _plain(obj):
    if isinstance(obj, FullStateDict):
        return dict(obj)
    return {k: dict(v) if isinstance(v, FullStateDict) else v for k, v in obj.items()}
