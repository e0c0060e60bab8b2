"""What each object given to :class:`~allgpu.checkpoint.tf_checkpoint.Checkpoint` saves, and how it is restored.

TensorFlow's ``tf.train.Checkpoint`` takes *trackables* (models, optimizers, variables). Here they are:

- ``torch.nn.Module``: its ``state_dict()`` (restored with ``load_state_dict``, errors naming missing keys);
- ``torch.optim.Optimizer``: its ``state_dict()``;
- a Keras model or layer (PyTorch backend): its variables' values, in ``model.variables`` order (Keras's own
  ``save_weights`` order), with their paths for messages;
- a Keras optimizer: its variables (``iterations``, moments), restored once it is built;
- anything with ``state_dict()`` and ``load_state_dict()`` (learning-rate schedulers, ``GradScaler``);
- a ``torch.Tensor``: its value, restored in place;
- a variable with ``numpy()`` and ``assign()`` (a ``tf.Variable`` step or epoch counter, as TensorFlow's
  multi-worker tutorial checkpoints, or a ``keras.Variable``): its value, restored with ``assign``.

Tensors are saved on CPU, so the file loads with ``torch.load(weights_only=True)`` on any device.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from allgpu import keras as keras_support
from allgpu.checkpoint.sharded_model import is_fully_sharded
from allgpu.checkpoint.state import cpu_copy, load_model, load_optimizer
from allgpu.errors import ArgumentTypeError, CheckpointError, UnsupportedError

KINDS = ("keras", "keras_optimizer", "module", "optimizer", "state_dict", "tensor", "variable")


def _is_keras_optimizer(obj: Any) -> bool:
    keras = sys.modules.get("keras")
    optimizers = getattr(keras, "optimizers", None)
    return optimizers is not None and isinstance(obj, optimizers.Optimizer)


def kind_of(name: str, obj: Any) -> str:
    """Which of :data:`KINDS` ``obj`` is.

    Raises:
        TypeError: ``obj`` is none of them (the message names the argument and what is accepted).
    """
    if keras_support.is_keras_model(obj):
        return "keras"
    if _is_keras_optimizer(obj):
        return "keras_optimizer"
    if isinstance(obj, nn.Module):
        return "module"
    if isinstance(obj, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(obj, torch.Tensor):
        return "tensor"
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
        return "state_dict"
    if callable(getattr(obj, "numpy", None)) and callable(getattr(obj, "assign", None)):
        return "variable"
    raise ArgumentTypeError(
        f"Checkpoint({name}=...) got a {type(obj).__name__}, which allgpu cannot save. Accepted: a torch.nn.Module, "
        "a torch.optim.Optimizer, a Keras model or optimizer, a torch.Tensor, a variable (tf.Variable, "
        "keras.Variable), or an object with state_dict() and load_state_dict(). Fix: pass a number as a tensor "
        f"({name}=torch.tensor(value)) or a keras.Variable.")


def check_savable(name: str, obj: Any, kind: str) -> None:
    """Raise before anything is written when ``obj`` holds sharded state this single-file format cannot hold.

    Raises:
        UnsupportedError: a model sharded by ``FullyShardedStrategy`` (save it with ``allgpu.checkpoint.save``).
    """
    sharded = (kind == "module" and is_fully_sharded(obj)) or (kind == "keras" and any(
        type(v.value).__name__ == "DTensor" for v in obj.variables))
    if sharded:
        raise UnsupportedError(
            f"Checkpoint({name}=...) is sharded by FullyShardedStrategy; this single-file format would gather it on "
            "one replica. Fix: allgpu.checkpoint.save(directory, model, optimizer), which writes each replica's "
            "shard (restore with allgpu.checkpoint.restore).")


def capture(obj: Any, kind: str) -> dict:
    """``{"kind": kind, "state": ...}``: ``obj``'s state with every tensor copied to CPU."""
    if kind in ("keras", "keras_optimizer"):
        variables = obj.variables
        state = {"values": [v.value.detach().to("cpu", copy=True) for v in variables],
                 "paths": [str(v.path) for v in variables]}
    elif kind == "tensor":
        state = obj.detach().to("cpu", copy=True)
    elif kind == "variable":
        state = torch.as_tensor(np.array(obj.numpy()))
    else:
        state = cpu_copy(obj.state_dict(), clone=True)
    return {"kind": kind, "state": state}


def restore(name: str, obj: Any, kind: str, saved: dict, source: Path) -> bool:
    """Load ``saved`` (from :func:`capture`) into ``obj`` in place. Returns False when ``obj`` cannot take it yet
    (a Keras model or optimizer not built: TensorFlow would restore it when built), True when restored.

    Raises:
        CheckpointError: ``saved`` is another kind of object, or its sizes do not fit ``obj`` (naming both).
    """
    if saved.get("kind") != kind:
        raise CheckpointError(f"checkpoint {source}: '{name}' was saved from a {saved.get('kind')}, and this "
                              f"Checkpoint's {name}= is a {kind}. Fix: pass the same kind of object as when saved.")
    state = saved["state"]
    if kind == "module":
        load_model(obj, state, strict=True, source=source)
    elif kind == "optimizer":
        load_optimizer(obj, state, source=source)
    elif kind == "tensor":
        _fit(name, [obj], [state], source)
        with torch.no_grad():
            obj.copy_(state)
    elif kind == "state_dict":
        obj.load_state_dict(state)
    elif kind == "variable":
        _fit(name, [np.asarray(obj.numpy())], [state], source)
        obj.assign(state.numpy())
    else:
        if not obj.built and state["values"]:
            return False
        variables = obj.variables
        _fit(name, [v.value for v in variables], state["values"], source, state["paths"])
        for variable, value in zip(variables, state["values"]):
            variable.assign(value.to(variable.value.device))
    return True


def restore_when_built(name: str, obj: Any, saved: dict, source: Path, after: Callable[[], None]) -> None:
    """TensorFlow's restore-on-create for a Keras model not built yet (a ``Sequential`` without ``Input`` builds at
    its first call): once Keras has built it, ``saved`` is assigned to its variables, then ``after()`` runs (the
    Checkpoint's unbuilt optimizers). Wraps the instance's ``build`` (Keras's own per-instance wrapper) once; the
    first build restores and puts the wrapper back. Before, such a model kept its initial weights without a word:
    TensorFlow's custom-training tutorial evaluated its restored copy at chance accuracy."""
    build = obj.build

    @functools.wraps(build)
    def build_then_restore(*args, **kwargs):
        obj.build = build
        result = build(*args, **kwargs)
        restore(name, obj, "keras", saved, source)
        after()
        return result

    obj.build = build_then_restore


def _fit(name: str, mine: list, saved: list, source: Path, paths: list | None = None) -> None:
    if len(mine) != len(saved):
        raise CheckpointError(f"checkpoint {source}: '{name}' saved {len(saved)} variables and has {len(mine)} now. "
                              "Fix: build the model (and optimizer) exactly as when saved.")
    for i, (a, b) in enumerate(zip(mine, saved)):
        if tuple(a.shape) != tuple(b.shape):
            what = paths[i] if paths else f"value {i}"
            raise CheckpointError(f"checkpoint {source}: '{name}' variable {what} has shape {tuple(b.shape)} in the "
                                  f"checkpoint and {tuple(a.shape)} now. Fix: build it with the sizes it had when saved.")
