"""Checkpoints of fully sharded models (FSDP2 ``DTensor`` parameters): each replica writes and reads its own shard.

State goes in and out through ``torch.distributed.checkpoint.state_dict`` (``get_model_state_dict`` /
``get_optimizer_state_dict`` and their ``set_`` counterparts), PyTorch's route for FSDP2, which keys optimizer
state by parameter name. The tensors are stored under the same keys, and the manifest holds the same fields, as a
:class:`~allgpu.strategies.MirroredStrategy` sharded checkpoint (``sharded.py``), with each tensor's global shape.
So the formats are one: a checkpoint saved sharded restores into a plain model (every tensor read in full) and
a mirrored checkpoint restores into a sharded model (DCP reads only each replica's rows), at any replica count.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from allgpu.errors import CheckpointError

# ``torch.distributed.checkpoint`` imports DTensor and FSDP2: about 0.35 s of every process's start-up. Every
# checkpoint module imports this one, so DCP is imported in the functions that use it, when a checkpoint is
# sharded, and a replicated model's save and restore (the common case) never pay for it.


def is_fully_sharded(model: nn.Module) -> bool:
    """True when ``model`` (or a submodule) was sharded with FSDP2's ``fully_shard``."""
    if "torch.distributed.fsdp" not in sys.modules:  # nothing was sharded if FSDP2 was never imported
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def _layout(value: torch.Tensor) -> tuple[list[int], str]:
    return list(value.shape), str(value.dtype).removeprefix("torch.")  # global shape for a DTensor


def split(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> tuple[dict, dict, dict | None]:
    """``(model_state, optimizer_tensors, optimizer_meta)`` in the layout ``sharded.save`` writes.

    Tensors stay sharded ``DTensor``s (DCP writes each replica's rows from that replica). A collective.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    model_state = get_model_state_dict(model)
    if optimizer is None:
        return model_state, {}, None
    saved = get_optimizer_state_dict(model, optimizer)
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    scalars: dict[str, dict[str, Any]] = {}
    layout: dict[str, dict[str, tuple[list[int], str]]] = {}
    for name, values in saved["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors.setdefault(name, {})[key] = value
                layout.setdefault(name, {})[key] = _layout(value)
            else:
                scalars.setdefault(name, {})[key] = value
    groups = [dict(g) for g in saved["param_groups"]]
    return model_state, tensors, {"param_groups": groups, "scalars": scalars, "layout": layout}


def load(path: Path, manifest: dict, *, model: nn.Module, optimizer: torch.optim.Optimizer | None,
         strict: bool) -> None:
    """Load a verified sharded checkpoint into a fully sharded ``model`` / ``optimizer``; a collective.

    Raises:
        CheckpointError: keys missing or unexpected (``strict``), shapes that differ, or an optimizer over other
            parameters, naming them and the fix.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, \
        set_model_state_dict, set_optimizer_state_dict

    model_state = get_model_state_dict(model)
    shapes = manifest["model_shapes"]
    missing, unexpected = sorted(set(model_state) - set(shapes)), sorted(set(shapes) - set(model_state))
    if strict and (missing or unexpected):
        raise CheckpointError(f"checkpoint {path} does not fit the model: missing keys {missing[:8] or 'none'}, "
                              f"unexpected keys {unexpected[:8] or 'none'}. Fix: rebuild the model exactly as it was "
                              "when saved, or pass strict=False to load the keys that match.")
    wrong = [k for k, v in model_state.items() if k in shapes and list(v.shape) != shapes[k][0]]
    if wrong:
        raise CheckpointError(f"checkpoint {path} does not fit the model: {wrong[0]} has shape {shapes[wrong[0]][0]} "
                              f"there, {list(model_state[wrong[0]].shape)} here. Fix: build the model with the sizes "
                              "it had when saved.")
    target: dict[str, Any] = {"model": {k: v for k, v in model_state.items() if k in shapes}}
    meta = manifest["optimizer"]
    if optimizer is not None:
        if meta is None:
            raise CheckpointError(f"checkpoint {path} holds no optimizer state, but an optimizer was passed to "
                                  "restore(). Fix: restore without optimizer=, or save with optimizer= next time.")
        target["optim"] = _optimizer_targets(model, meta, path)
    dcp.load(target, storage_reader=dcp.FileSystemReader(path))
    set_model_state_dict(model, target["model"], options=StateDictOptions(strict=strict))
    if optimizer is not None:
        state = {name: {**meta["scalars"].get(name, {}), **target["optim"].get(name, {})}
                 for name in set(meta["scalars"]) | set(target["optim"])}
        try:
            set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": meta["param_groups"]})
        except (KeyError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"checkpoint {path}: the optimizer state does not fit {type(optimizer).__name__}: "
                                  f"{exc}. Fix: create the optimizer over the same parameters, in the same groups, "
                                  "as when saved.") from exc


def _optimizer_targets(model: nn.Module, meta: dict, path: Path) -> dict:
    """Empty tensors to read optimizer state into: sharded like their parameter where the shape matches."""
    params = dict(model.named_parameters())
    unknown = [n for g in meta["param_groups"] for n in g["params"] if n not in params]
    if unknown:
        raise CheckpointError(f"checkpoint {path}: the saved optimizer updates {unknown[:5]}, which this model does "
                              "not have. Fix: build the model and optimizer as when saved.")
    targets: dict[str, dict[str, torch.Tensor]] = {}
    for name, entries in meta["layout"].items():
        param = params[name].detach()
        for key, (shape, dtype) in entries.items():
            dtype = getattr(torch, dtype)
            if list(param.shape) == shape and shape:
                targets.setdefault(name, {})[key] = torch.empty_like(param, dtype=dtype)  # a DTensor shard
            else:
                targets.setdefault(name, {})[key] = torch.empty(shape, dtype=dtype)  # e.g. Adam's step
    return targets


def load_full(model: nn.Module, optimizer: torch.optim.Optimizer | None, model_state: dict,
              optimizer_state: dict | None, names: list[str], *, strict: bool) -> None:
    """Load a plain (single-file) checkpoint's full state dicts into a fully sharded model; a collective.

    ``names``: the parameter name of each optimizer id in ``optimizer_state`` (``param_names`` order).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, \
        set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, strict=strict)
    set_model_state_dict(model, model_state, options=options)
    if optimizer is None or optimizer_state is None:
        return
    state = {names[pid]: values for pid, values in optimizer_state["state"].items()}
    groups = [dict(g, params=[names[pid] for pid in g["params"]]) for g in optimizer_state["param_groups"]]
    set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": groups}, options=options)
