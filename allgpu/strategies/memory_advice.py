"""Will training fit? Bytes per replica of parameters, gradients and optimizer state, mirrored or fully sharded.

The accounting of Rajbhandari et al., "ZeRO" (SC 2020), section 3.1: per parameter, a mirrored replica holds the
parameter, its gradient and the optimizer's state (Adam / AdamW: two moments; SGD with momentum: one buffer;
plain SGD: none), all in the parameter's dtype; under full sharding each replica holds 1/N of all three. With
bf16 mixed precision the float32 copies stay (FSDP2 keeps float32 shards and reduces gradients in float32), so
the figures below do not shrink with precision. Activations and temporary buffers are not counted, so the
verdict "does not fit" is certain and "fits" is optimistic; hence a 10% headroom.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

HEADROOM = 0.9  # of device memory usable for state, the rest left for activations and allocator slack


def optimizer_slots(optimizer: torch.optim.Optimizer | None) -> int:
    """Per-parameter state tensors the optimizer keeps, each the parameter's size (0 when not known to allgpu)."""
    if optimizer is None:
        return 0
    name = type(optimizer).__name__
    if name in ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Adadelta"):
        return 2
    if name == "SGD":
        return 1 if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
    if name in ("RMSprop", "Adagrad", "ASGD"):
        return 1
    return 2  # unknown optimizers: assume Adam-like, the common case


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None, *, replicas: int = 1,
                sharded: bool = False) -> int:
    """Bytes one replica holds for parameters, gradients and optimizer state (full model sizes, not shards)."""
    params = {id(p): p for p in model.parameters()}.values()
    total = 0
    for p in params:
        size = p.numel() * p.element_size()  # DTensor: numel() is the global size
        slots = (1 + optimizer_slots(optimizer)) if p.requires_grad else 0
        total += size * (1 + slots)
    return -(-total // replicas) if sharded else total


def advice(model: nn.Module, optimizer: torch.optim.Optimizer | None, device_bytes: int, replicas: int) -> str | None:
    """A sentence when the state does not fit one device mirrored but fits sharded across ``replicas``; else None.

    ``device_bytes``: one device's total memory in bytes.
    """
    budget = device_bytes * HEADROOM
    mirrored = state_bytes(model, optimizer)
    if mirrored <= budget:
        return None
    gib = 2 ** 30
    sharded = state_bytes(model, optimizer, replicas=replicas, sharded=True)
    needed = -(-mirrored // int(budget))
    if sharded <= budget:
        return (f"parameters, gradients and {type(optimizer).__name__ if optimizer else 'no'} optimizer state need "
                f"{mirrored / gib:.1f} GiB on every device under MirroredStrategy; a device has "
                f"{device_bytes / gib:.1f} GiB. Fix: allgpu.FullyShardedStrategy() shards them across the "
                f"{replicas} devices ({sharded / gib:.1f} GiB each).")
    return (f"parameters, gradients and optimizer state need {mirrored / gib:.1f} GiB; even sharded across "
            f"{replicas} devices that is {sharded / gib:.1f} GiB each, more than a {device_bytes / gib:.1f} GiB "
            f"device. Fix: FullyShardedStrategy on at least {needed} devices, or "
            "FullyShardedStrategy(offload_to_cpu=True).")


def warn_if_too_large(strategy, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> str | None:
    """Under a non-sharding strategy on CUDA, warn (replica 0) when :func:`advice` has something to say."""
    device = strategy.device
    if device.type != "cuda" or getattr(strategy, "forward_is_collective", False):
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    text = advice(model, optimizer, total, max(strategy.num_replicas_in_sync, torch.cuda.device_count()))
    if text and strategy.is_chief:
        warnings.warn(f"allgpu: {text}", RuntimeWarning, stacklevel=3)
    return text
