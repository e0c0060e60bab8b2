"""Metrics for ``fit`` / ``evaluate``: per-batch sums on each replica, reduced across replicas once an epoch.

A metric is a name (``"accuracy"``) or a callable ``fn(outputs, targets) -> (total, count)``, returning the sum of
the metric over the batch's examples and the number of examples, so the mean over all replicas is exact even
when replicas hold different counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterable

import torch

from allgpu.errors import ArgumentError, InputError

MetricFn = Callable[[torch.Tensor, torch.Tensor], "tuple[torch.Tensor | float, int]"]


def logits_of(outputs: Any) -> torch.Tensor:
    """The logits in a model's outputs: the tensor itself; a Hugging Face ``ModelOutput``'s (or a dict's, or a
    named tuple's such as torchvision's ``InceptionOutputs``) ``logits``; a tuple's or list's first element.

    Raises:
        InputError: none of these (the fix: ``metrics=()``, or a callable metric that reads the outputs).
    """
    if isinstance(outputs, torch.Tensor):
        return outputs
    found = outputs.get("logits") if isinstance(outputs, Mapping) else getattr(outputs, "logits", None)
    if found is None and isinstance(outputs, (tuple, list)) and outputs:
        found = outputs[0]
    if isinstance(found, torch.Tensor):
        return found
    raise InputError(f"fit/evaluate's built-in accuracy needs logits; the model returned a "
                     f"{type(outputs).__name__} without a `logits` tensor. Fix: metrics=() (the loss alone), or "
                     "a callable metric fn(outputs, targets) -> (total, count) that reads your model's outputs.")


def accuracy(outputs: Any, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Top-1 accuracy for ``outputs`` of shape ``(batch, classes)`` and integer ``targets`` of shape ``(batch,)``.

    Binary outputs of shape ``(batch,)`` or ``(batch, 1)`` are thresholded at 0 (logits). Outputs that are no
    tensor are read through :func:`logits_of` (a Hugging Face model's ``outputs.logits``).
    """
    outputs = logits_of(outputs)
    if outputs.dim() == 1 or outputs.shape[-1] == 1:
        predicted = (outputs.reshape(-1) > 0).long()
    else:
        predicted = outputs.argmax(dim=-1)
    return (predicted == targets.reshape(predicted.shape)).sum(), targets.shape[0]


BUILTIN: dict[str, MetricFn] = {"accuracy": accuracy, "acc": accuracy}


def resolve(metrics: Iterable) -> dict[str, MetricFn]:
    """Map names and callables to ``{name: fn}``. Raises ValueError for an unknown name."""
    out: dict[str, MetricFn] = {}
    for metric in metrics or ():
        if callable(metric):
            out[getattr(metric, "__name__", "metric")] = metric
        elif metric in BUILTIN:
            out["accuracy" if metric == "acc" else metric] = BUILTIN[metric]
        else:
            raise ArgumentError(f"unknown metric {metric!r}; expected one of {sorted(BUILTIN)} or a callable "
                             "fn(outputs, targets) -> (total, count).")
    return out


class MetricSums:
    """Running sums on one replica: loss and each metric, with example counts. Kept on the device."""

    def __init__(self, fns: dict[str, MetricFn], device: torch.device):
        self.fns = fns
        self.names = ["loss", *fns]
        self.sums = torch.zeros(2 * len(self.names), dtype=torch.float64, device=device)

    def update(self, loss: torch.Tensor, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        n = targets.shape[0]
        if n == 0:  # a replica with no example of a short last batch: its loss is the mean of nothing (NaN)
            return
        with torch.no_grad():
            self.sums[0] += loss.detach().double() * n
            self.sums[1] += n
            for i, fn in enumerate(self.fns.values(), start=1):
                total, count = fn(outputs.detach() if isinstance(outputs, torch.Tensor) else outputs, targets)
                self.sums[2 * i] += torch.as_tensor(total, dtype=torch.float64, device=self.sums.device)
                self.sums[2 * i + 1] += count

    def result(self, strategy, prefix: str = "") -> dict[str, float]:
        """Means over every example of every replica (one all-reduce)."""
        totals = strategy.reduce("sum", self.sums).cpu().tolist()
        return {prefix + name: totals[2 * i] / max(totals[2 * i + 1], 1) for i, name in enumerate(self.names)}
