"""Mirrored variables: what ``strategy.scope()`` records, and the check that catches what it did not.

Inside ``scope()`` a global parameter-registration hook (``torch.nn.modules.module.
register_module_parameter_registration_hook``) records every parameter and buffer created, while
``torch.device(replica_device)`` makes them born on the replica's device. On leaving the scope they are made
identical on every replica (broadcast from replica 0) and handed to gradient sync. Following
``tf.distribute``, a trainable parameter used in training without having been mirrored is an error
(:class:`~allgpu.errors.NotMirroredError`): a global forward pre-hook checks each module once, on its first
forward with gradients enabled and tensor inputs (symbolic calls, as Keras makes to build a model, are not checked).
"""

from __future__ import annotations

import weakref
from typing import Iterable

import torch
from torch.nn.modules import module as nn_module
from torch.utils._pytree import tree_leaves

from allgpu.errors import NotMirroredError
from allgpu.replica_group import ReplicaGroup


class ScopeRecorder:
    """Records the parameters and buffers registered on any module while active."""

    def __init__(self):
        self.params: list[torch.nn.Parameter] = []
        self.buffers: list[torch.Tensor] = []
        self._handles: list = []

    def __enter__(self) -> "ScopeRecorder":
        self._handles = [
            nn_module.register_module_parameter_registration_hook(self._on_param),
            nn_module.register_module_buffer_registration_hook(self._on_buffer),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _on_param(self, module, name, param):
        if param is not None:
            self.params.append(param)

    def _on_buffer(self, module, name, buffer):
        if buffer is not None:
            self.buffers.append(buffer)


def mirror_tensors(tensors: Iterable[torch.Tensor], group: ReplicaGroup, where: str = "strategy.scope() exit") -> None:
    """Move ``tensors`` to the replica's device in place and overwrite them with replica 0's values.

    One broadcast per dtype (flattened), as DDP does at construction.
    """
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    seen: set[int] = set()
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.device != group.device:
            t.data = t.data.to(group.device)
        by_dtype.setdefault(t.dtype, []).append(t)
    if group.world_size == 1:
        return
    for dtype, group_tensors in by_dtype.items():
        flat = torch.cat([t.detach().reshape(-1) for t in group_tensors])
        group.broadcast(flat, src=0, where=where)
        offset = 0
        with torch.no_grad():
            for t in group_tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()


class MirrorCheck:
    """Raises :class:`NotMirroredError` when a module with an unmirrored trainable parameter runs forward.

    Args:
        num_replicas: shown in the message.
        rank: the replica, shown in the message.
    """

    # Shared by every strategy in the process: a parameter mirrored by any of them is fine for all of them.
    # id -> weak reference; a WeakSet would compare tensors with == on a hash match.
    _mirrored: dict[int, weakref.ref] = {}

    def __init__(self, num_replicas: int, rank: int):
        self.num_replicas = num_replicas
        self.rank = rank
        self._verified: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        self._handle = nn_module.register_module_forward_pre_hook(self._check)

    def add(self, params: Iterable[torch.Tensor]) -> None:
        registry = MirrorCheck._mirrored
        for p in params:
            registry[id(p)] = weakref.ref(p, lambda _, key=id(p): registry.pop(key, None))

    def is_mirrored(self, param: torch.Tensor) -> bool:
        ref = self._mirrored.get(id(param))
        return ref is not None and ref() is param

    def close(self) -> None:
        self._handle.remove()

    def _check(self, module: torch.nn.Module, args) -> None:
        if module in self._verified or not torch.is_grad_enabled():
            return
        if not any(isinstance(a, torch.Tensor) for a in tree_leaves(args)):
            return  # a symbolic call (Keras building a functional model from KerasTensors), not training
        for name, param in module.named_parameters():
            if param.requires_grad and not self.is_mirrored(param):
                raise NotMirroredError(self._message(module, name, param))
        for sub in module.modules():
            self._verified.add(sub)

    def _message(self, module: torch.nn.Module, name: str, param: torch.Tensor) -> str:
        where = f"{type(module).__name__}.{name}" if name else type(module).__name__
        if "_torch_params." in name:  # a Keras variable: name it by its Keras path
            where = f"{name.split('_torch_params.')[-1]!r} (Keras variable)"
        return (
            f"parameter {where} (shape {tuple(param.shape)}, on {param.device}) of a {type(module).__name__} "
            f"was created outside strategy.scope(), so replica {self.rank} would train it alone: its gradients "
            f"would not be averaged across the {self.num_replicas} replicas. This is the most common reason a "
            "multi-GPU job trains on one device. Fix: build the model (and optimizer) inside\n"
            "    with strategy.scope():\n        model = ...\n"
            "or, for a model you already have, call model = strategy.mirror(model) once before training."
        )
