"""A built Keras model (PyTorch backend) sharded with FSDP2's ``fully_shard``: each replica holds ~1/N of it.

Keras 3.15 keeps each variable's tensor in the variable (``KerasVariable._value``, a ``torch.nn.Parameter``) and
also registers it in each layer's ``torch_params`` (a ``ParameterDict``), which is what ``torch.nn.Module`` and so
FSDP2 see. ``fully_shard`` swaps the module's parameters: the sharded ``DTensor`` between steps, the all-gathered
tensor from the forward pre-hook until resharding. Keras reads the variable, not the module, so here each
trainable variable is made to read its tensor from the module (:class:`ShardedModelVariable`): Keras's layers then
compute with the all-gathered tensors, FSDP2 reduce-scatters the gradients into the sharded parameters'
``.grad``, and Keras's optimizer (whose per-variable slots, e.g. Adam's moments, are sharded the same way here)
updates the local shards with its own ``torch._foreach_*`` ops, which ``DTensor`` runs shard by shard.

What stays replicated: non-trainable variables (BatchNormalization's statistics, seed states), which allgpu keeps
identical as under ``MirroredStrategy``, and scalar optimizer variables (iterations, learning rate).
The model is one FSDP unit: a forward all-gathers all of its trainable parameters at once.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.fsdp import FSDPModule, fully_shard

from allgpu.errors import ReplicaFailedError, UnsupportedError


class ShardedVariable:
    """Mixin for a Keras variable whose value is a ``DTensor`` sharded on dim 0 (an optimizer slot, say).

    ``numpy()`` gathers the whole value and is a collective (every replica must call it, as ``get_weights``);
    ``assign`` keeps this replica's rows of the assigned (whole) value and communicates nothing.
    """

    def numpy(self):
        from keras.src.backend.torch.core import convert_to_numpy  # bfloat16 as Keras returns it

        value = self.value
        if isinstance(value, DTensor):
            try:
                value = value.full_tensor()
            except RuntimeError as exc:  # a backend error: the peers are gone or elsewhere
                raise ReplicaFailedError(
                    f"reading the sharded Keras variable {self.path!r} gathers it from every replica (a collective),"
                    " and another replica did not take part. Fix: call model.get_weights(), save_weights() or "
                    "variable.numpy() on every replica (for example before `if strategy.is_chief:`), not on one."
                ) from exc
        return convert_to_numpy(value)

    def __array__(self, dtype=None):
        array = self.numpy()
        return array.astype(dtype) if dtype else array

    def _direct_assign(self, value):
        current = self.value
        if not isinstance(current, DTensor):
            return super()._direct_assign(value)
        value = torch.as_tensor(value, device=current.device, dtype=current.dtype)
        local = distribute_tensor(value, current.device_mesh, current.placements, src_data_rank=None)
        with torch.no_grad():
            current.to_local().copy_(local.to_local())


class ShardedModelVariable(ShardedVariable):
    """Mixin for a trainable model variable: its tensor is whatever its module holds now (FSDP2 swaps it).

    Between steps that is the sharded ``DTensor`` parameter (what the optimizer updates); inside a forward, the
    all-gathered tensor FSDP2 put there.
    """

    @property
    def _value(self):
        module, name = self.__dict__["_allgpu_home"]
        return module._parameters[name]

    @_value.setter
    def _value(self, value):
        home = self.__dict__.get("_allgpu_home")
        if home is None:
            self.__dict__["_value"] = value
        else:
            home[0]._parameters[home[1]] = value


_CLASSES: dict[tuple[type, type], type] = {}


def _become(variable, mixin: type) -> None:
    cls = type(variable)
    if issubclass(cls, mixin):
        return
    key = (cls, mixin)
    if key not in _CLASSES:
        _CLASSES[key] = type(f"{mixin.__name__}_{cls.__name__}", (mixin, cls), {})
    variable.__class__ = _CLASSES[key]


def _homes(model) -> dict[int, tuple[nn.Module, str]]:
    """Where each parameter of ``model`` is registered: id -> (module, name), the first place found."""
    homes: dict[int, tuple[nn.Module, str]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                homes.setdefault(id(param), (module, name))
    return homes


def _track_everywhere(model) -> None:
    # Keras creates a layer's `torch_params` on its first `named_parameters()`; FSDP2 calls that on each module
    # while sharding, which would add parameter names mid-way (an error). Create them all first.
    seen: set[int] = set()
    while True:
        fresh = [m for m in [*model.modules(), *model._flatten_layers(include_self=True)] if id(m) not in seen]
        if not fresh:
            return
        for module in fresh:
            seen.add(id(module))
            if hasattr(type(module), "torch_params"):
                module.torch_params  # noqa: B018 - the property builds the ParameterDict


def shard_model(model, fsdp_kwargs: dict) -> list:
    """``fully_shard`` a built Keras model (its trainable variables) and point its variables at the shards.

    Call once, after the model is built and its variables are identical on every replica. A collective.
    Returns the sharded parameters (``DTensor``), one per trainable variable.

    Raises:
        UnsupportedError: a trainable variable is a scalar (FSDP2 shards dim 0) or not registered on any layer;
            trainable variables of several dtypes; the model is part of a model already sharded.
    """
    trainable = list(model.trainable_variables)
    if any(isinstance(v, ShardedModelVariable) for v in trainable):
        raise UnsupportedError(f"the Keras model {model.name!r} is part of a model already sharded by "
                               "FullyShardedStrategy. Fix: train the outer model (its fit trains this one too).")
    for v in trainable:
        if v._value.ndim == 0:
            raise UnsupportedError(f"FullyShardedStrategy cannot shard the scalar trainable Keras variable {v.path!r} "
                                   "(FSDP2 shards dimension 0). Fix: give it shape (1,), or use MirroredStrategy.")
    _track_everywhere(model)
    dtypes = sorted({str(v._value.dtype).replace("torch.", "") for v in trainable})
    if len(dtypes) > 1:  # FSDP2 gathers one unit's parameters as one flat buffer of one dtype
        raise UnsupportedError(f"the Keras model {model.name!r} has trainable variables of several dtypes "
                               f"({', '.join(dtypes)}); FullyShardedStrategy shards a Keras model as one unit of "
                               "one dtype. Fix: keep variables in one dtype (for bfloat16 compute use "
                               "keras.mixed_precision.set_global_policy('mixed_bfloat16')), or use "
                               "MirroredStrategy.")
    homes = _homes(model)
    missing = [v.path for v in trainable if id(v._value) not in homes]
    if missing:
        raise UnsupportedError(f"the trainable Keras variable {missing[0]!r} is not tracked by any layer of "
                               f"{model.name!r}, so FSDP2 cannot shard it. Fix: create it with layer.add_weight().")
    trainable_ids = {id(v._value) for v in trainable}
    ignored = {p for p in model.parameters() if id(p) not in trainable_ids}
    placed = [(v, homes[id(v._value)]) for v in trainable]
    original = type(model)
    fully_shard(model, ignored_params=ignored, **fsdp_kwargs)
    # FSDP2 swaps in a subclass named FSDP<Class>; Keras serialises models by class name (model.save, get_config).
    fsdp_class = type(model)
    fsdp_class.__name__, fsdp_class.__qualname__ = original.__name__, original.__qualname__
    fsdp_class.__module__ = original.__module__
    originals = {id(v._value): v for v, _ in placed}
    for variable, home in placed:
        variable.__dict__.pop("_value", None)
        variable.__dict__["_allgpu_home"] = home
        _become(variable, ShardedModelVariable)
    _forget_originals(model, originals)
    return [v._value for v in trainable]


def _forget_originals(model, originals: dict) -> None:
    # Layers that torch does not see as submodules (Keras keeps them in lists) still hold the unsharded
    # parameters in their own `torch_params`; point those at the shards, so the full tensors are freed.
    for layer in model._flatten_layers(include_self=True):
        params = getattr(layer, "_torch_params", None)
        if params is None:
            continue
        for name, param in list(params._parameters.items()):
            variable = originals.get(id(param))
            if variable is not None:
                params._parameters[name] = variable._value


def shard_optimizer_slots(optimizer, model) -> int:
    """Shard ``optimizer``'s per-variable slots (Adam's moments...) like the model variables they belong to.

    A slot is an optimizer variable made by ``add_variable_from_reference`` from a sharded model variable: named
    after its path, with its shape. Scalars (iterations, learning rate) stay replicated. Local (each replica keeps
    its rows of a value that is identical everywhere). Returns how many slots were sharded now.

    Raises:
        UnsupportedError: a non-scalar optimizer variable that is not such a slot (a factored optimizer such as
            Adafactor keeps row and column statistics), which cannot be updated shard by shard.
    """
    if optimizer is None or not optimizer.built:
        return 0
    sharded = {v.path.replace("/", "_") + "_": v for v in model.trainable_variables
               if isinstance(v, ShardedModelVariable)}
    count = 0
    for slot in optimizer.variables:
        if isinstance(slot.value, DTensor) or slot.value.ndim == 0:  # sharded already, or a replicated scalar
            continue
        owner = next((v for prefix, v in sharded.items() if slot.name.startswith(prefix)), None)
        if owner is None or tuple(slot.shape) != tuple(owner.shape):
            raise UnsupportedError(
                f"{type(optimizer).__name__} keeps {slot.name!r} with shape {tuple(slot.shape)}, not the shape of "
                "the model variable it belongs to; FullyShardedStrategy shards optimizer state row by row like "
                "the variable. Fix: use an elementwise optimizer (Adam, AdamW, SGD, RMSprop, Nadam, Lion...) or "
                "MirroredStrategy.")
        param = owner.value
        local = distribute_tensor(slot._value.detach(), param.device_mesh, param.placements, src_data_rank=None)
        slot._value = nn.Parameter(local, requires_grad=False)
        _become(slot, ShardedVariable)
        count += 1
    return count


def is_sharded(model) -> bool:
    """Whether ``model`` has been sharded by :func:`shard_model`."""
    return isinstance(model, FSDPModule)
