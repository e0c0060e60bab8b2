"""What a checkpoint holds and how it goes in and out of a model, an optimizer and the RNGs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from allgpu.errors import CheckpointError

_PLAIN = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class CheckpointState:
    """What ``restore`` returns besides the model and optimizer it loaded in place.

    Attributes:
        path: the checkpoint file or folder that was loaded.
        epoch / step: as passed to ``save``.
        data_state: the sampler's opaque dict (epoch, position, seed) as passed to ``save``, or None.
        rng_states: one dict per rank of the saving job (``rng_states[r]`` for rank ``r``), or None when
            saved with ``rng=False``. Apply with ``restore_rng(state, rank)``.
        extra: the user's ``extra`` as passed to ``save``, or None.
        world_size_at_save: replicas in the job that saved (the restoring job may have a different number).
    """

    path: Path
    epoch: int
    step: int
    data_state: dict | None
    rng_states: list[dict] | None
    extra: Any
    world_size_at_save: int


def check_plain(value: Any, where: str) -> None:
    """Refuse what ``torch.load(weights_only=True)`` would refuse to read back, naming where it is.

    Raises:
        CheckpointError: a value that is not a tensor, str, int, float, bool, None, or a list / tuple /
            dict of those (dict keys: str or int).
    """
    if isinstance(value, _PLAIN) or isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise CheckpointError(f"{where} has a key {key!r} of type {type(key).__name__}; use str or int keys.")
            check_plain(item, f"{where}[{key!r}]")
        return
    raise CheckpointError(
        f"{where} is a {type(value).__module__}.{type(value).__name__}, which torch.load(weights_only=True) "
        "cannot read back. Store only tensors, str, int, float, bool, None and lists / tuples / dicts of them "
        "(e.g. convert numpy arrays with torch.from_numpy, objects with their own state_dict())."
    )


def capture_rng() -> dict:
    """This process's torch (CPU and every CUDA device), numpy and Python ``random`` states, as plain data."""
    np_state = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(np_state[0]),
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": _to_lists(random.getstate()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = list(torch.cuda.get_rng_state_all())
    return states


