"""Models built on the meta device under :class:`~allgpu.strategies.fully_sharded.FullyShardedStrategy`: shard
first, then materialise only each replica's shards.

FSDP2's recipe (``fully_shard`` on a meta-device model, then ``to_empty``, then initialise; torchtitan does the
same) with one change: DTensor's random operators are consistent across shards only on CUDA-like devices (on CPU
each replica would draw its own numbers), so allgpu initialises one module at a time in full and keeps only its
rows. For each module that owns parameters, children before parents (the order construction runs
``reset_parameters``), the module's own parameters are created in full on the replica's device, its
``reset_parameters()`` (or ``_reset_parameters()``, as ``nn.MultiheadAttention`` spells it) runs on them under a
seed derived from (replica 0's ``torch.initial_seed()``, the module's qualified name), and each replica copies its
shard's rows (``distribute_tensor(..., src_data_rank=None)``: no communication) before the full tensors are freed.

So at most one module's parameters exist in full at a time, never the model's; the result does not depend on the
replica count (every replica draws the same full tensor and keeps its rows); it differs from a model initialised
normally (other random draws), as meta-device initialisation does everywhere.
"""

from __future__ import annotations

import zlib

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from allgpu.errors import ShardingError


def meta_roots(roots: list[nn.Module]) -> bool:
    """True when every parameter of ``roots`` is on the meta device, False when none is.

    Raises:
        ShardingError: some are and some are not (half a model on meta cannot be initialised consistently).
    """
    flags = {p.is_meta for r in roots for p in r.parameters()}
    if flags == {True, False}:
        meta = next(f"{type(r).__name__}.{n}" for r in roots for n, p in r.named_parameters() if p.is_meta)
        raise ShardingError(f"some parameters are on the meta device ({meta}) and some are not. Fix: build the whole "
                            "model under `with torch.device('meta'):` inside strategy.scope(), or none of it.")
    return flags == {True}


def _reset(module: nn.Module):
    for name in ("reset_parameters", "_reset_parameters"):
        fn = getattr(module, name, None)
        if callable(fn):
            return fn
    return None


def _post_order(module: nn.Module, prefix: str = ""):
    for name, child in module.named_children():
        yield from _post_order(child, f"{prefix}.{name}" if prefix else name)
    yield prefix, module


def materialise(root: nn.Module, device: torch.device, seed: int) -> int:
    """Allocate ``root``'s shards on ``device`` (``to_empty``) and initialise them module by module (see the module
    docstring). Every replica calls it with the same ``seed``; no collective. Returns the most bytes held in full
    at once (one module's parameters).

    Raises:
        ShardingError: a module owns parameters or buffers but has no ``reset_parameters()`` to initialise them.
    """
    missing = [f"{q or '<root>'} ({type(m).__name__})" for q, m in _post_order(root)
               if _owned(m) and _reset(m) is None]
    if missing:
        raise ShardingError(
            f"built on the meta device, these modules hold parameters or buffers but have no reset_parameters() to "
            f"initialise them: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. Fix: give each a "
            "reset_parameters() that initialises its own parameters and buffers (as torch.nn layers do), or build "
            "the model without torch.device('meta').")
    root.to_empty(device=device)
    peak = 0
    root_name = type(root).__name__
    for qualname, module in _post_order(root):
        if _owned(module):
            peak = max(peak, _init_module(module, device, _module_seed(seed, f"{root_name}.{qualname}")))
    return peak


def _owned(module: nn.Module) -> bool:
    return any(p is not None for p in module._parameters.values()) or \
        any(b is not None for b in module._buffers.values())


def _module_seed(seed: int, qualname: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(qualname.encode())) % (2 ** 63)


def _init_module(module: nn.Module, device: torch.device, seed: int) -> int:
    """Run ``module``'s reset on full-size plain copies of its own parameters, then keep this replica's rows."""
    own = {n: p for n, p in module._parameters.items() if p is not None}
    full = {n: nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=p.requires_grad)
            for n, p in own.items()}  # a DTensor's shape is the global one
    devices = [device] if device.type == "cuda" else []
    try:
        module._parameters.update(full)
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            _reset(module)()
    finally:
        module._parameters.update(own)
    with torch.no_grad():
        for name, param in own.items():
            if isinstance(param, DTensor):
                rows = distribute_tensor(full[name].detach(), param.device_mesh, param.placements, src_data_rank=None)
                param.to_local().copy_(rows.to_local())
            else:
                param.copy_(full[name])
    return sum(t.numel() * t.element_size() for t in full.values())
