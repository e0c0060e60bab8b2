"""Mirrored variables: the broadcast that mirrors them, and the check that catches what was not mirrored.

Inside ``scope()`` what is created is recorded (:mod:`allgpu.core.scope_record`), born on the replica's device
(``torch.device(replica_device)``), and at its first use or the scope's exit made identical on every replica
(broadcast from replica 0) and handed to gradient sync. Following
``tf.distribute``, a trainable parameter used in training without having been mirrored is an error
(:class:`~allgpu.errors.NotMirroredError`): a global forward pre-hook checks each module once, on its first
forward with gradients enabled and tensor inputs (symbolic calls, as Keras makes to build a model, are not checked),
and an optimizer step pre-hook checks what an optimizer updates (the check that still runs when the forward is
compiled). A forward that evaluates (a torch module in ``eval()`` mode; any Keras model, whose ``training=`` flag
does not reach torch) trains nothing, so it does not raise: the parameters it reads get a gradient hook that raises
the same error if a gradient is ever computed for them unmirrored (restoring a checkpoint into a model built outside
the scope and evaluating it, as TensorFlow's custom-training tutorial does, is fine). So is a train-mode forward of
``torch.optim.swa_utils.AveragedModel`` (SWA's and PyTorch's EMA copy, made by deep-copying the mirrored model):
its ``update_bn`` recomputes BatchNorm statistics in train mode and trains nothing; its parameters get the same
gradient hook.
"""

from __future__ import annotations

import functools
import weakref
from typing import Iterable

import torch
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._pytree import tree_leaves

from allgpu.errors import NotMirroredError, UnsupportedError
from allgpu.core.replica_group import ReplicaGroup
from allgpu.core.scope_record import mirror_built_later, open_records
from allgpu.keras import is_keras_model
from allgpu.runtime.engines import ray as ray_engine


def mirror_tensors(tensors: Iterable[torch.Tensor], group: ReplicaGroup, where: str = "strategy.scope() exit") -> None:
    """Move ``tensors`` to the replica's device in place and overwrite them with replica 0's values.

    One broadcast per dtype (flattened), as DDP does at construction.

    Raises:
        UnsupportedError: a tensor on the meta device (no values to move or broadcast).
    """
    tensors = list(tensors)
    meta = next((t for t in tensors if isinstance(t, torch.Tensor) and t.is_meta), None)
    if meta is not None:
        raise UnsupportedError(
            f"a tensor of shape {tuple(meta.shape)} built in strategy.scope() is on the meta device, which holds no "
            "values to place on the replica's device and broadcast (PyTorch's meta-device recipe then loads them with "
            "load_state_dict(assign=True)). Fix: build the model on the device inside the scope and load into it, or "
            "use FullyShardedStrategy, which materialises a meta model's shards by their reset_parameters().")
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


def mark_mirrored(params: Iterable[torch.Tensor]) -> None:
    """Record ``params`` as mirrored for every strategy's check in the process. Every strategy records what its
    scope made, OneDeviceStrategy (which checks nothing) too: a notebook that ran a MirroredStrategy cell and then
    builds and trains a model in a OneDeviceStrategy's scope has done nothing wrong."""
    registry = MirrorCheck._mirrored
    for p in params:
        registry[id(p)] = weakref.ref(p, lambda _, key=id(p): registry.pop(key, None))