def apply_rng(states: dict) -> None:
    """Set the RNGs from a dict made by ``capture_rng`` (CUDA states only where CUDA is up)."""
    torch.set_rng_state(states["torch"])
    numpy_state = states["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    random.setstate(_to_tuples(states["python"]))
    if "cuda" in states and torch.cuda.is_available():
        for device, state in enumerate(states["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, device)


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, (list, tuple)) else value


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value


def cpu_copy(value: Any, *, clone: bool) -> Any:
    """``value`` with every tensor moved to CPU; ``clone=True`` copies CPU tensors too (async saves)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.device.type != "cpu":
            return value.to("cpu", non_blocking=False)
        return value.clone() if clone else value
    if isinstance(value, dict):
        return {k: cpu_copy(v, clone=clone) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v, clone=clone) for v in value)
    return value


class StagingBuffers:
    """CPU copies of the state for background writes, allocated once and reused by later saves.

    Reusing buffers turns the pause of a background save into a plain memory copy (no allocation and page
    faults each time), and CUDA tensors are staged into pinned memory for fast device-to-host copies; the
    same trade as ``torch.distributed.checkpoint``'s cached stager. Cost: host memory the size of the
    saved state stays allocated. Safe because ``save`` waits for the previous write before staging.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}

    def copy(self, value: Any, path: tuple = ()) -> Any:
        """``value`` with every tensor copied into its staging buffer (same structure, CPU tensors).

        A ``DTensor`` (a fully sharded model's parameter or optimizer state) stages only this replica's shard
        and comes back as a ``DTensor`` over the same mesh and placements whose local tensor is the CPU copy, as
        ``torch.distributed.checkpoint.async_save`` stages it; DCP then writes each replica's rows from there.
        """
        dtensor = _dtensor_type()
        if dtensor is not None and isinstance(value, dtensor):
            local = self.copy(value.to_local(), path + ("local",))
            return dtensor.from_local(local, value.device_mesh, value.placements, run_check=False,
                                      shape=value.shape, stride=value.stride())
        if isinstance(value, torch.Tensor):
            value = value.detach()
            key = (path, tuple(value.shape), value.dtype, value.layout)
            buffer = self._buffers.get(key)
            if buffer is None or not value.is_contiguous():
                pin = value.device.type == "cuda"
                buffer = torch.empty_like(value, device="cpu", pin_memory=pin, memory_format=torch.contiguous_format)
                self._buffers[key] = buffer
            buffer.copy_(value, non_blocking=value.device.type == "cuda")
            return buffer
        if isinstance(value, dict):
            return {k: self.copy(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.copy(v, path + (i,)) for i, v in enumerate(value))
        return value

    def synchronize(self) -> None:
        """Wait for non-blocking device-to-host copies (call before another thread reads the buffers)."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def clear(self) -> None:
        self._buffers.clear()


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return None
    return DTensor


_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def load_model(model: nn.Module, state_dict: dict, *, strict: bool, source: Path) -> None:
    """Load ``state_dict`` into ``model`` in place.

    Raises:
        CheckpointError: keys missing or unexpected (with ``strict=True``) or a shape mismatch, naming the
            keys and the fix.
    """
    expected = set(model.state_dict().keys())
    saved = set(state_dict.keys())
    missing, unexpected = sorted(expected - saved), sorted(saved - expected)
    if strict and (missing or unexpected):
        hint = "Fix: rebuild the model exactly as it was when saved, or pass strict=False to load the keys that match."
        for prefix in _WRAPPER_PREFIXES:
            if missing and all(prefix + k in saved for k in missing):
                hint = (
                    f"The checkpoint's keys carry a '{prefix}' prefix: it was saved from a wrapped model. "
                    "Fix: save the unwrapped model (model.module), or strip the prefix."
                )
            elif unexpected and all(prefix + k in expected for k in unexpected):
                hint = f"The model's keys carry a '{prefix}' prefix: it is wrapped. Fix: restore the unwrapped model."
        raise CheckpointError(
            f"checkpoint {source} does not fit the model: missing keys {_few(missing)}, "
            f"unexpected keys {_few(unexpected)}. {hint}"
        )
    try:
        model.load_state_dict(state_dict, strict=strict)
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint {source} does not fit the model: {exc}. Fix: build the model with the "
            "sizes it had when saved."
        ) from exc


def load_optimizer(optimizer: torch.optim.Optimizer, state_dict: dict, *, source: Path) -> None:
    """``optimizer.load_state_dict`` with an error that names the checkpoint and the fix.

    Raises:
        CheckpointError: the saved optimizer has different parameter groups or sizes.
    """
    saved_keys = set(state_dict["param_groups"][0]) - {"params"} if state_dict.get("param_groups") else set()
    mine = set(optimizer.param_groups[0]) - {"params"} if optimizer.param_groups else set()
    # Keys on both sides that the other lacks: another optimizer class (newer torch only adds keys on one side).
    if saved_keys - mine and mine - saved_keys:
        raise CheckpointError(
            f"checkpoint {source} holds the state of a different optimizer than {type(optimizer).__name__}: its "
            f"hyper-parameters {_few(sorted(saved_keys - mine))} are not {type(optimizer).__name__}'s, which has "
            f"{_few(sorted(mine - saved_keys))}. Fix: create the optimizer class that saved it, or restore the model "
            "alone (without optimizer=).")
    try:
        optimizer.load_state_dict(state_dict)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"checkpoint {source}: the optimizer state does not fit {type(optimizer).__name__}: {exc}. "
            "Fix: create the optimizer over the same parameters, in the same groups, as when saved."
        ) from exc


def _few(keys: list[str], limit: int = 8) -> str:
    if not keys:
        return "none"
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Fully qualified name of each optimizer parameter, in ``param_groups`` order (the optimizer's ids).

    Raises:
        CheckpointError: the optimizer holds a parameter that is not the model's.
    """
    by_param = {p: name for name, p in model.named_parameters()}
    names = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param not in by_param:
                raise CheckpointError(
                    f"the optimizer {type(optimizer).__name__} holds a parameter of shape {tuple(param.shape)} "
                    "that is not among model.named_parameters(). Fix: build the optimizer from model.parameters()."
                )
            names.append(by_param[param])
    return names
