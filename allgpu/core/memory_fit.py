"""Will training fit? The torch side of :class:`allgpu.devices.advice.MemoryFit`: count a model's parameters and an
optimizer's state, read a device's memory, and warn from ``fit``.

The arithmetic (ZeRO's accounting, the headroom, the finding's wording) lives in :mod:`allgpu.devices.advice` so that
``fit``, the step monitor, ``allgpu doctor --run`` and the lint rule AG003 give one answer. With bf16 mixed
precision the float32 copies stay (autocast, and FSDP2 keeps float32 shards and reduces gradients in float32), so
the figures follow the parameters' own dtype, not the compute precision.
"""

from __future__ import annotations


import torch
from torch import nn

from allgpu.errors import warn_user
from allgpu.devices.advice import MEMORY_HEADROOM, MemoryFit, memory_finding, optimizer_slots as _slots_by_name



def optimizer_slots(optimizer: torch.optim.Optimizer | None) -> int:
    """Per-parameter state tensors the optimizer keeps, each the parameter's size (:func:`allgpu.devices.advice.optimizer_slots`)."""
    if optimizer is None:
        return 0
    momentum = any(g.get("momentum", 0) for g in optimizer.param_groups)
    return _slots_by_name(type(optimizer).__name__, momentum)


def measure(model: nn.Module, optimizer: torch.optim.Optimizer | None, *, replicas: int = 1,
            device_bytes: int | None = None, strategy: str = "MirroredStrategy",
            capacity_source: str = "") -> MemoryFit:
    """A :class:`~allgpu.devices.advice.MemoryFit` of ``model``'s parameters (each counted once; a ``DTensor`` at its global
    size) and ``optimizer``'s per-parameter state, against ``device_bytes`` per device across ``replicas``."""
    params = {id(p): p for p in model.parameters()}.values()
    numel = param_bytes = trainable = 0
    for p in params:
        size = p.numel() * p.element_size()  # DTensor: numel() is the global size
        numel += p.numel()
        param_bytes += size
        trainable += size if p.requires_grad else 0
    return MemoryFit(numel, param_bytes, trainable, type(optimizer).__name__ if optimizer is not None else None,
                     optimizer_slots(optimizer), replicas, device_bytes, strategy, capacity_source)


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None, *, replicas: int = 1,
                sharded: bool = False) -> int:
    """Bytes one replica holds for parameters, gradients and optimizer state (full model sizes, not shards)."""
    fit = measure(model, optimizer, replicas=replicas)
    return fit.sharded_bytes if sharded else fit.mirrored_bytes


def device_capacity(device: torch.device) -> tuple[int | None, str]:
    """``(total bytes, source)`` of ``device``'s memory: ``torch.cuda.get_device_properties(d).total_memory`` on
    CUDA; ``(None, "")`` elsewhere (a CPU replica has no device limit to plan against)."""
    if device.type != "cuda":
        return None, ""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return int(torch.cuda.get_device_properties(index).total_memory), \
        f"torch.cuda.get_device_properties(cuda:{index}).total_memory"


def visible_replicas(strategy) -> int:
    """Devices the state could be sharded across: the replicas, or more GPUs where this host shows more."""
    count = torch.cuda.device_count() if strategy.device.type == "cuda" else 0
    return max(strategy.num_replicas_in_sync, count)


def advice(model: nn.Module, optimizer: torch.optim.Optimizer | None, device_bytes: int, replicas: int) -> str | None:
    """The ``needs-sharding`` finding's message and fix as one sentence when the state does not fit one device
    mirrored (``device_bytes``: one device's total memory); else None."""
    finding = memory_finding(measure(model, optimizer, replicas=replicas, device_bytes=device_bytes))
    return None if finding is None else f"{finding.message} Fix: {finding.fix}"


def warn_if_too_large(strategy, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> str | None:
    """Under a non-sharding strategy on CUDA, warn (replica 0) when :func:`advice` has something to say."""
    device = strategy.device
    if device.type != "cuda" or getattr(strategy, "forward_is_collective", False):
        return None
    total, _ = device_capacity(device)
    text = advice(model, optimizer, total, visible_replicas(strategy))
    if text and strategy.is_chief:
        warn_user(f"allgpu: {text}", RuntimeWarning)
    return text