class MirrorCheck:
    """Raises :class:`NotMirroredError` when an unmirrored trainable parameter is about to be trained.

    Two checks, both cached so a training step pays a dictionary look-up:

    * a global forward pre-hook checks each module once, on its first forward with gradients enabled, and names
      the module. It returns at once while Dynamo traces (``torch.compiler.is_compiling()`` is a constant there),
      so a compiled model gets no graph break and no mutation of the hook's state inside a graph. For
      ``torch.compile(model)`` the hook still runs eagerly on the ``OptimizedModule`` wrapper and checks the
      wrapped model's parameters; for ``model.compile()`` the whole call is compiled, and
    * a global optimizer step pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``) checks the
      parameters an optimizer is about to update, once per optimizer and param-group shape, outside any graph.

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
        self._evaluated: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # its parameters' hooks armed
        self._averaged: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # an AveragedModel's modules
        self._armed: dict[int, weakref.ref] = {}  # id(param) -> param, for those carrying the gradient hook
        self._optimizers: "weakref.WeakKeyDictionary[torch.optim.Optimizer, tuple]" = weakref.WeakKeyDictionary()
        self._handles = [nn_module.register_module_forward_pre_hook(self._check),
                         register_optimizer_step_pre_hook(self._check_optimizer)]

    def trust(self, module: torch.nn.Module) -> None:
        """Skip the check for ``module`` and its submodules: a wrapper that swaps their parameters in and out
        (FSDP2 around a Keras model, whose layers compute with all-gathered copies) has synchronised them."""
        for sub in module.modules():
            self._verified.add(sub)

    def is_mirrored(self, param: torch.Tensor) -> bool:
        ref = self._mirrored.get(id(param))
        return ref is not None and ref() is param

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _check(self, module: torch.nn.Module, args):
        if torch.compiler.is_compiling() or not torch.is_grad_enabled() or module in self._verified:
            return None
        trains = _trains_at_forward(module) and not self._in_averaged_model(module)
        if module in self._evaluated and not trains:
            return None
        if not any(isinstance(a, torch.Tensor) for a in tree_leaves(args)):
            return None  # a symbolic call (Keras building a functional model from KerasTensors), not training
        for record in open_records():  # any strategy's open scope: its first use mirrors what it holds
            if not record.pending:
                continue
            if record.watches(module):
                return None  # its own first-use hook, run next, mirrors what the open scope created, then checks
            changed = record.first_use(module, args, {})  # a wrapper made elsewhere (torch.compile) around it
            args = changed[0] if changed is not None else args
        mirror_built_later(module)  # a Keras model adopted before it was built: its variables, built by now
        if trains:
            self.check(module)
        else:
            self.arm(module)
        return args

    def _in_averaged_model(self, module: torch.nn.Module) -> bool:
        """True for an ``AveragedModel`` and the modules it holds (its pre-hook runs before theirs)."""
        if isinstance(module, torch.optim.swa_utils.AveragedModel):
            self._averaged.update(module.modules())
        return module in self._averaged

    def arm(self, module: torch.nn.Module) -> None:
        """An evaluating forward: give each unmirrored trainable parameter of ``module`` a gradient hook raising
        :class:`NotMirroredError` if a gradient is computed for it while still unmirrored (training it)."""
        for name, param in module.named_parameters():
            if not param.requires_grad or self.is_mirrored(param):
                continue
            ref = self._armed.get(id(param))
            if ref is not None and ref() is param:
                continue
            message = self._message(*_unwrap_compiled(module, name), param)
            param.register_hook(functools.partial(self._refuse_gradient, weakref.ref(param), message))
            self._armed[id(param)] = weakref.ref(param, lambda _, key=id(param): self._armed.pop(key, None))
        self._evaluated.add(module)

    def _refuse_gradient(self, param_ref: weakref.ref, message: str, grad: torch.Tensor) -> None:
        param = param_ref()
        if param is not None and not self.is_mirrored(param):
            raise NotMirroredError(message)

    def check(self, module: torch.nn.Module) -> None:
        """Raise :class:`NotMirroredError` for the first trainable parameter of ``module`` not mirrored; once
        ``module`` passes, its submodules are not checked again."""
        if module in self._verified:
            return
        if isinstance(module, _DATA_PARALLEL) and any(self.is_mirrored(p) for p in module.parameters()):
            raise UnsupportedError(_wrapped_message(module))
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            mark_mirrored(module.parameters())  # built outside scope() and averaged by DDP itself: not ours to refuse
            self.trust(module)
            return
        for name, param in module.named_parameters():
            if param.requires_grad and not self.is_mirrored(param):
                raise NotMirroredError(self._message(*_unwrap_compiled(module, name), param))
        for sub in module.modules():
            self._verified.add(sub)

    def _check_optimizer(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        if torch.compiler.is_compiling():
            return
        for record in open_records():  # still pending at a step: a compiled forward reached no eager hook
            record.mirror_now(late=True)
        shape = tuple((id(g["params"]), len(g["params"])) for g in optimizer.param_groups)
        if self._optimizers.get(optimizer) == shape:
            return
        for g, group in enumerate(optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                if param.requires_grad and not self.is_mirrored(param):
                    where = f"param_groups[{g}]['params'][{i}] of a {type(optimizer).__name__}"
                    raise NotMirroredError(self._message(None, where, param))
        self._optimizers[optimizer] = shape

    def _message(self, module: torch.nn.Module | None, name: str, param: torch.Tensor) -> str:
        if module is None:
            where, owner = name, "model"
        else:
            where = f"{type(module).__name__}.{name}" if name else type(module).__name__
            owner = f"a {type(module).__name__}"
            if "_torch_params." in name:  # a Keras variable: name it by its Keras path
                where = f"{name.split('_torch_params.')[-1]!r} (Keras variable)"
        if self.num_replicas == 1:  # a notebook kernel, one GPU: nothing is lost in this run, but on N it would be
            why = ("this run has one replica, so nothing is lost here, but on N replicas each would train its own "
                   "copy, its gradients never averaged (TensorFlow trains such a model on one device): allgpu stops "
                   "here as it would there, rather than let the code pass now and fail on more devices. ")
        else:
            why = (f"so replica {self.rank} would train it alone: its gradients would not be averaged across the "
                   f"{self.num_replicas} replicas. This is the most common reason a multi-GPU job trains on one "
                   "device. ")
        return (
            f"parameter {where} (shape {tuple(param.shape)}, on {param.device}) of {owner} "
            f"was created outside strategy.scope(), {why}Fix: build the model (and optimizer) inside\n"
            "    with strategy.scope():\n        model = ...\n"
            "or, for a model you already have, call model = strategy.mirror(model) once before training."
        )


def _trains_at_forward(module: torch.nn.Module) -> bool:
    """Whether a forward with gradients enabled is taken as training: a torch module in ``train()`` mode. A Keras
    layer is always in torch's train mode (Keras passes ``training=`` to ``call``), so its gradients decide."""
    return module.training and not is_keras_model(module)


