"""Mixed precision for ``fit`` and ``evaluate``: autocast, and loss scaling for fp16 (``torch.amp``)."""

from __future__ import annotations

import contextlib

import torch

from allgpu.errors import ArgumentError

PRECISIONS = (None, "bf16", "fp16")


def validate_precision(mixed_precision: str | None, device: torch.device) -> None:
    """Raises ValueError for an unknown precision, or fp16 off CUDA (loss scaling needs it)."""
    if mixed_precision not in PRECISIONS:
        raise ArgumentError(f"mixed_precision={mixed_precision!r}; expected None, 'bf16' or 'fp16'.")
    if mixed_precision == "fp16" and device.type != "cuda":
        raise ArgumentError("mixed_precision='fp16' needs a CUDA device (loss scaling); on CPU use 'bf16'.")


class Precision:
    """Forward under :func:`torch.autocast` in bf16/fp16; with fp16, backward and step through a
    :class:`torch.amp.GradScaler` (dynamic loss scaling, Micikevicius et al., "Mixed Precision Training", 2018).

    Raises:
        ValueError: see :func:`validate_precision`.
    """

    def __init__(self, device: torch.device, mixed_precision: str | None):
        validate_precision(mixed_precision, device)
        self.device = device
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
        self.scaler = torch.amp.GradScaler("cuda") if mixed_precision == "fp16" else None

    def autocast(self):
        """A context for the forward pass (a no-op in full precision)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; with fp16 unscale first, skip on inf/nan, and update the scale."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()
