"""fit(tf.data dataset, class_weight=...) as Keras does it (found with the imbalanced-classes recipe moved over:
allgpu refused it with InputError, though Keras maps a dataset's labels to sample weights itself): 2 Gloo replicas
end with the weights and History of plain Keras on one process, uneven last batch included."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np
import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import allgpu  # noqa: E402

pytestmark = pytest.mark.replicas
CLASS_WEIGHT = {0: 0.25, 1: 3.0}


def _train(strategy=None):
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 4)).astype("float32")  # 90 = 5 batches of 16 and one of 10
    y = (x[:, 0] > 0.8).astype("int64")  # about one in five is class 1
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, kernel_initializer="zeros")])
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), weighted_metrics=["accuracy"])
        return model

    if strategy is None:
        model = build()
    else:
        with strategy.scope():
            model = build()
    history = model.fit(ds, epochs=3, verbose=0, class_weight=CLASS_WEIGHT)
    return {"weights": model.get_weights(), "history": history.history}


def _replica():
    return _train(allgpu.MirroredStrategy())


@pytest.mark.timeout(300)
def test_class_weight_with_a_dataset_on_two_replicas_equals_keras():
    plain = _train()
    for result in allgpu.launch(_replica, num_replicas=2):
        for got, want in zip(result["weights"], plain["weights"]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for name, values in plain["history"].items():
            np.testing.assert_allclose(result["history"][name], values, rtol=1e-4)