def _unwrap_compiled(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The model inside a ``torch.compile`` wrapper and the parameter's name in it (for the message)."""
    inner = getattr(module, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module) and name.startswith("_orig_mod."):
        return inner, name[len("_orig_mod."):]
    return module, name


_DATA_PARALLEL = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)


def _wrapped_message(module: torch.nn.Module) -> str:
    kind = type(module).__name__
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        why = ("allgpu already averages its gradients across replicas during backward, so DDP would all-reduce them "
               "a second time (twice the traffic for the same result)")
    else:
        why = ("allgpu already runs one replica process per device, and DataParallel would copy the model to every "
               "visible GPU again inside each of them")
    if kind == "DistributedDataParallel" and ray_engine.context() is not None:
        # in a Ray Train worker the wrap is most likely ray.train.torch.prepare_model's, not a DDP(...) the user wrote
        return (f"{kind} wraps a model built in strategy.scope(): {why}. In a Ray Train worker that wrap is "
                "`ray.train.torch.prepare_model(model)`'s. Fix: drop the prepare_model call (or a DDP(...) wrapper) "
                "and train the model itself: the strategy already placed it on Ray's device and averages its gradients "
                "(docs/engines/ray.md).")
    return (f"{kind} wraps a model built in strategy.scope(): {why}. Fix: train the model itself; drop the "
            f"{kind}(...) wrapper (the strategy does what it did).")

