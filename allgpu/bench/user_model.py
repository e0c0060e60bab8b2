"""``allgpu bench --predict --model FILE.py:FUNCTION``: the user's own model, not a built-in one.

``FUNCTION`` (or ``package.module:FUNCTION``) is called with no arguments and returns either a ``torch.nn.Module``
(then ``--input-shape`` gives one example's shape, the batch is standard-normal floats, and targets are class
indices below ``--classes`` for cross-entropy) or a tuple ``(model, (x, y))`` of a module and one device's batch,
for models whose inputs are not float tensors (token ids) or whose loss is not cross-entropy (give ``loss_fn`` as a
third element). One device's step is then measured as for the built-in models.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Callable

import torch

from allgpu.errors import ArgumentError


def is_spec(name: str) -> bool:
    """True when ``name`` names a user's builder (``FILE.py:FUNCTION`` or ``module:FUNCTION``)."""
    return ":" in name


def load_builder(spec: str) -> Callable:
    """The function ``spec`` names. Raises ArgumentError naming what is missing (file, module or function)."""
    target, _, function = spec.rpartition(":")
    if not target or not function:
        raise ArgumentError(f"--model {spec!r}: expected FILE.py:FUNCTION or package.module:FUNCTION.")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise ArgumentError(f"--model {spec!r}: file {target} not found.")
        module_spec = importlib.util.spec_from_file_location("allgpu_user_model", target)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))  # its own imports, as `python FILE.py` finds them
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise ArgumentError(f"--model {spec!r}: module {target} cannot be imported ({exc}).") from None
    builder = getattr(module, function, None)
    if not callable(builder):
        raise ArgumentError(f"--model {spec!r}: {target} has no function {function}().")
    return builder


def build(spec: str, device: torch.device, input_shape: tuple[int, ...] | None, classes: int | None,
          batch: int) -> tuple[torch.nn.Module, Callable, Callable | None]:
    """``(model on device, make_batch() -> (x, y), loss_fn or None)`` from the user's builder."""
    made = load_builder(spec)()
    loss_fn = None
    if isinstance(made, tuple):
        if len(made) not in (2, 3) or not isinstance(made[0], torch.nn.Module):
            raise ArgumentError(f"--model {spec!r} returned a tuple; expected (model, (x, y)) or "
                                "(model, (x, y), loss_fn).")
        model, (x, y) = made[0], made[1]
        loss_fn = made[2] if len(made) == 3 else None
        x, y = x.to(device), y.to(device)

        def make_batch():
            return x, y
    elif isinstance(made, torch.nn.Module):
        if input_shape is None or classes is None:
            raise ArgumentError(f"--model {spec!r} returned a module: give --input-shape (one example, e.g. 3,32,32) "
                                "and --classes, or return (model, (x, y)) from the function.")
        model = made
        g = torch.Generator().manual_seed(0)
        batches = [(torch.randn(batch, *input_shape, generator=g).to(device),
                    torch.randint(0, classes, (batch,), generator=g).to(device)) for _ in range(4)]
        state = {"i": 0}

        def make_batch():
            state["i"] += 1
            return batches[state["i"] % len(batches)]
    else:
        raise ArgumentError(f"--model {spec!r} returned a value of type {type(made).__name__}; expected a "
                            "torch.nn.Module or (model, (x, y)).")
    return model.to(device), make_batch, loss_fn


def profile_user_model(spec: str, device: str = "cpu", input_shape=None, classes=None, batch: int = 32):
    """Measure one device's step of the user's model (:func:`allgpu.bench.predict.measure`)."""
    from allgpu.bench.predict import measure

    dev = torch.device(device)
    torch.manual_seed(0)
    model, make_batch, loss_fn = build(spec, dev, input_shape, classes, batch)
    profile = measure(model, make_batch, loss_fn=loss_fn)
    profile.label = f"{spec} on {device}"
    return profile


def shape(text: str) -> tuple[int, ...]:
    """argparse type for ``--input-shape``: comma-separated positive whole numbers (``3,32,32``)."""
    import argparse

    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated whole numbers, e.g. 3,32,32") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be >= 1")
    return dims
