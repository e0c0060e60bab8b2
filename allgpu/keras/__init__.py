"""Keras 3 (PyTorch backend) models trained on every replica by ``model.fit``, as under ``tf.distribute``.

Glossary: a *Keras model* here is a ``keras.Model`` (Sequential, functional or subclassed) running on Keras's
PyTorch backend (``KERAS_BACKEND=torch``), whose layers are ``torch.nn.Module`` objects and whose variables are
``torch.nn.Parameter`` objects. Keras creates most variables lazily, when the model first sees data, which is
usually after ``strategy.scope()`` has exited.

``strategy.scope()`` adopts each Keras model constructed inside it as its construction returns
(:class:`ModelRecorder`), and
``strategy.mirror(model)`` adopts one built outside; each gets a :class:`~allgpu.keras.replica.KerasReplica`,
which makes its own ``fit`` / ``evaluate`` distribute. Nothing here imports Keras until Keras is in use: this
module is imported by the strategies, the submodules that need Keras are imported on demand.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["ModelRecorder", "is_keras_model", "adopt"]


def _keras():
    """The imported Keras 3 module (any backend), else None (never imports it)."""
    keras = sys.modules.get("keras")
    if keras is None or not hasattr(keras, "Model"):
        return None
    return keras


def is_keras_model(obj: Any) -> bool:
    """True for a Keras layer or model (any backend), without importing Keras."""
    keras = sys.modules.get("keras")
    return keras is not None and hasattr(keras, "Layer") and isinstance(obj, keras.Layer)


class ModelRecorder:
    """Hands each Keras model (or, with ``kind="Metric"``, each Keras metric) constructed while active to
    ``on_model`` when its construction returns (``tf.keras`` captured the strategy in ``Model.__init__``).

    While active, ``keras.Model.__init__`` is wrapped: when the outermost ``__init__`` returns (a ``Sequential``
    built with an ``Input`` constructs a functional model inside its own), ``on_model(models)`` receives the
    models constructed during it, outermost last; the original is put back on exit. Inactive (records nothing)
    when Keras is not imported. On another backend than PyTorch it records too, so that :func:`adopt` refuses
    the model (``UnsupportedError``) at the user's construction line instead of each replica training alone.

    Args:
        on_model: called with the list of models whose construction just returned; ``None`` only collects them
            in ``models``.
    """

    def __init__(self, on_model=None, kind: str = "Model"):
        self.models: list = []
        self._on_model = on_model
        self._kind = kind
        self._model_cls = None
        self._original = None

    def __enter__(self) -> "ModelRecorder":
        keras = _keras()
        if keras is None:
            return self
        # the same class on every backend; a Keras without metrics (a stand-in) records no metric
        Model = keras.Model if self._kind == "Model" else getattr(getattr(keras, "metrics", None), "Metric", None)
        if Model is None:
            return self
        self._model_cls, self._original = Model, Model.__dict__["__init__"]
        original, recorder = self._original, self
        depth = [0]

        @functools.wraps(original)
        def recording_init(self, *args, **kwargs):  # `self`: Keras reads this name (Operation.__new__)
            depth[0] += 1
            start = len(recorder.models)
            try:
                original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            recorder.models.append(self)
            if depth[0] == 0 and recorder._on_model is not None:
                recorder._on_model(recorder.models[start:])

        Model.__init__ = recording_init
        return self

    def __exit__(self, *exc) -> None:
        if self._model_cls is not None:
            self._model_cls.__init__ = self._original
            self._model_cls = None


def adopt(strategy, models: list) -> list:
    """Attach a :class:`~allgpu.keras.replica.KerasReplica` to each model not yet attached; mirror what is built.

    A collective when any model has built variables (they are broadcast from replica 0).

    Raises:
        UnsupportedError: Keras is not running on the PyTorch backend.
    """
    if not models:
        return []
    keras = _keras()
    backend = keras.backend.backend() if keras is not None else "unknown"
    if backend != "torch":
        from allgpu.errors import UnsupportedError

        raise UnsupportedError(
            f"allgpu distributes Keras models on the PyTorch backend only; this Keras runs on {backend!r}, so "
            f"{type(models[-1]).__name__} would train alone on every replica. Fix: put "
            "os.environ[\"KERAS_BACKEND\"] = \"torch\" before the first `import keras` (`allgpu migrate` adds it).")
    from allgpu.keras.replica import KerasReplica

    replicas = []
    for model in _outermost(models):
        replica = model.__dict__.get("_allgpu_replica")
        if replica is None or replica.strategy is not strategy:
            replica = KerasReplica(model, strategy)
        replicas.append(replica)
    if strategy.device.type == "cuda":
        import torch

        torch.cuda.set_device(strategy.device)  # Keras places variables on "cuda", the current device
    for replica in replicas:
        if replica.model.built:
            replica.mirror_built_variables()
    return replicas


def _outermost(models: list) -> list:
    """``models`` without those nested in another of them (a ``Sequential`` built with an ``Input`` makes its own
    functional model inside): the outer model's variables include theirs, and it is the one trained."""
    inner = set()
    for model in models:
        nested = [*model.modules(), *model._flatten_layers(include_self=False)]
        inner.update(id(m) for m in nested if m is not model)
    return [m for m in models if id(m) not in inner]
