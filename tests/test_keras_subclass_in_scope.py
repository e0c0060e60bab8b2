"""A ``keras.Model`` subclass with no ``__init__`` of its own (keras-io's "Customizing what happens in fit()":
``class CustomModel(keras.Model)`` overriding only ``train_step``, built functionally) constructed in
``strategy.scope()``: Keras reads the name of ``cls.__init__``'s first parameter, which was allgpu's wrapper's."""

import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import allgpu  # noqa: E402
from allgpu.keras import ModelRecorder  # noqa: E402

pytestmark = pytest.mark.unit


class CustomModel(keras.Model):
    def train_step(self, data):  # inherits keras.Model.__init__, the method scope() wraps
        return super().train_step(data)


def test_functional_subclass_without_init_builds_in_scope_and_trains():
    with ModelRecorder() as recorder:  # what scope() opens (before: KeyError: 'model' in Keras's __new__)
        inputs = keras.Input((4,))
        model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    assert recorder.models[-1] is model
    assert model.get_config()["name"] == model.name  # Keras's automatic config still recorded

    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        inputs = keras.Input((4,))
        model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
        model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    history = model.fit(x, x.sum(axis=1, keepdims=True), batch_size=8, epochs=2, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]
